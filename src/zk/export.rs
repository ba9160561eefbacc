//! Export of a ZooKeeper subtree in the text format (zc.zk's `export_tree`): the root export
//! leaves out `/zookeeper`; ephemeral nodes and `/deployment-index` are left out unless asked
//! for; `name` renames the
//! exported top node (and, at `/`, wraps the whole tree in a node of that name). A node the
//! text format cannot write (a name with a blank, a node name that reads back as a link…) is
//! refused before anything is written ([`ExportError::Unwritable`]).

use super::snapshot::{read_subtree, ReadOptions};
use super::{Client, ZkError};
use crate::tree::export::{
    check_exportable, check_top_name, export_root, export_subtree, Unwritable,
};

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The node to export does not exist.
    #[error("no node {0}")]
    NoNode(String),
    /// Reading failed.
    #[error(transparent)]
    Read(#[from] ZkError),
    /// A node's text would import as something else.
    #[error(transparent)]
    Unwritable(#[from] Unwritable),
}

/// Exports the subtree at `path` as text.
pub async fn export_tree(
    client: &Client,
    path: &str,
    ephemeral: bool,
    name: Option<&str>,
) -> Result<String, ExportError> {
    // The deployment index is the syncer's cache, not part of the tree: shown with `-e` only.
    let skip = |p: &str| p == "/zookeeper" || (!ephemeral && p == super::index::INDEX);
    let opts = ReadOptions {
        include_ephemeral: ephemeral,
        skip: &skip,
    };
    let node = read_subtree(client, path, &opts)
        .await?
        .ok_or_else(|| ExportError::NoNode(path.to_string()))?;
    let tree = node.to_tree();
    if path == "/" {
        if let Some(name) = name {
            check_top_name("/", name)?;
        }
        for (child_name, child) in &tree.children {
            check_exportable(&super::join("/", child_name), child_name, child)?;
        }
        return Ok(export_root(&tree, name));
    }
    let own = path.rsplit('/').next().unwrap_or(path);
    check_exportable(path, name.unwrap_or(own), &tree)?;
    Ok(export_subtree(name.unwrap_or(own), &tree))
}
