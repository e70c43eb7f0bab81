//! No import cycle among the files of any crate of the workspace: the
//! library of each package (`src/`, `crates/*/src/`, its `bin/` aside),
//! each binary (`src/bin/<name>/` or `src/bin/<name>.rs`), each test or
//! example crate of several files (`tests/<name>/main.rs`,
//! `examples/<name>/main.rs`, the companion crates' too).
//!
//! A file's edges are those of the other checks — the `crate::…`,
//! `super::…` and `self::…` paths in its code, each resolved to the file
//! that defines the module it names — and the paths that start at a
//! module the file declares (`mod args;` then `args::Args`), so a root
//! (`main.rs`) whose files import back from it (`crate::Args`) is a cycle
//! too: a crate's root declares its modules and starts the program, its
//! files import what they use from the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::imports::{code, find_cycle, paths, resolve, rust_files};

/// A crate of the workspace: the folder its files are named from, the
/// file that is its root there, and the folders under it that belong to
/// other crates.
#[derive(Debug)]
struct Crate {
    base: PathBuf,
    root: PathBuf,
    other: Vec<PathBuf>,
}

/// Every crate of the workspace: each package's library, binaries, and the
/// test and example crates of several files.
fn crates(repo: &Path) -> Vec<Crate> {
    let mut packages = vec![repo.to_path_buf()];
    for member in std::fs::read_dir(repo.join("crates")).unwrap() {
        let member = member.unwrap().path();
        if member.join("Cargo.toml").is_file() {
            packages.push(member);
        }
    }
    packages.sort();
    let mut out = Vec::new();
    for package in packages {
        let src = package.join("src");
        if src.join("lib.rs").is_file() {
            out.push(Crate {
                root: src.join("lib.rs"),
                other: vec![src.join("bin")],
                base: src.clone(),
            });
        }
        for (dir, root) in [
            ("src/bin", "main.rs"),
            ("tests", "main.rs"),
            ("examples", "main.rs"),
        ] {
            for entry in std::fs::read_dir(package.join(dir)).into_iter().flatten() {
                let path = entry.unwrap().path();
                if path.join(root).is_file() {
                    out.push(Crate {
                        root: path.join(root),
                        base: path,
                        other: Vec::new(),
                    });
                }
            }
        }
    }
    out
}

/// The module `file` defines in `krate`: its path under the base without
/// `.rs`, a folder's `mod.rs` as the folder, the root as `[]`.
fn module_of(krate: &Crate, file: &Path) -> Vec<String> {
    if file == krate.root {
        return Vec::new();
    }
    let rel = file.strip_prefix(&krate.base).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") {
        parts.pop();
    }
    parts
}

/// The names of the modules `code` declares from files (`mod args;`).
fn declared(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            out.insert(name.trim().to_owned());
        }
    }
    out
}

/// The first segment of each path in `code` that starts at a name of
/// `names` (at a word boundary, not after `::`), as a `self::` path.
fn child_paths(code: &str, names: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for name in names {
        let needle = format!("{name}::");
        for (at, _) in code.match_indices(&needle) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            out.push(vec!["self".to_owned(), name.clone()]);
        }
    }
    out
}

/// The file-level import graph of `krate`.
fn crate_graph(krate: &Crate) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files: Vec<PathBuf> = rust_files(&krate.base)
        .into_iter()
        .filter(|f| !krate.other.iter().any(|o| f.starts_with(o)))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(krate, f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let from = module_of(krate, file);
        let code = code(&std::fs::read_to_string(file).unwrap());
        let mut found = paths(&code);
        found.extend(child_paths(&code, &declared(&code)));
        let to: BTreeSet<Vec<String>> = found
            .iter()
            .filter_map(|p| resolve(&from, p, &modules, &[]))
            .filter(|m| *m != from)
            .collect();
        edges.insert(from, to);
    }
    edges
}

/// Crates whose cycle is being taken apart by work in flight (issue 52),
/// each with the cycle it has: the check fails once one has none left, so
/// that the list only shrinks.
const LEFT: [(&str, &str); 0] = [];

#[test]
fn the_files_of_every_crate_of_the_workspace_import_each_other_without_a_cycle() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let crates = crates(&repo);
    let named: Vec<String> = crates
        .iter()
        .map(|c| c.root.strip_prefix(&repo).unwrap().display().to_string())
        .collect();
    for expected in [
        "src/lib.rs",
        "crates/sim/src/lib.rs",
        "crates/gateway/src/lib.rs",
        "crates/eval/src/lib.rs",
        "crates/eval/src/bin/fleet/main.rs",
        "tests/architecture/main.rs",
    ] {
        assert!(
            named.iter().any(|n| n == expected),
            "{expected} found: {named:?}"
        );
    }
    let (mut cycles, mut gone) = (Vec::new(), Vec::new());
    for (krate, name) in crates.iter().zip(&named) {
        let cycle = find_cycle(&crate_graph(krate)).map(|cycle| {
            let names: Vec<String> = cycle
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "<root>".to_owned()
                    } else {
                        m.join("/")
                    }
                })
                .collect();
            names.join(" -> ")
        });
        match (cycle, LEFT.iter().find(|(left, _)| left == name)) {
            (Some(cycle), Some((_, known))) if cycle == *known => {}
            (Some(cycle), _) => cycles.push(format!("{name}: {cycle}")),
            (None, Some(_)) => gone.push(name.clone()),
            (None, None) => {}
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
    assert!(
        gone.is_empty(),
        "no cycle left in {gone:?}: take it off LEFT"
    );
}

#[test]
fn the_graph_of_a_binary_sees_its_root_and_its_files() {
    let code = code("mod args;\nmod run;\nuse args::Args;\nfn f() { run::go(); x::args::y(); }\n");
    assert_eq!(
        declared(&code),
        BTreeSet::from(["args".to_owned(), "run".to_owned()])
    );
    let found = child_paths(&code, &declared(&code));
    assert_eq!(found.len(), 2, "args:: and run::, not x::args::: {found:?}");
}
