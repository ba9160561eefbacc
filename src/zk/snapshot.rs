//! Reading a ZooKeeper subtree into memory with pipelined requests (zc.zk's `walk`, without
//! one round trip per node).
//!
//! Up to [`WINDOW`] requests are in flight at once: a `get_data` per node, and a
//! `get_children` only for nodes whose stat says they have children. A node that disappears
//! while the walk runs is left out (the walk sees a consistent-enough picture; callers that need
//! more take a lock). Ephemeral nodes can be left out, and subtrees can be skipped by path.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;

use futures::stream::{FuturesUnordered, StreamExt};
use zookeeper_client::MultiReadResult;

use super::{call, decode, join, Client, ZkError};
use crate::tree::{Node, Props};

/// Requests kept in flight at once.
pub const WINDOW: usize = 2000;

/// A node read from ZooKeeper.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZNode {
    /// Decoded properties.
    pub props: Props,
    /// Session owning the node if it is ephemeral, else 0.
    pub ephemeral_owner: i64,
    /// Zxid of the last data change.
    pub mzxid: i64,
    /// Data version.
    pub version: i32,
    /// Creation time (Unix milliseconds).
    pub ctime: i64,
    /// Children by name.
    pub children: BTreeMap<String, ZNode>,
}

impl ZNode {
    /// True for ephemeral nodes.
    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral_owner != 0
    }

    /// True if this node or a descendant is ephemeral.
    pub fn holds_ephemeral(&self) -> bool {
        self.is_ephemeral() || self.children.values().any(ZNode::holds_ephemeral)
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

/// Paths read per multi-read request.
pub const BATCH: usize = 128;

enum Want {
    Data(String),
    Children(String),
}

type Reply = (Vec<Want>, Result<Vec<MultiReadResult>, ZkError>);
type Pending<'a> = Pin<Box<dyn Future<Output = Reply> + Send + 'a>>;

/// Sends one multi-read for a batch of wants.
fn send<'a>(client: &'a Client, batch: Vec<Want>) -> Pending<'a> {
    let mut reader = client.new_multi_reader();
    let mut bad = None;
    for want in &batch {
        let r = match want {
            Want::Data(p) => reader.add_get_data(p),
            Want::Children(p) => reader.add_get_children(p),
        };
        if let Err(e) = r {
            bad = Some(ZkError::Op {
                op: "read",
                path: want_path(want).to_string(),
                source: e,
            });
            break;
        }
    }
    if let Some(e) = bad {
        return Box::pin(async move { (batch, Err(e)) });
    }
    let fut = reader.commit();
    Box::pin(async move {
        let first = batch.first().map(want_path).unwrap_or("/").to_string();
        let r = call("read", &first, fut).await;
        (batch, r)
    })
}

fn want_path(w: &Want) -> &str {
    match w {
        Want::Data(p) | Want::Children(p) => p,
    }
}

/// Reads the subtree at `path`; `None` if `path` does not exist.
pub async fn read_subtree(
    client: &Client,
    path: &str,
    opts: &ReadOptions<'_>,
) -> Result<Option<ZNode>, ZkError> {
    let mut queue: Vec<Want> = vec![Want::Data(path.to_string())];
    let mut in_flight = FuturesUnordered::new();
    let mut nodes: HashMap<String, (ZNode, Vec<String>)> = HashMap::new();
    while !queue.is_empty() || !in_flight.is_empty() {
        while in_flight.len() < WINDOW / BATCH && !queue.is_empty() {
            let at = queue.len().saturating_sub(BATCH);
            in_flight.push(send(client, queue.split_off(at)));
        }
        let Some((batch, results)) = in_flight.next().await else {
            break;
        };
        let results = results?;
        for (want, result) in batch.into_iter().zip(results) {
            match (want, result) {
                (
                    _,
                    MultiReadResult::Error {
                        err: zookeeper_client::Error::NoNode,
                    },
                ) => {}
                (want, MultiReadResult::Error { err }) => {
                    return Err(ZkError::Op {
                        op: "read",
                        path: want_path(&want).to_string(),
                        source: err,
                    })
                }
                (Want::Data(p), MultiReadResult::Data { data, stat }) => {
                    if stat.ephemeral_owner != 0 && !opts.include_ephemeral {
                        continue;
                    }
                    let node = ZNode {
                        props: decode(&data),
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
                (want, _) => {
                    return Err(ZkError::Op {
                        op: "read",
                        path: want_path(&want).to_string(),
                        source: zookeeper_client::Error::UnexpectedError(
                            "mismatched multi-read reply".into(),
                        ),
                    })
                }
            }
        }
    }
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
