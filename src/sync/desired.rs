//! The desired tree of a sync, built offline from the repository's files: every `.zk` and
//! `.zkx` file parsed, `.zk` files merged (they may not share a top-level node), `.zkx` files
//! overlaid on top (a node they name takes their properties, as the original's second import
//! did; nodes they add are kept but not trimmed), then linted. Pure: no I/O.
//!
//! Lints beyond parsing: reserved top-level nodes; per deploy target, two application nodes
//! needing different versions of one package (or a version that is not a string); and bad
//! rollout properties ([`rollout_errors`], shared with `tree check`).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::tree::literal::repr;
use crate::tree::parse::parse_bytes;
use crate::tree::rollout;
use crate::tree::Node;
use crate::zk::import::Trim;
use crate::zk::join;
use crate::zk::links::property;

/// One file of the repository.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    /// File name (top level of the repository).
    pub(crate) name: String,
    /// Content.
    pub(crate) bytes: Vec<u8>,
}

/// An error in the repository's files, naming file and line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct TreeError {
    /// File name.
    pub(crate) file: String,
    /// 1-based line (0 when the file as a whole is meant).
    pub(crate) line: usize,
    /// What is wrong.
    pub(crate) message: String,
}

/// The merged tree and what the sync needs to apply it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Desired {
    /// The merged tree (root at `/`).
    pub(crate) tree: Node,
    /// Paths of nodes defined by `.zk` files: their children are trimmed.
    pub(crate) authoritative: HashSet<String>,
    /// Where each node was (last) defined: path → (file, line).
    origins: HashMap<String, (String, usize)>,
    /// What is allowed but likely a mistake (node or property names in two Unicode
    /// spellings), each naming file and line, its message starting with `warning: `.
    pub(crate) warnings: Vec<TreeError>,
}

impl Desired {
    /// The trim policy for the children of the node at `path`.
    pub(crate) fn trim_of(&self, path: &str) -> Trim {
        if self.authoritative.contains(path) {
            Trim::Yes
        } else {
            Trim::No
        }
    }

    /// The top-level node names (what the repository owns).
    pub(crate) fn roots(&self) -> Vec<String> {
        self.tree
            .children
            .keys()
            .filter(|n| n.as_str() != "role-locks")
            .cloned()
            .collect()
    }

    fn error_at(&self, path: &str, message: String) -> TreeError {
        let (file, line) = self.origins.get(path).cloned().unwrap_or_default();
        TreeError {
            file,
            line,
            message,
        }
    }
}

/// True for the files a sync reads: top-level `*.zk` and `*.zkx`.
pub(crate) fn is_tree_file(name: &str) -> bool {
    !name.contains('/') && (name.ends_with(".zk") || name.ends_with(".zkx"))
}

/// Parses, merges and lints the repository's tree files (given in any order, other files
/// ignored). All errors are returned.
pub(crate) fn build(files: &[SourceFile]) -> Result<Desired, Vec<TreeError>> {
    let tree_files: Vec<SourceFile> = files
        .iter()
        .filter(|f| is_tree_file(&f.name))
        .cloned()
        .collect();
    build_all(&tree_files)
}

