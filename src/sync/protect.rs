//! `sync --auth`: the ACLs of everything the syncer owns (docs/security.md).
//!
//! Nodes the syncer creates get their ACL when created ([`crate::zk::import::apply_with_acl`]);
//! [`protect`] then checks every node the syncer owns and repairs those whose ACL differs (a
//! tree synced before auth was on, a node someone opened by hand):
//!
//! - the import root `/` (of the chroot), so that nobody else can add a top-level node for
//!   agents to discover; every persistent node under the repository's roots (its
//!   `synced-roots`: the nodes its files define and any other found there); and
//!   `/deployment-index` with its children: READ for everyone, ALL for the syncer's identity
//!   ([`Kind::Owned`]);
//! - `/hosts`, [`HALTS`] and [`AGENT_REGISTRY`]: READ and CREATE for everyone (hosts
//!   register, with their registry node, and record halts), ALL for the syncer
//!   ([`Kind::Register`]; created if missing, the last two); `/hosts` is left open to everyone instead with
//!   `--open-hosts` (a mixed fleet, whose original agents halt by writing `/hosts`);
//! - `/hosts-lock`: only syncers take it ([`Kind::Owned`]).
//! - [`NODE_STATE`] (hosts record node halts and failures there,
//!   [`crate::zk::node_state`]): [`Kind::Register`]; [`NODE_PAUSES`] (the operator pauses
//!   nodes there): [`Kind::Owned`]; both created if missing. The records themselves are
//!   read-only to all from their creation.
//!
//! The nodes hosts share — `/agent-locks`, `/role-locks` (also when a `.zkx` file defines role
//! lock nodes), `/agent-semaphores` — are created open if missing (the root no longer lets
//! agents create them) and never restricted.

use zookeeper_client::CreateMode;

use super::desired::Desired;
use crate::zk::acl::{repair, Kind, Protection};
use crate::zk::halts::HALTS;
use crate::zk::node::ensure_node;
use crate::zk::paths::{AGENT_REGISTRY, NODE_PAUSES, NODE_STATE};
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{call, join, Client, ZkError};

/// The index another part of the syncer writes; protected like the tree when present.
pub(crate) use crate::zk::paths::DEPLOYMENT_INDEX;

/// Nodes every host writes under; created open before the root is closed.
pub(crate) const SHARED: [&str; 3] = [
    crate::zk::paths::AGENT_LOCKS,
    crate::zk::paths::ROLE_LOCKS,
    crate::zk::paths::AGENT_SEMAPHORES,
];

/// Checks and repairs the ACLs of everything the syncer owns; returns the paths repaired.
pub(crate) async fn protect(
    client: &Client,
    protection: &Protection,
    desired: &Desired,
    open_hosts: bool,
) -> Result<Vec<String>, ZkError> {
    for shared in SHARED {
        ensure_node(client, shared).await?;
    }
    let register = protection.acl(Kind::Register);
    let mode = CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(&register));
    let owned_acl = protection.acl(Kind::Owned);
    let owned_mode = CreateMode::Persistent.with_acls(zookeeper_client::Acls::new(&owned_acl));
    for (node, mode) in [
        (HALTS, &mode),
        (AGENT_REGISTRY, &mode),
        (NODE_STATE, &mode),
        (NODE_PAUSES, &owned_mode),
    ] {
        match call("create", node, client.create(node, b"", mode)).await {
            Err(ZkError::Op {
                source: zookeeper_client::Error::NodeExists,
                ..
            })
            | Ok(_) => {}
            Err(e) => return Err(e),
        }
    }

    let owned = protection.acl(Kind::Owned);
    let hosts = protection.acl(if open_hosts {
        Kind::Open
    } else {
        Kind::Register
    });
    let mut nodes = vec![
        ("/".to_string(), owned.clone()),
        (crate::zk::paths::HOSTS.to_string(), hosts),
        (HALTS.to_string(), register.clone()),
        (AGENT_REGISTRY.to_string(), register.clone()),
        (crate::zk::paths::HOSTS_LOCK.to_string(), owned.clone()),
        (NODE_PAUSES.to_string(), owned.clone()),
    ];
    nodes.push((NODE_STATE.to_string(), register.clone()));
    let owned_paths = owned_paths(client, desired).await?;
    nodes.extend(owned_paths.into_iter().map(|p| (p, owned.clone())));
    // Shared nodes a `.zkx` file defines (role lock nodes) stay open to every host.
    for (name, node) in &desired.tree.children {
        let path = join("/", name);
        if SHARED.contains(&path.as_str()) {
            let open = protection.acl(Kind::Open);
            tree_paths(&path, node, &mut |p| nodes.push((p, open.clone())));
        }
    }
    let repaired = repair(client, &nodes).await?;
    if !repaired.is_empty() {
        let shown: Vec<&str> = repaired.iter().take(5).map(String::as_str).collect();
        tracing::warn!(
            "repaired the ACL of {} node(s) owned by the syncer ({}{})",
            repaired.len(),
            shown.join(", "),
            if repaired.len() > shown.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    Ok(repaired)
}

/// Every persistent node under the repository's roots as it is now (after the apply), and
/// under the deployment index: the nodes its files define and any other node found there (a
/// node left untrimmed under a `.zkx` overlay is discovered by agents like any other).
/// Ephemeral nodes belong to their sessions and are left alone; shared roots are left out.
async fn owned_paths(client: &Client, desired: &Desired) -> Result<Vec<String>, ZkError> {
    let persistent = ReadOptions {
        include_ephemeral: false,
        skip: &|_| false,
    };
    let mut owned_paths = Vec::new();
    let roots = desired
        .roots()
        .iter()
        .map(|r| join("/", r))
        .collect::<Vec<_>>();
    for root in roots.iter().map(String::as_str).chain([DEPLOYMENT_INDEX]) {
        if SHARED.contains(&root) {
            continue;
        }
        if let Some(node) = read_subtree(client, root, &persistent).await? {
            znode_paths(root, &node, &mut |p| owned_paths.push(p));
        }
    }
    Ok(owned_paths)
}

/// Checks and repairs the ACLs of `/deployment-index` and its children only (after a new
/// generation was written); returns the paths repaired.
pub(crate) async fn protect_index(
    client: &Client,
    protection: &Protection,
) -> Result<Vec<String>, ZkError> {
    let persistent = ReadOptions {
        include_ephemeral: false,
        skip: &|_| false,
    };
    let owned = protection.acl(Kind::Owned);
    let mut nodes = Vec::new();
    if let Some(index) = read_subtree(client, DEPLOYMENT_INDEX, &persistent).await? {
        znode_paths(DEPLOYMENT_INDEX, &index, &mut |p| {
            nodes.push((p, owned.clone()))
        });
    }
    repair(client, &nodes).await
}

/// `at` and every path below it in a desired tree.
fn tree_paths(at: &str, node: &crate::tree::Node, out: &mut dyn FnMut(String)) {
    for (name, child) in &node.children {
        tree_paths(&join(at, name), child, out);
    }
    out(at.to_string());
}

/// `at` and every persistent path below it.
fn znode_paths(at: &str, node: &ZNode, out: &mut dyn FnMut(String)) {
    for (name, child) in &node.children {
        if !child.is_ephemeral() {
            znode_paths(&join(at, name), child, out);
        }
    }
    out(at.to_string());
}
