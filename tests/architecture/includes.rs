//! No file includes another from a `tests/` folder by `#[path]`: the code
//! tests share is a crate (`crates/test-support`), a test's own helpers
//! are modules of its folder, and nothing in `src/` builds test files in.

use std::path::{Component, Path, PathBuf};

use crate::imports::rust_files;
use crate::root;

/// `path` with its `.` and `..` folded in, without touching the disk.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The files `text` (the text of `file`) includes from a `tests/` folder
/// by a `#[path = "…"]` attribute at the start of a line (a comment's
/// starts with `//`), inline test modules included: each as
/// `file -> target`, the target relative to `root`.
fn into_tests(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("#[path") else {
            continue;
        };
        let Some(target) = rest.split('"').nth(1) else {
            continue;
        };
        let resolved = normal(&file.parent().unwrap().join(target));
        let Ok(rel) = resolved.strip_prefix(root) else {
            found.push(format!("{} -> {target} (outside)", file.display()));
            continue;
        };
        // A folder named `tests` on the way; `tests.rs` is a file.
        let folders = rel.parent().into_iter().flat_map(Path::components);
        if folders.into_iter().any(|c| c.as_os_str() == "tests") {
            let from = file.strip_prefix(root).unwrap_or(file);
            found.push(format!("{} -> {}", from.display(), rel.display()));
        }
    }
    found
}

#[test]
fn no_file_includes_one_from_a_tests_folder() {
    let root = root();
    let files = rust_files(&root);
    assert!(
        files.iter().any(|f| f.starts_with(root.join("fuzz")))
            && files.iter().any(|f| f.starts_with(root.join("benches")))
            && files.iter().any(|f| f.starts_with(root.join("crates"))),
        "the workspace's files were found"
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| into_tests(&root, f, &std::fs::read_to_string(f).unwrap()))
        .collect();
    assert!(
        found.is_empty(),
        "files included by #[path] from a tests/ folder (a module of \
         crates/test-support, or of the test's own folder, instead): {found:?}"
    );
}

#[test]
fn the_include_check_finds_the_old_includes() {
    let root = Path::new("/repo");
    let check = |file: &str, text: &str| into_tests(root, &root.join(file), text);
    // The shapes the support files were included by, src's among them.
    let old = "#[path = \"../../tests/support/ready.rs\"]\nmod ready;\n";
    assert_eq!(
        check("src/balance/service.rs", old),
        ["src/balance/service.rs -> tests/support/ready.rs"]
    );
    let old = "#[allow(dead_code)]\n    #[path = \"../support/lcg.rs\"]\nmod lcg;\n";
    assert_eq!(check("tests/balance/main.rs", old).len(), 1);
    let old = "#[path = \"support/ports.rs\"]\nmod ports;\n";
    assert_eq!(check("tests/real_servers.rs", old).len(), 1);
    let old = "#[path = \"../../../../tests/support/etcd.rs\"]\nmod etcd;\n";
    assert_eq!(check("crates/gateway/tests/gateway/main.rs", old).len(), 1);
    let old = "#[path=\"../../tests/support/fuzz_body.rs\"]\nmod fuzz_body;\n";
    assert_eq!(check("fuzz/fuzz_targets/route_body.rs", old).len(), 1);
    // What stays: an example's file, a bench's own, a `tests.rs` file, a
    // comment.
    let kept = "#[path = \"../../examples/tonic_client/client.rs\"]\nmod client;\n";
    assert!(check("tests/hedge/main.rs", kept).is_empty());
    assert!(check(
        "benches/balance.rs",
        "#[path = \"balance/rows.rs\"]\nmod rows;\n"
    )
    .is_empty());
    let kept = "#[path = \"assign/tests.rs\"]\nmod tests;\n";
    assert!(check("src/balance/state/assign.rs", kept).is_empty());
    let kept = "// #[path = \"../support/lcg.rs\"]\n//! `#[path]`\n";
    assert!(check("tests/balance/main.rs", kept).is_empty());
}
