//! Reading the import graph of a crate's files: the paths each file's code
//! names, resolved to the files that define them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted; `target/` and hidden folders are
/// skipped.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
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
pub(crate) fn module_of(base: &Path, file: &Path) -> Vec<String> {
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
pub(crate) fn code(src: &str) -> String {
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

/// Every path in `code` that starts at `crate::`, `super::` or
/// `self::`.
pub(crate) fn paths(code: &str) -> Vec<Vec<String>> {
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
pub(crate) fn resolve(
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
pub(crate) fn graph(base: &Path, root: &[&str]) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
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
pub(crate) fn find_cycle(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Option<Vec<Vec<String>>> {
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
