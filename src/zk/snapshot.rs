//! Reading a ZooKeeper subtree into memory with pipelined requests (zc.zk's `walk`, without
//! one round trip per node).
//!
//! Reads go out as pipelined multi-reads ([`super::multiread`]): a `get_data` per node, and a
//! `get_children` only for nodes whose stat says they have children. A node that disappears
//! while the walk runs is left out (the walk sees a consistent-enough picture; callers that need
//! more take a lock). Ephemeral nodes can be left out, and subtrees can be skipped by path.

use std::collections::{BTreeMap, HashMap};

use zookeeper_client::MultiReadResult;

use super::multiread::{read_all, Want};
use super::{decode, join, Client, ZkError};
use crate::tree::{Node, Props};

/// A node read from ZooKeeper.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZNode {
    /// Decoded properties.
    pub props: Props,
    /// The data, when it is not UTF-8 text (`props` then holds a lossy decoding of it).
    pub(crate) raw: Option<Vec<u8>>,
    /// Session owning the node if it is ephemeral, else 0.
    pub(crate) ephemeral_owner: i64,
    /// Zxid of the last data change.
    pub mzxid: i64,
    /// Data version.
    pub(crate) version: i32,
    /// Creation time (Unix milliseconds).
    pub(crate) ctime: i64,
    /// Children by name.
    pub children: BTreeMap<String, ZNode>,
}

impl ZNode {
    /// True for ephemeral nodes.
    pub(crate) fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0
    }

    /// Number of nodes in the subtree, this one included.
    pub fn count(&self) -> usize {
        1 + self.children.values().map(ZNode::count).sum::<usize>()
    }

    /// The text-format view of this subtree (properties and children only).
    pub fn to_tree(&self) -> Node {
        Node {
            props: self.props.clone(),
            children: self
                .children
                .iter()
                .map(|(k, c)| (k.clone(), c.to_tree()))
                .collect(),
            line: 0,
            raw: self.raw.clone(),
        }
    }

    /// The descendant at a relative path.
    pub fn get(&self, rel: &str) -> Option<&ZNode> {
        let mut node = self;
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            node = node.children.get(part)?;
        }
        Some(node)
    }
}

/// What to read.
pub struct ReadOptions<'a> {
    /// Keep ephemeral nodes.
    pub include_ephemeral: bool,
    /// Subtrees (by absolute path) not to read at all.
    pub skip: &'a (dyn Fn(&str) -> bool + Sync),
}

impl Default for ReadOptions<'_> {
    fn default() -> Self {
        ReadOptions {
            include_ephemeral: true,
            skip: &|_| false,
        }
    }
}

/// Reads the subtree at `path`; `None` if `path` does not exist.
pub async fn read_subtree(
    client: &Client,
    path: &str,
    opts: &ReadOptions<'_>,
) -> Result<Option<ZNode>, ZkError> {
    let mut nodes: HashMap<String, (ZNode, Vec<String>)> = HashMap::new();
    read_all(
        client,
        vec![Want::Data(path.to_string())],
        |want, result, queue| match (want, result) {
            (Want::Data(p), MultiReadResult::Data { data, stat }) => {
                if stat.ephemeral_owner != 0 && !opts.include_ephemeral {
                    return;
                }
                let node = ZNode {
                    props: decode(&data),
                    raw: std::str::from_utf8(&data).is_err().then(|| data.clone()),
                    ephemeral_owner: stat.ephemeral_owner,
                    mzxid: stat.mzxid,
                    version: stat.version,
                    ctime: stat.ctime,
                    children: BTreeMap::new(),
                };
                if stat.num_children > 0 {
                    queue.push(Want::Children(p.clone()));
                }
                nodes.insert(p, (node, Vec::new()));
            }
            (Want::Children(p), MultiReadResult::Children { children }) => {
                for name in &children {
                    let child = join(&p, name);
                    if !(opts.skip)(&child) {
                        queue.push(Want::Data(child));
                    }
                }
                if let Some(entry) = nodes.get_mut(&p) {
                    entry.1 = children;
                }
            }
            // A node deleted while the walk runs is left out.
            _ => {}
        },
    )
    .await?;
    Ok(assemble(&mut nodes, path))
}

fn assemble(nodes: &mut HashMap<String, (ZNode, Vec<String>)>, path: &str) -> Option<ZNode> {
    let (mut node, names) = nodes.remove(path)?;
    for name in names {
        if let Some(child) = assemble(nodes, &join(path, &name)) {
            node.children.insert(name, child);
        }
    }
    Some(node)
}
