//! The syncer's side of the deployment index ([`crate::zk::index`] has the layout, the trust
//! rule and how a generation is updated).
//!
//! Around the tree's apply: [`invalidate`] first (when the tree is about to change, so a sync
//! that dies part-way leaves no index claiming to describe the half-written tree), then, after
//! the apply, [`prepare`] walks the tree as it now is (the same walk an agent makes, so nodes
//! the repository does not own are indexed too) and compares it with the generation live
//! before the sync: unchanged, that generation goes live again; a change that fits in one
//! transaction becomes an in-place update ([`InPlace`]) of that generation; else a new, not
//! yet live, generation is written. [`live_data`] gives the root's data, which goes, with the
//! in-place writes, into the one multi-op transaction that also sets `/hosts` `version`;
//! [`prune`] then deletes old generations, keeping the one that was live before (agents may
//! still be reading it).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::zk::import::{apply, apply_with_acl, plan_delete, ApplyError, Op};
use crate::zk::index::{
    by_target, entry_writes, generation_data, generation_nodes, generation_number, path_list,
    root_props, walk_deploy_nodes, EntryWrite, FORMAT, INDEX, IN_PLACE_BYTES,
};
use crate::zk::snapshot::{read_subtree, ReadOptions};
use crate::zk::{call, decode, encode, join, open_persistent, Client, ZkError};

pub(crate) use crate::zk::index::invalidate;

/// A generation written and ready to go live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Its node name (`g<N>`).
    pub name: String,
    /// Deploy-node paths it holds.
    pub paths: usize,
}

