//! An index by deploy target of a tree held in memory: for every name under a `deploy` node
//! (a host id, a host name or a role), the sorted paths of its deploy nodes
//! (`<app>/deploy/<target>`). Built in one pass over the tree, it answers every host's
//! discovery without a walk per host, with exactly the deploy nodes the agent's walk finds
//! (the same skipped top-level subtrees, [`SKIPPED_ROOTS`]; ephemeral nodes included:
//! discovery skips them).

use std::collections::{BTreeMap, HashMap};

use crate::agent::model::Host;
use crate::tree::Node;
use crate::zk::index::SKIPPED_ROOTS;
use crate::zk::join;
use crate::zk::snapshot::ZNode;

/// A tree whose children can be listed (a parsed text tree, or a subtree read from ZooKeeper).
pub trait Children {
    /// The children by name, sorted.
    fn kids(&self) -> &BTreeMap<String, Self>
    where
        Self: Sized;
}

impl Children for Node {
    fn kids(&self) -> &BTreeMap<String, Node> {
        &self.children
    }
}

impl Children for ZNode {
    fn kids(&self) -> &BTreeMap<String, ZNode> {
        &self.children
    }
}

/// Deploy-node paths by target.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetIndex {
    by_target: HashMap<String, Vec<String>>,
}

impl TargetIndex {
    /// Indexes the tree rooted at `/`.
    pub fn build<T: Children>(root: &T) -> TargetIndex {
        let mut by_target: HashMap<String, Vec<String>> = HashMap::new();
        let mut stack: Vec<(String, &T)> = vec![("/".to_string(), root)];
        while let Some((path, node)) = stack.pop() {
            let is_deploy = path.ends_with("/deploy");
            for (name, child) in node.kids() {
                let child_path = join(&path, name);
                if SKIPPED_ROOTS.contains(&child_path.as_str()) {
                    continue;
                }
                if is_deploy {
                    by_target
                        .entry(name.clone())
                        .or_default()
                        .push(child_path.clone());
                }
                stack.push((child_path, child));
            }
        }
        for paths in by_target.values_mut() {
            paths.sort();
        }
        TargetIndex { by_target }
    }

    /// The deploy nodes named after `host` (its id, name or role), sorted, as the agent's
    /// walk finds them.
    pub fn deploy_nodes(&self, host: &Host) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for target in host.targets() {
            if let Some(paths) = self.by_target.get(target) {
                out.extend(paths.iter().cloned());
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::parse::parse;

    #[test]
    fn finds_the_deploy_nodes_of_each_target() {
        let tree = parse(
            "/a : foo\n  version = '1'\n  /deploy\n    /h1\n    /web\n/b\n  /c : bar\n    /deploy\n      /h1.example.com\n/hosts\n  /deploy\n    /h1\n/deployment-index\n  /deploy\n    /h1\n",
        )
        .unwrap();
        let index = TargetIndex::build(&tree);
        let host = Host {
            id: "h1".into(),
            name: "h1.example.com".into(),
            role: None,
        };
        assert_eq!(
            index.deploy_nodes(&host),
            vec!["/a/deploy/h1", "/b/c/deploy/h1.example.com"]
        );
        let web = Host {
            role: Some("web".into()),
            ..host
        };
        assert_eq!(
            index.deploy_nodes(&web),
            vec![
                "/a/deploy/h1",
                "/a/deploy/web",
                "/b/c/deploy/h1.example.com"
            ]
        );
    }
}
