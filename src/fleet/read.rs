//! Reading what the fleet plan needs from ZooKeeper, with pipelined multi-reads and no
//! writes: `/hosts` with every registered host node, and the current tree (every node but the
//! infrastructure subtrees and the deployment index).

use serde_json::Value;

use super::index::INDEX_ROOT;
use super::plan::Registered;
use crate::agent::model::Host;
use crate::zk::paths::RESERVED_ROOTS as SKIPPED_ROOTS;
use crate::agent::inventory::{self, Inventory};
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{Client, ZkError};

/// `/hosts` and its children (not their descendants); an empty node if `/hosts` is missing.
pub async fn read_hosts(client: &Client) -> Result<ZNode, ZkError> {
    let opts = ReadOptions {
        include_ephemeral: true,
        skip: &|p| p.matches('/').count() > 2,
    };
    Ok(read_subtree(client, "/hosts", &opts)
        .await?
        .unwrap_or_default())
}

/// The registered hosts of a `/hosts` read, by id.
pub fn registered(hosts: &ZNode) -> Vec<Registered> {
    hosts
        .children
        .iter()
        .map(|(id, node)| {
            let text = |k: &str| node.props.get(k).and_then(Value::as_str).map(String::from);
            Registered {
                host: Host {
                    id: id.clone(),
                    name: text("name").unwrap_or_else(|| id.clone()),
                    role: text("role"),
                },
                inventory: node
                    .props
                    .get(inventory::PROPERTY)
                    .map(|v| Inventory::from_value(v).map_err(|e| e.to_string())),
            }
        })
        .collect()
}

/// The current tree (ephemeral nodes included: discovery skips them as the agent does).
pub async fn read_current(client: &Client) -> Result<ZNode, ZkError> {
    let skip = |p: &str| SKIPPED_ROOTS.contains(&p) || p == INDEX_ROOT;
    let opts = ReadOptions {
        include_ephemeral: true,
        skip: &skip,
    };
    Ok(read_subtree(client, "/", &opts).await?.unwrap_or_default())
}