/// Why the index could not be written (the cluster version is not changed then).
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Reading the tree or the index failed.
    #[error("writing the deployment index: {0}")]
    Zk(#[from] ZkError),
    /// Writing the generation failed.
    #[error("writing the deployment index: {0}")]
    Apply(#[from] ApplyError),
}

/// The index as it stands: the root's properties and `mzxid`, if it exists.
pub(crate) async fn root(client: &Client) -> Result<Option<(crate::tree::Props, i64)>, ZkError> {
    match call("get", INDEX, client.get_data(INDEX)).await {
        Ok((data, stat)) => Ok(Some((decode(&data), stat.mzxid))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The live generation's name, if the root names one.
pub(crate) async fn live_generation(client: &Client) -> Result<Option<String>, ZkError> {
    Ok(root(client).await?.and_then(|(p, _)| {
        p.get("generation")
            .and_then(Value::as_str)
            .map(String::from)
    }))
}

/// True if the index is live for `revision`: the root names it and was written together with
/// `/hosts` (equal `mzxid`), whose `mzxid` is `hosts_mzxid`.
pub(crate) async fn is_live_for(
    client: &Client,
    revision: &str,
    hosts_mzxid: i64,
) -> Result<bool, ZkError> {
    Ok(root(client).await?.is_some_and(|(p, mzxid)| {
        mzxid == hosts_mzxid
            && p.get("version").and_then(Value::as_str) == Some(revision)
            && p.get("generation").is_some()
    }))
}

async fn children(client: &Client, path: &str) -> Result<Vec<String>, ZkError> {
    match call("list", path, client.get_children(path)).await {
        Ok((c, _)) => Ok(c),
        Err(e) if e.is_no_node() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Walks the tree and writes a new generation of the index (not live until the root names
/// it), unless `reuse` (the generation live before the sync) holds exactly the deploy-node
/// paths the walk found: then that generation is returned and nothing is written. Creates
/// the root if missing. Nodes are created with `acl` (`None`: open, as zc.zk does), so a
/// protected index is never writable by anyone, not even for a moment.
pub async fn write_generation(
    client: &Client,
    acl: Option<&[zookeeper_client::Acl]>,
    reuse: Option<&str>,
) -> Result<Generation, IndexError> {
    let (paths, _) = walk_deploy_nodes(client, &|_| true).await?;
    if let Some(name) = reuse {
        if let Some(stored) = read_generation(client, name).await? {
            if entry_writes(name, &stored.entries, &paths).is_empty() {
                return Ok(Generation {
                    name: name.to_string(),
                    paths: paths.len(),
                });
            }
        }
    }
    write_new(client, acl, &paths).await
}

/// An in-place update of the generation live before a sync, to go into the transaction that
/// sets `/hosts` (see [`crate::zk::index`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InPlace {
    /// The generation node's data version as read (the transaction is guarded by it).
    pub(crate) version: i32,
    /// The generation node's new data (always written: its `mzxid` tells a reader that read
    /// the root before the transaction that the entries changed).
    pub(crate) data: Vec<u8>,
    /// The entries and chunks that change.
    pub(crate) writes: Vec<EntryWrite>,
}

/// How the index goes live with a sync's new version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The generation the root will name.
    pub(crate) generation: Generation,
    /// Writes of its entries that go into the transaction (`None`: it is complete already).
    pub in_place: Option<InPlace>,
    /// Index nodes written before the transaction (a new generation's).
    pub(crate) written: usize,
}

impl Prepared {
    /// Index nodes written, before the transaction and in it.
    pub(crate) fn writes(&self) -> usize {
        self.written + self.in_place.as_ref().map_or(0, |p| p.writes.len() + 1)
    }
}

/// Adds `in_place`'s writes of `generation` (its node's name) to a transaction: the
/// generation node (guarded by the version read), then the entries and chunks, created with
/// `acl`. Returns the paths written, in the order added.
pub fn add_in_place(
    writer: &mut zookeeper_client::MultiWriter<'_>,
    generation: &str,
    in_place: &InPlace,
    acl: Option<&[zookeeper_client::Acl]>,
) -> Result<Vec<String>, zookeeper_client::Error> {
    let node = join(INDEX, generation);
    writer.add_set_data(&node, &in_place.data, Some(in_place.version))?;
    let options = create_options(acl);
    let mut paths = vec![node];
    for write in &in_place.writes {
        match write {
            EntryWrite::Create { path, data } => writer.add_create(path, data, &options)?,
            EntryWrite::Set { path, data } => writer.add_set_data(path, data, None)?,
            EntryWrite::Delete { path } => writer.add_delete(path, None)?,
        }
        paths.push(write.path().to_string());
    }
    Ok(paths)
}

/// Walks the tree and prepares the index for a sync's new version: the generation live before
/// the sync (`previous`) as it is when it holds what the walk found; updated in place, in the
/// transaction, when the writes that change it fit in `IN_PLACE_BYTES` (512 KiB); else a new
/// generation, written now (as [`write_generation`]).
pub async fn prepare(
    client: &Client,
    acl: Option<&[zookeeper_client::Acl]>,
    previous: Option<&str>,
) -> Result<Prepared, IndexError> {
    let (paths, _) = walk_deploy_nodes(client, &|_| true).await?;
    if let Some(name) = previous {
        if let Some(stored) = read_generation(client, name).await? {
            let generation = Generation {
                name: name.to_string(),
                paths: paths.len(),
            };
            let writes = entry_writes(name, &stored.entries, &paths);
            let bytes: usize = writes.iter().map(EntryWrite::bytes).sum();
            if writes.is_empty() || bytes <= IN_PLACE_BYTES {
                let in_place = (!writes.is_empty()).then(|| InPlace {
                    version: stored.version,
                    data: generation_data(by_target(&paths).len(), paths.len()),
                    writes,
                });
                return Ok(Prepared {
                    generation,
                    in_place,
                    written: 0,
                });
            }
        }
    }
    let generation = write_new(client, acl, &paths).await?;
    Ok(Prepared {
        written: generation_nodes(&generation.name, &paths).len(),
        generation,
        in_place: None,
    })
}

/// Writes `paths` as a new generation, numbered one more than the highest there.
async fn write_new(
    client: &Client,
    acl: Option<&[zookeeper_client::Acl]>,
    paths: &[String],
) -> Result<Generation, IndexError> {
    let empty = encode(
        &[("format".to_string(), Value::from(FORMAT))]
            .into_iter()
            .collect(),
    );
    let root_options = create_options(acl);
    match call("create", INDEX, client.create(INDEX, &empty, &root_options)).await {
        Ok(_) => {}
        Err(ZkError::Op {
            source: zookeeper_client::Error::NodeExists,
            ..
        }) => {}
        Err(e) => return Err(e.into()),
    }
    let next = children(client, INDEX)
        .await?
        .iter()
        .filter_map(|c| generation_number(c))
        .max()
        .map_or(1, |n| n + 1);
    let name = format!("g{next}");
    let ops: Vec<Op> = generation_nodes(&name, paths)
        .into_iter()
        .map(|(path, data)| Op::Create { path, data })
        .collect();
    apply_with_acl(client, &ops, acl).await?;
    Ok(Generation {
        name,
        paths: paths.len(),
    })
}

/// How index nodes are created: with `acl`, or open.
fn create_options(acl: Option<&[zookeeper_client::Acl]>) -> zookeeper_client::CreateOptions<'_> {
    match acl {
        Some(acl) => {
            zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(acl))
        }
        None => open_persistent(),
    }
}

/// A generation as stored: its node's data version, and per target its paths in chunks.
struct Stored {
    version: i32,
    entries: BTreeMap<String, Vec<Vec<String>>>,
}

/// A generation as stored, or `None` if it is missing or any of its entries or chunks is
/// missing or malformed.
async fn read_generation(client: &Client, name: &str) -> Result<Option<Stored>, ZkError> {
    let path = join(INDEX, name);
    let version = match call("get", &path, client.get_data(&path)).await {
        Ok((_, stat)) => stat.version,
        Err(e) if e.is_no_node() => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(node) = read_subtree(client, &path, &ReadOptions::default()).await? else {
        return Ok(None);
    };
    let mut entries = BTreeMap::new();
    for (child, entry) in &node.children {
        let Some(target) = child.strip_prefix("t-") else {
            return Ok(None);
        };
        let Some(first) = path_list(&entry.props) else {
            return Ok(None);
        };
        let count = entry.props.get("chunks").and_then(Value::as_u64);
        if count != Some(entry.children.len() as u64 + 1) {
            return Ok(None);
        }
        let mut parts = vec![first];
        for i in 1..count.unwrap_or(1) {
            let Some(chunk) = entry.children.get(&format!("c{i}")) else {
                return Ok(None);
            };
            let Some(list) = path_list(&chunk.props) else {
                return Ok(None);
            };
            parts.push(list);
        }
        entries.insert(target.to_string(), parts);
    }
    Ok(Some(Stored { version, entries }))
}

/// The root's data making `generation` live for `version` (written in the same transaction as
/// `/hosts`).
pub fn live_data(version: &Value, generation: &Generation) -> Vec<u8> {
    encode(&root_props(version, &generation.name, generation.paths))
}

/// Deletes every generation but those in `keep` (best effort: a failure is logged, the next
/// sync tries again). Returns the nodes deleted.
pub(crate) async fn prune(client: &Client, keep: &[&str]) -> usize {
    let mut deleted = 0;
    if let Err(e) = try_prune(client, keep, &mut deleted).await {
        tracing::warn!("could not delete old deployment-index generations: {e}");
    }
    deleted
}

async fn try_prune(client: &Client, keep: &[&str], deleted: &mut usize) -> Result<(), IndexError> {
    for name in children(client, INDEX).await? {
        if keep.contains(&name.as_str()) {
            continue;
        }
        let path = join(INDEX, &name);
        if let Some(node) = read_subtree(client, &path, &ReadOptions::default()).await? {
            *deleted += apply(client, &plan_delete(&path, &node, false).ops).await?;
        }
    }
    Ok(())
}
