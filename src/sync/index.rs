//! The syncer's side of the deployment index ([`crate::zk::index`] has the layout and the
//! trust rule).
//!
//! Around the tree's apply: [`invalidate`] first (when the tree is about to change, so a sync
//! that dies part-way leaves no index claiming to describe the half-written tree), then, after
//! the apply, [`write_generation`] walks the tree as it now is (the same walk an agent makes,
//! so nodes the repository does not own are indexed too) and writes a new, not yet live,
//! generation; [`live_data`] gives the root's data, which goes into the one multi-op
//! transaction that also sets `/hosts` `version`; [`prune`] then deletes old generations,
//! keeping the one that was live before (agents may still be reading it).

use serde_json::Value;

use crate::zk::import::{apply, apply_with_acl, plan_delete, ApplyError, Op};
use crate::zk::index::{
    generation_nodes, generation_number, path_list, root_props, walk_deploy_nodes, FORMAT, INDEX,
};
use crate::zk::snapshot::{read_subtree, ReadOptions};
use crate::zk::{call, decode, encode, join, open_persistent, Client, ZkError};

pub use crate::zk::index::invalidate;

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
pub async fn root(client: &Client) -> Result<Option<(crate::tree::Props, i64)>, ZkError> {
    match call("get", INDEX, client.get_data(INDEX)).await {
        Ok((data, stat)) => Ok(Some((decode(&data), stat.mzxid))),
        Err(e) if e.is_no_node() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The live generation's name, if the root names one.
pub async fn live_generation(client: &Client) -> Result<Option<String>, ZkError> {
    Ok(root(client).await?.and_then(|(p, _)| {
        p.get("generation")
            .and_then(Value::as_str)
            .map(String::from)
    }))
}

/// True if the index is live for `revision`: the root names it and was written together with
/// `/hosts` (equal `mzxid`), whose `mzxid` is `hosts_mzxid`.
pub async fn is_live_for(
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
/// paths the walk found: then that generation is returned and nothing is written. It is
/// then what a new generation would be (same walk, same content), so making it live again
/// with the new version keeps the trust rule sound. Creates the root if missing. Nodes are created with `acl` (`None`: open, as zc.zk
/// does), so a protected index is never writable by anyone, not even for a moment.
pub async fn write_generation(
    client: &Client,
    acl: Option<&[zookeeper_client::Acl]>,
    reuse: Option<&str>,
) -> Result<Generation, IndexError> {
    let (paths, _) = walk_deploy_nodes(client, &|_| true).await?;
    if let Some(name) = reuse {
        if generation_paths(client, name).await?.as_ref() == Some(&paths) {
            return Ok(Generation {
                name: name.to_string(),
                paths: paths.len(),
            });
        }
    }
    let empty = encode(
        &[("format".to_string(), Value::from(FORMAT))]
            .into_iter()
            .collect(),
    );
    let root_options = match acl {
        Some(acl) => {
            zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(acl))
        }
        None => open_persistent(),
    };
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
    let ops: Vec<Op> = generation_nodes(&name, &paths)
        .into_iter()
        .map(|(path, data)| Op::Create { path, data })
        .collect();
    apply_with_acl(client, &ops, acl).await?;
    Ok(Generation {
        name,
        paths: paths.len(),
    })
}

/// Every deploy-node path a generation holds, sorted, or `None` if it is missing or any of
/// its entries or chunks is missing or malformed.
async fn generation_paths(client: &Client, name: &str) -> Result<Option<Vec<String>>, ZkError> {
    let path = join(INDEX, name);
    let Some(node) = read_subtree(client, &path, &ReadOptions::default()).await? else {
        return Ok(None);
    };
    let mut paths = Vec::new();
    for (child, entry) in &node.children {
        if !child.starts_with("t-") {
            return Ok(None);
        }
        let Some(list) = path_list(&entry.props) else {
            return Ok(None);
        };
        paths.extend(list);
        let count = entry.props.get("chunks").and_then(Value::as_u64);
        if count != Some(entry.children.len() as u64 + 1) {
            return Ok(None);
        }
        for i in 1..count.unwrap_or(1) {
            let Some(chunk) = entry.children.get(&format!("c{i}")) else {
                return Ok(None);
            };
            let Some(list) = path_list(&chunk.props) else {
                return Ok(None);
            };
            paths.extend(list);
        }
    }
    paths.sort();
    Ok(Some(paths))
}

/// The root's data making `generation` live for `version` (written in the same transaction as
/// `/hosts`).
pub fn live_data(version: &Value, generation: &Generation) -> Vec<u8> {
    encode(&root_props(version, &generation.name, generation.paths))
}

/// Deletes every generation but those in `keep` (best effort: a failure is logged, the next
/// sync tries again).
pub async fn prune(client: &Client, keep: &[&str]) {
    if let Err(e) = try_prune(client, keep).await {
        tracing::warn!("could not delete old deployment-index generations: {e}");
    }
}

async fn try_prune(client: &Client, keep: &[&str]) -> Result<(), IndexError> {
    for name in children(client, INDEX).await? {
        if keep.contains(&name.as_str()) {
            continue;
        }
        let path = join(INDEX, &name);
        if let Some(node) = read_subtree(client, &path, &ReadOptions::default()).await? {
            apply(client, &plan_delete(&path, &node, false).ops).await?;
        }
    }
    Ok(())
}
