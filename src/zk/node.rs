//! Generic node helpers shared by the recipes, the agent's cluster setup and the syncer's
//! protection: make a persistent node (and its ancestors) when missing, delete a node of our
//! own when it is still there.

use super::{call, call_retrying, open_persistent, Client, ZkError};

/// Deletes a node of ours; already gone is fine (again after a connection loss: a delete
/// that went through answers `NoNode` the second time).
pub(crate) async fn delete_own(client: &Client, node: &str) -> Result<(), ZkError> {
    match call_retrying("delete", node, || client.delete(node, None)).await {
        Err(e) if e.is_no_node() => Ok(()),
        other => other,
    }
}

/// Creates a persistent (empty) node and its ancestors if missing.
pub async fn ensure_node(client: &Client, path: &str) -> Result<(), ZkError> {
    if call_retrying("stat", path, || client.check_stat(path))
        .await?
        .is_some()
    {
        return Ok(());
    }
    make_missing_node(client, path).await
}

/// Creates a persistent (empty) node, and its ancestors, that a request just found missing:
/// [`ensure_node`] without its first look. One made meanwhile by another process is fine; a
/// create refused for want of permission is looked at again (a node there, made by another,
/// is fine too).
pub(crate) async fn make_missing_node(client: &Client, path: &str) -> Result<(), ZkError> {
    // `mkdir` counts a node already there as made.
    match call("create", path, client.mkdir(path, &open_persistent())).await {
        Err(e) if e.is_no_auth() => {
            match call_retrying("stat", path, || client.check_stat(path)).await? {
                Some(_) => Ok(()),
                None => Err(e),
            }
        }
        other => other,
    }
}
