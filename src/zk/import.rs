//! Importing a parsed tree into ZooKeeper as a minimal diff (zc.zk's `import_tree`).
//!
//! [`plan`] is pure: given the desired tree and a snapshot of what exists, it returns the
//! ordered writes (parents created before children, children deleted before parents) and the
//! lines zc.zk prints (`add /p`, `extra path not trimmed: /p`, `would delete /p.` …).
//! Only nodes whose properties differ are written, so re-importing an identical tree sends no
//! write at all. [`apply`] sends the writes pipelined (many in flight, in order; ZooKeeper runs
//! one session's requests in order), each guarded by the data version that was read.
//!
//! Top-level nodes (the import point's children) are never trimmed or reported.

use super::snapshot::{read_subtree, ReadOptions, ZNode};
use super::{call, join, open_persistent, Client, ZkError};
use crate::tree::literal::{py_str, repr_bytes};
use crate::tree::{Node, Props, LINK_SUFFIX};
use futures::stream::{self, StreamExt};
use zookeeper_client::MultiWriteError;

/// What to do with existing children that the text does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    /// Print `extra path not trimmed: <path>` (zc.zk's default).
    Report,
    /// Delete them (except ephemeral nodes and their ancestors).
    Yes,
    /// Keep them silently.
    No,
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create a persistent node.
    Create { path: String, data: Vec<u8> },
    /// Replace a node's data, if its version is still `version`.
    Set {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    /// Delete a node, if its version is still `version`.
    Delete { path: String, version: i32 },
}

impl Op {
    /// The node the write is about.
    pub(crate) fn path(&self) -> &str {
        match self {
            Op::Create { path, .. } | Op::Set { path, .. } | Op::Delete { path, .. } => path,
        }
    }
}

/// The writes of an import and the lines it prints.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Writes, in the order they must run.
    pub ops: Vec<Op>,
    /// Output lines (dry-run diff, trim reports, ephemeral notices), in zc.zk's order.
    pub(crate) lines: Vec<String>,
}

struct Planner<'a> {
    policy: &'a dyn Fn(&str) -> Trim,
    dry_run: bool,
    plan: Plan,
}

/// Plans importing the children of `desired` under the node `at`, whose current state is
/// `existing` (its children need only be present for the top-level names in `desired`).
/// `policy` gives the trim mode for the children of a node, by the node's path.
pub fn plan(
    desired: &Node,
    at: &str,
    existing: &ZNode,
    policy: &dyn Fn(&str) -> Trim,
    dry_run: bool,
) -> Plan {
    let mut planner = Planner {
        policy,
        dry_run,
        plan: Plan::default(),
    };
    planner.import(at, desired, existing, true);
    planner.plan
}

/// Plans deleting the subtree `node` at `path`, sparing ephemeral nodes and their ancestors
/// (zc.zk's `delete_recursive` with the same lines).
pub(crate) fn plan_delete(path: &str, node: &ZNode, dry_run: bool) -> Plan {
    let mut planner = Planner {
        policy: &|_| Trim::No,
        dry_run,
        plan: Plan::default(),
    };
    planner.delete_recursive(path, node, true);
    planner.plan
}

