//! The module layout's promise (src/lib.rs, src/agent/mod.rs): within each directory of
//! `src/`, sibling modules import each other downward only, with no circle. Read from the
//! sources (`super::NAME` and `crate::DIR::NAME` outside `#[cfg(test)]`), so a new circle
//! fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The sibling modules of the directory `dir`, with their source files.
fn modules(dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() && path.join("mod.rs").exists() {
            out.insert(name, path.join("mod.rs"));
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            out.insert(name, path);
        }
    }
    out
}

/// The identifiers that follow `prefix` in `text`.
fn names_after<'t>(text: &'t str, prefix: &str) -> Vec<&'t str> {
    text.match_indices(prefix)
        .map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

/// The siblings each module of `dir` (`crate::<pkg>`) uses, outside its tests and comments.
fn graph(dir: &Path, pkg: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(dir);
    let mut out = BTreeMap::new();
    for (name, file) in &mods {
        let text = std::fs::read_to_string(file).unwrap();
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut used = names_after(&code, "super::");
        let own = format!("crate::{pkg}::");
        if !pkg.is_empty() {
            used.extend(names_after(&code, &own));
        }
        let deps = used
            .into_iter()
            .filter(|d| *d != name && mods.contains_key(*d))
            .map(str::to_string)
            .collect();
        out.insert(name.clone(), deps);
    }
    out
}

/// A circle in `g`, if there is one (as the path that closes it).
fn circle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_string());
            return Some(found);
        }
        if !done.insert(at.to_string()) {
            return None;
        }
        path.push(at.to_string());
        for next in g.get(at).into_iter().flatten() {
            if let Some(found) = visit(g, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|start| visit(g, start, &mut Vec::new(), &mut done))
}

#[test]
fn sibling_modules_import_each_other_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![(src.clone(), String::new())];
    let mut circles = Vec::new();
    while let Some((dir, pkg)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                let sub = if pkg.is_empty() {
                    name
                } else {
                    format!("{pkg}::{name}")
                };
                dirs.push((path, sub));
            }
        }
        if pkg.is_empty() {
            // The crate's top level is checked by its layout document, not here.
            continue;
        }
        if let Some(found) = circle(&graph(&dir, &pkg)) {
            circles.push(format!(
                "src/{}: {}",
                pkg.replace("::", "/"),
                found.join(" -> ")
            ));
        }
    }
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn a_circle_is_found() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .iter()
        .map(|(m, d)| (m.to_string(), BTreeSet::from([d.to_string()])))
        .collect();
    assert_eq!(circle(&g).unwrap(), ["a", "b", "c", "a"]);
    let mut line = g.clone();
    line.insert("c".into(), BTreeSet::new());
    assert_eq!(circle(&line), None);
}
