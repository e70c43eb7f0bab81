//! The crate's shape, checked (`cargo test --test architecture`):
//!
//! * no import cycle among the files of `src/balance/` — a file's edges are
//!   the `crate::balance::…`, `super::…` and `self::…` paths in its code
//!   (comments and inline test modules left out), each resolved to the
//!   file that defines the module it names, a folder's `mod.rs` included;
//! * the ground modules (`error`'s own files, `backend`, `route`, `ring`,
//!   `endpoint`, `buffer`) import only one another, without a cycle;
//! * no import cycle among the files of the simulated servers
//!   (`crates/sim/src/`);
//! * no Rust file in the repository over 450 lines;
//! * `docs/ARCHITECTURE.md` names every source file under `src/` (test
//!   modules aside) by its path from `src/`, and every file of a companion
//!   crate under `crates/` by its path from the root, and names no file
//!   that does not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a Rust file may be, in lines.
const MAX_LINES: usize = 450;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted; `target/` and hidden folders are
/// skipped.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module a file under `base` defines: `choose/pick.rs` is
/// `["choose", "pick"]`, `choose/mod.rs` is `["choose"]`, `mod.rs` (and a
/// crate's `lib.rs`) is `[]`.
fn module_of(base: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(base).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().map(String::as_str) == Some("mod") || parts == ["lib"] {
        parts.pop();
    }
    parts
}

/// The code of `src`: line comments dropped (doc comments with them), and
/// everything from an inline `#[cfg(test)] mod tests {` on.
fn code(src: &str) -> String {
    let mut out = String::new();
    for line in src.lines() {
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    match out.find("#[cfg(test)]\nmod tests {") {
        Some(at) => out[..at].to_owned(),
        None => out,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads a path at the start of `s` (`a::b::{c, d::e}`), pushing each
/// full path into `out` with `prefix` in front; returns the bytes read.
fn read_path(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix.to_vec();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        let start = i;
        while i < b.len() && is_ident(b[i] as char) {
            i += 1;
        }
        if i > start {
            segs.push(s[start..i].to_owned());
        }
        if s[i..].starts_with("::{") {
            i += 3;
            loop {
                while i < b.len() && (b[i] as char).is_whitespace() {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return i + 1;
                }
                i += read_path(&s[i..], &segs, out);
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
                if i < b.len() && b[i] == b',' {
                    i += 1;
                }
            }
        }
        if s[i..].starts_with("::") && i > start {
            i += 2;
            continue;
        }
        out.push(segs);
        return i;
    }
}

/// Every path in `code` that starts at `crate::balance::`, `super::` or
/// `self::`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("::") {
        let before = &code[..at];
        let word_start = before.rfind(|c: char| !is_ident(c)).map_or(0, |i| i + 1);
        let word = &before[word_start..];
        // Only the first `::` of a path, at a word boundary.
        if !matches!(word, "crate" | "super" | "self") || code[..word_start].ends_with("::") {
            continue;
        }
        read_path(&code[word_start..], &[], &mut out);
    }
    out
}

/// The module `path`, written in module `from`, lands in: the longest
/// prefix of it that is a known module; `None` outside `crate::{root}`
/// (`root` is where the modules are named from: `["balance"]` for the
/// balancer's files, `[]` for a whole crate's).
fn resolve(
    from: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    root: &[&str],
) -> Option<Vec<String>> {
    let under_root = path
        .get(1..1 + root.len())
        .is_some_and(|segs| segs.iter().eq(root.iter()));
    let (mut base, mut rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
        "crate" if under_root => (Vec::new(), &path[1 + root.len()..]),
        "self" => (from.to_vec(), &path[1..]),
        "super" => (from.to_vec(), path),
        _ => return None,
    };
    while rest.first().map(String::as_str) == Some("super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut best = None;
    for i in 0..=rest.len() {
        let mut candidate = base.clone();
        candidate.extend_from_slice(&rest[..i]);
        if modules.contains(&candidate) {
            best = Some(candidate);
        }
    }
    best
}

/// The file-level graph of the modules under `base`, named from `root`
/// (see [`resolve`]).
fn graph(base: &Path, root: &[&str]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = rust_files(base);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(base, f)).collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let from = module_of(base, file);
        let src = std::fs::read_to_string(file).unwrap();
        let to: BTreeSet<Vec<String>> = paths(&code(&src))
            .iter()
            .filter_map(|p| resolve(&from, p, &modules, root))
            .filter(|m| *m != from)
            .collect();
        edges.insert(from, to);
    }
    edges
}

/// A cycle in `edges`, as the modules on it, if there is one.
fn find_cycle(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        at: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        marks: &mut BTreeMap<Vec<String>, Mark>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        marks.insert(at.clone(), Mark::Open);
        stack.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            match marks.get(next) {
                Some(Mark::Open) => {
                    let from = stack.iter().position(|m| m == next).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(Mark::Done) => {}
                None => {
                    if let Some(cycle) = visit(next, edges, marks, stack) {
                        return Some(cycle);
                    }
                }
            }
        }
        stack.pop();
        marks.insert(at.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for module in edges.keys() {
        if !marks.contains_key(module) {
            if let Some(cycle) = visit(module, edges, &mut marks, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
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

#[test]
fn the_architecture_document_names_every_source_file() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let src = root.join("src");
    // The crate's files by their path from `src/`; the companion crates'
    // (`crates/*/src/`) by their path from the repository's root.
    let mut files: Vec<String> = rust_files(&src)
        .iter()
        .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    let crates = root.join("crates");
    for member in std::fs::read_dir(&crates).into_iter().flatten() {
        let member_src = member.unwrap().path().join("src");
        files.extend(
            rust_files(&member_src)
                .iter()
                .map(|f| f.strip_prefix(&root).unwrap().display().to_string()),
        );
    }
    files.retain(|f| !f.ends_with("tests.rs") && !f.contains("/tests/"));
    assert!(
        files.iter().any(|f| f.starts_with("crates/")),
        "the companion crates' files were found"
    );
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md does not name {missing:?}"
    );
    let named: Vec<&str> = doc
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.ends_with(".rs") && !s.contains(' '))
        .collect();
    let stale: Vec<&&str> = named
        .iter()
        .filter(|f| !src.join(f).is_file() && !root.join(f).is_file())
        .collect();
    assert!(
        stale.is_empty(),
        "docs/ARCHITECTURE.md names files that do not exist: {stale:?}"
    );
}
