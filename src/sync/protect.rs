//! `sync --auth`: the ACLs of everything the syncer owns (CONTRACT section 14).
//!
//! Nodes the syncer creates get their ACL when created ([`crate::zk::import::apply_with_acl`]);
//! [`protect`] then checks every node the syncer owns and repairs those whose ACL differs (a
//! tree synced before auth was on, a node someone opened by hand):
//!
//! - the import root `/` (of the chroot), so that nobody else can add a top-level node for
//!   agents to discover, and every node the repository's files define (the nodes under its
//!   `synced-roots`), and `/deployment-index` with its children: READ for everyone, ALL for
//!   the syncer's identity ([`Kind::Owned`]);
//! - `/hosts` and [`HALTS`]: READ and CREATE for everyone (hosts register and record halts),
//!   ALL for the syncer ([`Kind::Register`]); `/hosts` is left open to everyone instead with
//!   `--open-hosts` (a mixed fleet, whose original agents halt by writing `/hosts`);
//! - `/hosts-lock`: only syncers take it ([`Kind::Owned`]).
//!
//! The nodes hosts share — `/agent-locks`, `/role-locks`, `/agent-semaphores` — are created
//! open if missing (the root no longer lets agents create them) and never restricted.

use zookeeper_client::CreateMode;

use super::desired::Desired;
use crate::tree::Node;
use crate::zk::acl::{repair, Kind, Protection};
use crate::zk::halts::HALTS;
use crate::zk::lock::ensure_node;
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{call, join, Client, ZkError};

/// The index another part of the syncer writes; protected like the tree when present.
pub const DEPLOYMENT_INDEX: &str = "/deployment-index";

/// Nodes every host writes under; created open before the root is closed.
pub const SHARED: [&str; 3] = ["/agent-locks", "/role-locks", "/agent-semaphores"];

/// Checks and repairs the ACLs of everything the syncer owns; returns the paths repaired.
pub async fn protect(
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
    match call("create", HALTS, client.create(HALTS, b"", &mode)).await {
        Err(ZkError::Op {
            source: zookeeper_client::Error::NodeExists,
            ..
        })
        | Ok(_) => {}
        Err(e) => return Err(e),
    }

    let owned = protection.acl(Kind::Owned);
    let hosts = protection.acl(if open_hosts {
        Kind::Open
    } else {
        Kind::Register
    });
    let mut nodes = vec![
        ("/".to_string(), owned.clone()),
        ("/hosts".to_string(), hosts),
        (HALTS.to_string(), register),
        ("/hosts-lock".to_string(), owned.clone()),
    ];
    tree_paths("/", &desired.tree, &mut |p| nodes.push((p, owned.clone())));
    let persistent = ReadOptions::default();
    if let Some(index) = read_subtree(client, DEPLOYMENT_INDEX, &persistent).await? {
        znode_paths(DEPLOYMENT_INDEX, &index, &mut |p| {
            nodes.push((p, owned.clone()))
        });
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

/// Every path below `at` in a desired tree (not `at` itself).
fn tree_paths(at: &str, node: &Node, out: &mut dyn FnMut(String)) {
    for (name, child) in &node.children {
        let path = join(at, name);
        tree_paths(&path, child, out);
        out(path);
    }
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