/// Parses, merges and lints every file given (names ending in `.zkx` are overlays, any other
/// is a `.zk` file): the lints of a sync that need no ZooKeeper, shared by `sync`, `plan` and
/// `tree check`. All errors are returned.
pub(crate) fn build_all(files: &[SourceFile]) -> Result<Desired, Vec<TreeError>> {
    let mut sorted: Vec<&SourceFile> = files.iter().collect();
    sorted.sort_by_key(|f| (f.name.ends_with(".zkx"), f.name.clone()));
    let mut errors = Vec::new();
    let mut parsed = Vec::new();
    for file in sorted {
        match parse_bytes(&file.bytes) {
            Ok(root) => parsed.push((file.name.clone(), root)),
            Err(e) => errors.push(TreeError {
                file: file.name.clone(),
                line: e.line,
                message: e.message,
            }),
        }
    }
    let mut desired = Desired::default();
    let mut owner: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (file, root) in &parsed {
        let overlay = file.ends_with(".zkx");
        for (name, node) in &root.children {
            let role_locks = crate::zk::paths::ROLE_LOCKS.strip_prefix('/') == Some(name.as_str());
            let reserved = crate::zk::paths::is_reserved_root(name) && (!overlay || !role_locks);
            if reserved {
                let message = format!("/{name} is reserved for zkdeployment's own use and cannot come from the repository");
                errors.push(TreeError {
                    file: file.clone(),
                    line: node.line,
                    message,
                });
                continue;
            }
            if overlay {
                continue;
            }
            if let Some((other, line)) = owner.get(name) {
                let message = format!("duplicate top-level node /{name} (also in {other}:{line})");
                errors.push(TreeError {
                    file: file.clone(),
                    line: node.line,
                    message,
                });
                continue;
            }
            owner.insert(name.clone(), (file.clone(), node.line));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (file, root) in &parsed {
        let authoritative = !file.ends_with(".zkx");
        merge(&mut desired, root, "/", file, authoritative);
    }
    desired.warnings = spelling_warnings(&desired);
    let mut lint = lint_versions(&desired);
    let tree_errors = rollout_errors(&desired.tree)
        .into_iter()
        .chain(instance_errors(&desired.tree));
    for (path, _, message) in tree_errors {
        lint.push(desired.error_at(&path, message));
    }
    if lint.is_empty() {
        Ok(desired)
    } else {
        Err(lint)
    }
}

/// Merges the children of `from` into the node at `path` of the desired tree.
fn merge(desired: &mut Desired, from: &Node, path: &str, file: &str, authoritative: bool) {
    for (name, child) in &from.children {
        let cpath = join(path, name);
        desired
            .origins
            .insert(cpath.clone(), (file.to_string(), child.line));
        if authoritative {
            desired.authoritative.insert(cpath.clone());
        }
        let parent = node_mut(&mut desired.tree, path);
        match parent.children.get_mut(name) {
            Some(existing) => {
                existing.props = child.props.clone();
                existing.raw = child.raw.clone();
                existing.line = child.line;
            }
            None => {
                parent.children.insert(
                    name.clone(),
                    Node {
                        props: child.props.clone(),
                        raw: child.raw.clone(),
                        line: child.line,
                        ..Node::default()
                    },
                );
            }
        }
        merge(desired, child, &cpath, file, authoritative);
    }
}

fn node_mut<'a>(root: &'a mut Node, path: &str) -> &'a mut Node {
    let mut node = root;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        node = node
            .children
            .get_mut(part)
            .expect("merge visits parents first");
    }
    node
}

/// Rollout properties (`max-parallel`, `canary`, `health-deadline`) that cannot be, as
/// (path, line, message): checked on every application node (one with deploy targets),
/// following links as the agent does, and on any other node that sets one itself.
pub(crate) fn rollout_errors(tree: &Node) -> Vec<(String, usize, String)> {
    let mut errors = Vec::new();
    each_node(tree, |path, node| {
        // A value comes from the node itself or through its property link: nodes with
        // neither cost nothing (no link resolution on big trees).
        let sets = |k: &str| {
            node.props.contains_key(k)
                || node
                    .props
                    .contains_key(&format!("{k}{}", crate::tree::PLINK_SUFFIX))
        };
        if !rollout::PROPERTIES.iter().any(|k| sets(k)) {
            return;
        }
        let is_app = path != "/"
            && node
                .children
                .get("deploy")
                .is_some_and(|d| !d.children.is_empty());
        let checked = if is_app {
            rollout::parse(path, |k| property(tree, path, k).ok().flatten())
        } else if rollout::PROPERTIES
            .iter()
            .any(|k| node.props.contains_key(*k))
        {
            rollout::parse(path, |k| node.props.get(k).cloned())
        } else {
            return;
        };
        if let Err(e) = checked {
            errors.push((path.to_string(), node.line, e.to_string()));
        }
    });
    errors
}

/// Calls `f` with every node of `tree` and its path, parents before children, in order.
fn each_node(tree: &Node, mut f: impl FnMut(&str, &Node)) {
    let mut stack = vec![("/".to_string(), tree)];
    while let Some((path, node)) = stack.pop() {
        for (name, child) in node.children.iter().rev() {
            stack.push((join(&path, name), child));
        }
        f(&path, node);
    }
}

