//! The crate's shape, checked (`cargo test --test architecture`):
//!
//! * no import cycle among the files of `src/balance/` — a file's edges are
//!   the `crate::balance::…`, `super::…` and `self::…` paths in its code
//!   (comments and inline test modules left out), each resolved to the
//!   file that defines the module it names, a folder's `mod.rs` included;
//! * the ground modules (`error`'s own files, `backend`, `route`, `ring`,
//!   `endpoint`, `buffer`) import only one another, without a cycle;
//! * each top-level module of `src/` imports only modules of the layers
//!   below its own in the map ([`LAYERS`], drawn in docs/ARCHITECTURE.md);
//! * no import cycle among the files of `src/` (test files aside): a
//!   folder's `mod.rs` may re-export its files, so they import what they
//!   use by the path of the file that defines it, never back through it;
//! * no import cycle among the files of the simulated servers
//!   (`crates/sim/src/`);
//! * no Rust file in the repository over 450 lines;
//! * no file includes one from a `tests/` folder by `#[path]` (`includes`):
//!   shared test code is `crates/test-support`'s;
//! * `docs/ARCHITECTURE.md` names every top-level file of `src/` and every
//!   folder of `src/` and of the companion crates' sources that holds code
//!   (test files aside), and no file or folder that does not exist; every
//!   file of code opens with its module doc (`//!`), the map below the
//!   folders.

mod crates;
mod imports;
mod includes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use imports::{code, find_cycle, graph, paths, resolve, rust_files};

/// The longest a Rust file may be, in lines.
const MAX_LINES: usize = 450;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "balance/mod.rs".to_owned()
    } else {
        format!("balance/{}", module.join("/"))
    }
}