impl Planner<'_> {
    fn import(&mut self, path: &str, desired: &Node, existing: &ZNode, top: bool) {
        if !top {
            for (name, child) in &existing.children {
                if desired.children.contains_key(name) {
                    continue;
                }
                let cpath = join(path, name);
                match (self.policy)(path) {
                    Trim::Yes => {
                        self.delete_recursive(&cpath, child, true);
                    }
                    Trim::Report => self
                        .plan
                        .lines
                        .push(format!("extra path not trimmed: {cpath}")),
                    Trim::No => {}
                }
            }
        }
        for (name, child) in &desired.children {
            let cpath = join(path, name);
            match existing.children.get(name) {
                Some(old) => {
                    let same = old.props == child.props && old.raw == child.raw;
                    if self.dry_run {
                        self.diff_lines(&cpath, &old.props, &child.props);
                        if old.props == child.props && !same {
                            self.plan.lines.push(format!(
                                "{cpath} string_value change from {} to {}",
                                shown(old.raw.as_deref(), &old.props),
                                shown(child.raw.as_deref(), &child.props)
                            ));
                        }
                    } else if !same {
                        self.plan.ops.push(Op::Set {
                            path: cpath.clone(),
                            data: child.data(),
                            version: old.version,
                        });
                    }
                    self.import(&cpath, child, old, false);
                }
                None if self.dry_run => self.plan.lines.push(format!("add {cpath}")),
                None => self.create_all(&cpath, child),
            }
        }
    }

    fn create_all(&mut self, path: &str, node: &Node) {
        self.plan.ops.push(Op::Create {
            path: path.to_string(),
            data: node.data(),
        });
        for (name, child) in &node.children {
            self.create_all(&join(path, name), child);
        }
    }

    /// zc.zk's `_delete_recursive`; returns true if an ephemeral node kept it from deleting.
    fn delete_recursive(&mut self, path: &str, node: &ZNode, ignore_if_ephemeral: bool) -> bool {
        let mut ephemeral_child = false;
        for (name, child) in &node.children {
            ephemeral_child =
                self.delete_recursive(&join(path, name), child, false) || ephemeral_child;
        }
        if ephemeral_child {
            self.plan
                .lines
                .push(format!("{path} not deleted due to ephemeral descendent."));
            return true;
        }
        let ephemeral = node.is_ephemeral();
        if ephemeral && ignore_if_ephemeral {
            return false;
        }
        match (self.dry_run, ephemeral) {
            (true, true) => self
                .plan
                .lines
                .push(format!("wouldn't delete {path} because it's ephemeral.")),
            (true, false) => self.plan.lines.push(format!("would delete {path}.")),
            (false, true) => self
                .plan
                .lines
                .push(format!("Not deleting {path} because it's ephemeral.")),
            (false, false) => self.plan.ops.push(Op::Delete {
                path: path.to_string(),
                version: node.version,
            }),
        }
        ephemeral
    }

    fn diff_lines(&mut self, path: &str, old: &Props, new: &Props) {
        let lines = &mut self.plan.lines;
        for (key, value) in old {
            let link = key.strip_suffix(LINK_SUFFIX);
            match (new.get(key), link) {
                (None, Some(_)) => {
                    lines.push(format!("{path} remove link {key} {}", py_str(value)))
                }
                (None, None) => {
                    lines.push(format!("{path} remove property {key} = {}", py_str(value)))
                }
                (Some(n), Some(name)) if n != value => lines.push(format!(
                    "{path} {name} link change from {} to {}",
                    py_str(value),
                    py_str(n)
                )),
                (Some(n), None) if n != value => lines.push(format!(
                    "{path} {key} change from {} to {}",
                    py_str(value),
                    py_str(n)
                )),
                _ => {}
            }
        }
        for (key, value) in new {
            if !old.contains_key(key) {
                if key.ends_with(LINK_SUFFIX) {
                    lines.push(format!("{path} add link {key} {}", py_str(value)));
                } else {
                    lines.push(format!("{path} add property {key} = {}", py_str(value)));
                }
            }
        }
    }
}

/// A node's data in a dry run's line: its bytes (`b'…'`) when it is not text, else its
/// `string_value` as zc.zk prints it.
fn shown(raw: Option<&[u8]>, props: &Props) -> String {
    match raw {
        Some(raw) => repr_bytes(raw),
        None => props.get("string_value").map(py_str).unwrap_or_default(),
    }
}

/// Writes per multi-op transaction, and the byte budget of one transaction (ZooKeeper's
/// default request limit is 1 MiB).
pub const BATCH_OPS: usize = 256;
const BATCH_BYTES: usize = 512 * 1024;
/// Transactions kept in flight while applying.
pub(crate) const BATCH_WINDOW: usize = 8;