/// Sibling nodes, and properties of one node, whose names are two Unicode spellings of one
/// name (NFC and NFD): allowed (ZooKeeper stores both) but two nodes that look identical, so a
/// warning at each spelling after the first, naming the first.
fn spelling_warnings(desired: &Desired) -> Vec<TreeError> {
    use crate::tree::spelling::{same_spellings, shown};
    let mut warnings = Vec::new();
    each_node(&desired.tree, |path, node| {
        for group in same_spellings(node.children.keys().map(String::as_str)) {
            let (first, others) = group.split_first().expect("a group has two names");
            let (file, line) = desired
                .origins
                .get(&join(path, first))
                .cloned()
                .unwrap_or_default();
            for other in others {
                let message = format!(
                    "warning: node {} under {path} is another Unicode spelling of {} ({file}:{line}): two nodes that look identical",
                    shown(other),
                    shown(first)
                );
                warnings.push(desired.error_at(&join(path, other), message));
            }
        }
        for group in same_spellings(node.props.keys().map(String::as_str)) {
            let (first, others) = group.split_first().expect("a group has two names");
            for other in others {
                let message = format!(
                    "warning: property {} of {path} is another Unicode spelling of {}: two properties that look identical",
                    shown(other),
                    shown(first)
                );
                warnings.push(desired.error_at(path, message));
            }
        }
    });
    warnings
}

/// Every deploy node's `n` (its own or through a property link) must be an instance count:
/// `(path, line, message)` per bad one (shared with `tree check`).
pub(crate) fn instance_errors(tree: &Node) -> Vec<(String, usize, String)> {
    let mut errors = Vec::new();
    each_node(tree, |path, node| {
        let Some(deploy) = node.children.get("deploy").filter(|_| path != "/") else {
            return;
        };
        for (target, tnode) in &deploy.children {
            let dpath = join(&join(path, "deploy"), target);
            if let Ok(Some(v)) = property(tree, &dpath, "n") {
                if crate::agent::discover::instance_count(&v).is_none() {
                    let message = format!(
                        "Invalid n for {dpath}: {} (an integer from 0 to 10000)",
                        repr(&v)
                    );
                    errors.push((dpath, tnode.line, message));
                }
            }
        }
    });
    errors
}

/// Per deploy target, one version per package; versions must be strings.
fn lint_versions(desired: &Desired) -> Vec<TreeError> {
    let mut errors = Vec::new();
    let mut seen: BTreeMap<(String, String), (String, String)> = BTreeMap::new();
    let mut stack = vec![("/".to_string(), &desired.tree)];
    while let Some((path, node)) = stack.pop() {
        for (name, child) in node.children.iter().rev() {
            stack.push((join(&path, name), child));
        }
        let Some(deploy) = node
            .children
            .get("deploy")
            .filter(|d| !d.children.is_empty())
        else {
            continue;
        };
        if path == "/" {
            continue;
        }
        let Ok(Some(Value::String(kind))) = property(&desired.tree, &path, "type") else {
            continue;
        };
        let Some(rpm) = kind.split_whitespace().next() else {
            continue;
        };
        let version = match property(&desired.tree, &path, "version") {
            Ok(Some(Value::String(v))) => v,
            Ok(Some(other)) => {
                errors.push(desired.error_at(
                    &path,
                    format!("version of {path} is not a string: {}", repr(&other)),
                ));
                continue;
            }
            _ => continue,
        };
        for target in deploy.children.keys() {
            let key = (target.clone(), rpm.to_string());
            match seen.get(&key) {
                Some((first, first_path)) if *first != version => {
                    let message = format!(
                        "inconsistent versions for {rpm} on {target}: {} ({path}) != {} ({first_path})",
                        crate::tree::literal::repr_str(&version),
                        crate::tree::literal::repr_str(first)
                    );
                    errors.push(desired.error_at(&path, message));
                }
                Some(_) => {}
                None => {
                    seen.insert(key, (version.clone(), path.clone()));
                }
            }
        }
    }
    errors
}