#[test]
fn the_files_of_the_balancer_import_each_other_without_a_cycle() {
    let edges = graph(&root().join("src/balance"), &["balance"]);
    assert!(edges.len() > 20, "the balancer's files were found");
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 50,
        "their imports were read"
    );
    if let Some(cycle) = find_cycle(&edges) {
        let cycle: Vec<String> = cycle.iter().map(|m| name(m)).collect();
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

/// The ground modules' node of a module of `src/`: `route`'s and `ring`'s
/// files as one node each (their folder's `mod.rs` defines the types its
/// files use), `backend`'s and `error`'s file by file (their `mod.rs` and
/// `error.rs` re-export); `None` above the ground — `error.rs` included,
/// which re-exports the errors of `route`, `balance` and `placement`.
fn ground(module: &[String]) -> Option<Vec<String>> {
    match module.first().map(String::as_str)? {
        "route" | "ring" | "endpoint" | "buffer" => Some(module[..1].to_vec()),
        "backend" => Some(module.to_vec()),
        "error" if module.len() > 1 => Some(module.to_vec()),
        _ => None,
    }
}

#[test]
fn the_ground_modules_import_only_one_another_without_a_cycle() {
    let edges = graph(&root().join("src"), &[]);
    let mut nodes: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut above = Vec::new();
    for (from, to) in &edges {
        let Some(node) = ground(from) else { continue };
        let out = nodes.entry(node.clone()).or_default();
        for module in to {
            match ground(module) {
                Some(next) if next != node => {
                    out.insert(next);
                }
                Some(_) => {}
                None => above.push(format!("{} -> {}", from.join("/"), module.join("/"))),
            }
        }
    }
    assert!(nodes.len() >= 10, "the ground files were found: {nodes:?}");
    assert!(
        above.is_empty(),
        "ground modules import from above: {above:?}"
    );
    if let Some(cycle) = find_cycle(&nodes) {
        let cycle: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

/// The map of `src/`'s top-level modules, bottom up: a module imports only
/// modules of lower layers. The ground (the first layer) is checked file by
/// file above, so its modules may import one another. `error.rs` (the
/// re-exports of every error, the public paths) and `lib.rs` stand
/// outside: every module above the ground may import the first, and the
/// second imports nothing.
const LAYERS: [&[&str]; 6] = [
    &[
        "error",
        "backend",
        "route",
        "ring",
        "endpoint",
        "buffer",
        "classify",
        "histogram",
        "sync",
        "task",
    ],
    &["breaker", "health"],
    &["discover", "placement", "kv"],
    &["balance"],
    &["hedge"],
    &["metrics", "config", "builder"],
];

/// `module`'s layer in [`LAYERS`]; `None` for `error.rs`, `lib.rs` and a
/// test file (`tests.rs` or under a `tests/` folder: test-only code).
fn layer(module: &[String]) -> Option<usize> {
    if module == ["error"] || module.iter().any(|m| m == "tests") {
        return None;
    }
    let top = module.first()?;
    let found = LAYERS.iter().position(|l| l.contains(&top.as_str()));
    Some(found.unwrap_or_else(|| panic!("`{top}` is in no layer of LAYERS")))
}

#[test]
fn each_module_imports_only_the_layers_below_it() {
    let edges = graph(&root().join("src"), &[]);
    let (mut crossing, mut upward) = (0, Vec::new());
    for (from, to) in &edges {
        let Some(own) = layer(from) else { continue };
        for module in to.iter().filter(|m| m.first() != from.first()) {
            let Some(other) = layer(module) else { continue };
            crossing += 1;
            if other > own || (other == own && own > 0) {
                upward.push(format!("{} -> {}", from.join("/"), module.join("/")));
            }
        }
    }
    assert!(crossing > 100, "the modules' imports were read: {crossing}");
    assert!(
        upward.is_empty(),
        "imports up or across the map: {upward:?}"
    );
}

/// A file of `src/` as a node of the whole crate's graph: test files
/// (`tests.rs`, or under a `tests/` folder) are left out, test-only code
/// that may reach any file it tests.
fn is_test(module: &[String]) -> bool {
    module.iter().any(|m| m == "tests")
}

#[test]
fn the_files_of_the_crate_import_each_other_without_a_cycle() {
    let edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = graph(&root().join("src"), &[])
        .into_iter()
        .filter(|(from, _)| !is_test(from))
        .map(|(from, to)| (from, to.into_iter().filter(|m| !is_test(m)).collect()))
        .collect();
    assert!(
        edges.len() > 150,
        "the crate's files were found: {}",
        edges.len()
    );
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 400,
        "their imports were read"
    );
    if let Some(cycle) = find_cycle(&edges) {
        let cycle: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_files_of_the_simulated_servers_import_each_other_without_a_cycle() {
    let edges = graph(&root().join("crates/sim/src"), &[]);
    assert!(edges.len() > 15, "the simulator's files were found");
    assert!(
        edges.values().map(BTreeSet::len).sum::<usize>() > 40,
        "their imports were read"
    );
    if let Some(cycle) = find_cycle(&edges) {
        let cycle: Vec<String> = cycle.iter().map(|m| m.join("/")).collect();
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let module = |s: &str| s.split('/').map(str::to_owned).collect::<Vec<_>>();
    let mut edges = BTreeMap::new();
    edges.insert(module("a"), BTreeSet::from([module("b")]));
    edges.insert(module("b"), BTreeSet::from([module("c")]));
    edges.insert(module("c"), BTreeSet::from([module("a")]));
    assert_eq!(
        find_cycle(&edges).map(|c| c.len()),
        Some(4),
        "a -> b -> c -> a"
    );
    edges.insert(module("c"), BTreeSet::new());
    assert_eq!(find_cycle(&edges), None);
    let known: BTreeSet<Vec<String>> = [
        vec![],
        module("state"),
        module("state/table"),
        module("choose"),
    ]
    .into();
    let code = code("use crate::balance::state::{table::Table, fleet};\nuse super::super::choose::x;\n// use crate::balance::choose;\n");
    let found: BTreeSet<_> = paths(&code)
        .iter()
        .filter_map(|p| resolve(&module("state/backend"), p, &known, &["balance"]))
        .collect();
    assert_eq!(
        found,
        BTreeSet::from([module("state/table"), module("state"), module("choose")])
    );
}

#[test]
fn no_rust_file_is_over_450_lines() {
    let root = root();
    let long: Vec<String> = rust_files(&root)
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_LINES)
                .then(|| format!("{} ({lines})", f.strip_prefix(&root).unwrap().display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}

/// Whether `file` is test code: a `tests.rs`, or under a `tests/` folder.
fn is_test_file(file: &str) -> bool {
    file.ends_with("tests.rs") || file.contains("/tests/") || file.starts_with("tests/")
}

/// The folders and top-level files the map must name: every file at the
/// top of `src/` (`lib.rs` …), and every folder of `src/` (as `route/`)
/// and of the companion crates' sources (as `crates/sim/src/`) that holds
/// a file of code.
fn map_entries(root: &Path) -> Vec<String> {
    let src = root.join("src");
    let mut entries = BTreeSet::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        if is_test_file(&rel) {
            continue;
        }
        match rel.rsplit_once('/') {
            Some((folder, _)) => entries.insert(format!("{folder}/")),
            None => entries.insert(rel),
        };
    }
    for member in std::fs::read_dir(root.join("crates")).into_iter().flatten() {
        for file in rust_files(&member.unwrap().path().join("src")) {
            let rel = file.strip_prefix(root).unwrap().display().to_string();
            if !is_test_file(&rel) {
                let (folder, _) = rel.rsplit_once('/').unwrap();
                entries.insert(format!("{folder}/"));
            }
        }
    }
    entries.into_iter().collect()
}

#[test]
fn the_architecture_document_names_every_folder_and_every_file_has_its_doc() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let entries = map_entries(&root);
    assert!(
        entries.iter().any(|e| e == "balance/choose/")
            && entries.iter().any(|e| e == "lib.rs")
            && entries.iter().any(|e| e == "crates/sim/src/"),
        "the folders were found: {entries:?}"
    );
    let missing: Vec<&String> = entries
        .iter()
        .filter(|e| !doc.contains(&format!("`{e}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name {missing:?}"
    );
    // Every file of code opens with its module doc, the finer map.
    let mut undocumented = Vec::new();
    for dir in [root.join("src"), root.join("crates")] {
        for file in rust_files(&dir) {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            if is_test_file(&rel) || (rel.starts_with("crates/") && !rel.contains("/src/")) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            if !text.trim_start().starts_with("//!") {
                undocumented.push(rel);
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "files without a module doc: {undocumented:?}"
    );
    // What the map names exists: a file or folder (`balance/choose/`,
    // `choose/`, `src/hedge/future.rs`, `inference.rs`) is the end of the
    // path of one in the repository's sources.
    let mut paths: Vec<String> = Vec::new();
    for dir in ["src", "crates", "examples", "tests"] {
        for file in rust_files(&root.join(dir)) {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            let mut at = rel.as_str();
            paths.push(format!("/{rel}"));
            while let Some((folder, _)) = at.rsplit_once('/') {
                paths.push(format!("/{folder}/"));
                at = folder;
            }
        }
    }
    let named: Vec<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| (s.ends_with(".rs") || s.ends_with('/')) && !s.contains(' '))
        .filter(|s| !s.contains("://"))
        .collect();
    let stale: Vec<&&str> = named
        .iter()
        .filter(|n| {
            let suffix = format!("/{}", n.trim_start_matches('/'));
            !paths.iter().any(|p| p.ends_with(&suffix))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "docs/ARCHITECTURE.md names files or folders that do not exist: {stale:?}"
    );
}