/// Why applying stopped.
#[derive(Debug, thiserror::Error)]
#[error("{error} (after {applied} of {total} writes)")]
pub struct ApplyError {
    /// The first failed write.
    pub(crate) error: ZkError,
    /// Writes known to have succeeded before it (in order).
    pub(crate) applied: usize,
    /// Writes planned.
    pub(crate) total: usize,
}

/// Splits ops into consecutive batches bounded in count and bytes.
fn batches(ops: &[Op]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        let size = 64
            + op.path().len()
            + match op {
                Op::Create { data, .. } | Op::Set { data, .. } => data.len(),
                Op::Delete { .. } => 0,
            };
        if i > start && (i - start >= BATCH_OPS || bytes + size > BATCH_BYTES) {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += size;
    }
    if start < ops.len() {
        out.push(start..ops.len());
    }
    out
}

/// Refuses a plan holding node data ZooKeeper would not take (the server would drop the
/// connection mid-apply): nothing is written.
fn check_sizes(ops: &[Op]) -> Result<(), ApplyError> {
    for op in ops {
        if let Op::Create { path, data } | Op::Set { path, data, .. } = op {
            let bytes = crate::tree::encoding::request_bytes(path, data.len());
            if bytes > super::MAX_NODE_DATA {
                return Err(ApplyError {
                    error: ZkError::TooLarge {
                        op: "write",
                        path: path.clone(),
                        bytes,
                    },
                    applied: 0,
                    total: ops.len(),
                });
            }
        }
    }
    Ok(())
}

/// Sends the writes of a plan in order: consecutive writes are grouped in multi-op
/// transactions, several of which are in flight at once (ZooKeeper runs one session's
/// requests in order). Stops at the first failure.
pub(crate) async fn apply(client: &Client, ops: &[Op]) -> Result<usize, ApplyError> {
    apply_with_acl(client, ops, None).await
}

/// [`apply`], creating nodes with `acl` (`None`: open to everyone, as zc.zk does).
pub(crate) async fn apply_with_acl(
    client: &Client,
    ops: &[Op],
    acl: Option<&[zookeeper_client::Acl]>,
) -> Result<usize, ApplyError> {
    check_sizes(ops)?;
    let total = ops.len();
    let options = match acl {
        Some(acl) => {
            zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(acl))
        }
        None => open_persistent(),
    };
    let fail = |error: ZkError, applied: usize| ApplyError {
        error,
        applied,
        total,
    };
    let sent = stream::iter(batches(ops)).map(|range| {
        let mut writer = client.new_multi_writer();
        let mut bad = None;
        for op in &ops[range.clone()] {
            let added = match op {
                Op::Create { path, data } => writer.add_create(path, data, &options),
                Op::Set {
                    path,
                    data,
                    version,
                } => writer.add_set_data(path, data, Some(*version)),
                Op::Delete { path, version } => writer.add_delete(path, Some(*version)),
            };
            if let Err(source) = added {
                bad = Some(ZkError::Op {
                    op: "write",
                    path: op.path().to_string(),
                    source,
                });
                break;
            }
        }
        let commit = writer.commit();
        async move {
            if let Some(e) = bad {
                return (range, Err(e));
            }
            let result = match tokio::time::timeout(super::REQUEST_TIMEOUT, commit).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(MultiWriteError::OperationFailed { index, source })) => Err(ZkError::Op {
                    op: "write",
                    path: ops[range.start + index].path().to_string(),
                    source,
                }),
                Ok(Err(MultiWriteError::RequestFailed { source })) => Err(ZkError::Op {
                    op: "write",
                    path: ops[range.start].path().to_string(),
                    source,
                }),
                Err(_) => Err(ZkError::Timeout {
                    op: "write",
                    path: ops[range.start].path().to_string(),
                }),
            };
            (range, result)
        }
    });
    let results = sent.buffered(BATCH_WINDOW);
    futures::pin_mut!(results);
    while let Some((range, result)) = results.next().await {
        result.map_err(|e| fail(e, range.start))?;
        for op in &ops[range] {
            if let Op::Delete { path, .. } = op {
                tracing::info!("deleted {path}");
            }
        }
    }
    Ok(total)
}

/// Sends the writes one request at a time, waiting for each answer (zc.zk's way; kept for
/// the benchmark's comparison).
pub async fn apply_one_by_one(client: &Client, ops: &[Op]) -> Result<usize, ApplyError> {
    check_sizes(ops)?;
    let options = open_persistent();
    for (i, op) in ops.iter().enumerate() {
        let r = match op {
            Op::Create { path, data } => call("create", path, client.create(path, data, &options))
                .await
                .map(|_| ()),
            Op::Set {
                path,
                data,
                version,
            } => call("set", path, client.set_data(path, data, Some(*version)))
                .await
                .map(|_| ()),
            Op::Delete { path, version } => {
                call("delete", path, client.delete(path, Some(*version))).await
            }
        };
        r.map_err(|error| ApplyError {
            error,
            applied: i,
            total: ops.len(),
        })?;
    }
    Ok(ops.len())
}

/// Reads what the import of `desired` at `at` needs: the node `at` and the whole subtrees of
/// its children named in `desired`. `None` if `at` does not exist.
pub async fn read_existing(
    client: &Client,
    desired: &Node,
    at: &str,
) -> Result<Option<ZNode>, ZkError> {
    let stat = call("stat", at, client.check_stat(at)).await?;
    let Some(stat) = stat else { return Ok(None) };
    let mut root = ZNode {
        ephemeral_owner: stat.ephemeral_owner,
        version: stat.version,
        mzxid: stat.mzxid,
        ..ZNode::default()
    };
    let opts = ReadOptions::default();
    let reads = desired.children.keys().map(|name| {
        let path = join(at, name);
        let opts = &opts;
        async move { (name.clone(), read_subtree(client, &path, opts).await) }
    });
    let mut results = stream::iter(reads).buffer_unordered(16);
    while let Some((name, r)) = results.next().await {
        if let Some(node) = r? {
            root.children.insert(name, node);
        }
    }
    Ok(Some(root))
}

/// Outcome of [`import_tree`].
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// Lines to print.
    pub lines: Vec<String>,
    /// Writes sent.
    pub writes: usize,
}

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The import point does not exist.
    #[error("no node {0} to import into")]
    NoImportPoint(String),
    /// Reading failed.
    #[error(transparent)]
    Read(#[from] ZkError),
    /// Writing failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Imports the children of `desired` under `at` with one trim mode (the `tree import` command).
pub async fn import_tree(
    client: &Client,
    desired: &Node,
    at: &str,
    trim: Trim,
    dry_run: bool,
) -> Result<Imported, ImportError> {
    import_tree_with_acl(client, desired, at, trim, dry_run, None).await
}

/// [`import_tree`], creating nodes with `acl` (`None`: open to everyone).
pub(crate) async fn import_tree_with_acl(
    client: &Client,
    desired: &Node,
    at: &str,
    trim: Trim,
    dry_run: bool,
    acl: Option<&[zookeeper_client::Acl]>,
) -> Result<Imported, ImportError> {
    let at = match at.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
    };
    let existing = read_existing(client, desired, at)
        .await?
        .ok_or_else(|| ImportError::NoImportPoint(at.to_string()))?;
    let plan = plan(desired, at, &existing, &|_| trim, dry_run);
    let writes = if dry_run {
        0
    } else {
        apply_with_acl(client, &plan.ops, acl).await?
    };
    Ok(Imported {
        lines: plan.lines,
        writes,
    })
}
