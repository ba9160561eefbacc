//! Reading what the fleet plan needs from ZooKeeper, with pipelined multi-reads and no
//! writes: `/hosts` with every registered host node, and of the current tree only what the
//! plan asks about ([`prefetch`]: the properties of the application nodes the candidate
//! deploys, and the deployments of hosts without an inventory), read in rounds as links lead
//! ([`Partial`]), not the whole tree.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;

use super::plan::{converged, Prefetched, Registered};
use crate::agent::discover::{discover_in, keep_read, resolved_props, TreeSource};
use crate::agent::inventory::{self, Inventory};
use crate::agent::model::Host;
use crate::agent::rollout::AGENT_PROPERTY;
use crate::overview::cut_text;
use crate::tree::Props;
use crate::zk::index::{by_target, walk_deploy_nodes};
use crate::zk::links::NodeSource;
use crate::zk::multiread::{read_all, Want};
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{Client, ZkError};

/// `/hosts` and its children (not their descendants); an empty node if `/hosts` is missing.
pub(crate) async fn read_hosts(client: &Client) -> Result<ZNode, ZkError> {
    let opts = ReadOptions {
        include_ephemeral: true,
        skip: &|p| p.matches('/').count() > 2,
    };
    Ok(read_subtree(client, "/hosts", &opts)
        .await?
        .unwrap_or_default())
}

/// The registered hosts of a `/hosts` read, by id.
pub(crate) fn registered(hosts: &ZNode) -> Vec<Registered> {
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
                    .and_then(|v| readable_inventory(id, v)),
                agent: node.props.contains_key(AGENT_PROPERTY),
            }
        })
        .collect()
}

/// The inventory `value` of host `id`, or `None` with a warning naming the host if it is
/// malformed (anyone may write under `/hosts`: the host is planned as if converged).
fn readable_inventory(id: &str, value: &Value) -> Option<Inventory> {
    match Inventory::from_value(value) {
        Ok(inventory) => Some(inventory),
        Err(e) => {
            let (id, e) = (cut_text(id), cut_text(&e.to_string()));
            tracing::warn!(
                "host {id}: its inventory cannot be read ({e}); planned as if converged on \
                 the current tree"
            );
            None
        }
    }
}

/// Nodes of the current tree read on demand: a [`TreeSource`] that records the paths it was
/// asked for and has not read, so that work over it can be repeated with those read (links
/// lead anywhere, so what to read is only known by trying).
#[derive(Debug, Default)]
pub(crate) struct Partial {
    nodes: HashMap<String, Props>,
    ephemeral: HashSet<String>,
    absent: HashSet<String>,
    misses: RefCell<Vec<String>>,
}

impl NodeSource for Partial {
    fn props_at(&self, path: &str) -> Option<&Props> {
        let found = self.nodes.get(path);
        if found.is_none() && !self.absent.contains(path) {
            self.misses.borrow_mut().push(path.to_string());
        }
        found
    }
}

impl TreeSource for Partial {
    fn is_ephemeral(&self, path: &str) -> bool {
        self.ephemeral.contains(path)
    }
}

/// Most rounds of reads [`Partial::settle`] makes (a longer chain of links is an error).
const MAX_ROUNDS: usize = 64;

impl Partial {
    /// Reads the data of `paths` (those not read yet), pipelined.
    pub(crate) async fn read(
        &mut self,
        client: &Client,
        paths: Vec<String>,
    ) -> Result<(), ZkError> {
        let mut wanted: Vec<String> = paths
            .into_iter()
            .filter(|p| !self.nodes.contains_key(p) && !self.absent.contains(p))
            .collect();
        wanted.sort();
        wanted.dedup();
        read_all(
            client,
            wanted.into_iter().map(Want::Data).collect(),
            |want, result, _| {
                let Want::Data(path) = want else { return };
                keep_read(
                    &mut self.nodes,
                    &mut self.ephemeral,
                    &mut self.absent,
                    path,
                    result,
                );
            },
        )
        .await
    }

    /// Runs `work` until it asks for no node that has not been read, reading what it asked
    /// for between runs.
    pub(crate) async fn settle<T>(
        &mut self,
        client: &Client,
        mut work: impl FnMut(&Partial) -> T,
    ) -> Result<T, ZkError> {
        for _ in 0..MAX_ROUNDS {
            let out = work(self);
            let misses = std::mem::take(&mut *self.misses.borrow_mut());
            if misses.is_empty() {
                return Ok(out);
            }
            self.read(client, misses).await?;
        }
        Ok(work(self))
    }
}

/// The deploy nodes of the current tree named after any of `targets`, by target (one
/// children-only walk: the agent's own, [`walk_deploy_nodes`]).
pub(crate) async fn deploy_nodes_of(
    client: &Client,
    targets: &HashSet<String>,
) -> Result<HashMap<String, Vec<String>>, ZkError> {
    if targets.is_empty() {
        return Ok(HashMap::new());
    }
    let (paths, _) = walk_deploy_nodes(client, &|name| targets.contains(name)).await?;
    Ok(by_target(&paths).into_iter().collect())
}

/// Works out what the fleet plan needs of the current tree, reading only that: the resolved
/// properties of `app_paths`, and what each host of `without_inventory` has if it converged
/// on the current tree (its deploy nodes from one walk, then its discovery).
pub(crate) async fn prefetch(
    client: &Client,
    app_paths: &BTreeSet<String>,
    without_inventory: &[&Host],
) -> Result<Prefetched, ZkError> {
    let targets: HashSet<String> = without_inventory
        .iter()
        .flat_map(|h| h.targets())
        .map(String::from)
        .collect();
    let by_target = deploy_nodes_of(client, &targets).await?;
    let nodes_of = |host: &Host| {
        let mut nodes: Vec<String> = host
            .targets()
            .into_iter()
            .filter_map(|t| by_target.get(t))
            .flatten()
            .cloned()
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    };
    let mut partial = Partial::default();
    let mut first: Vec<String> = vec!["/".to_string()];
    first.extend(app_paths.iter().cloned());
    for host in without_inventory {
        for node in nodes_of(host) {
            if let Some((app, _)) = node.rsplit_once("/deploy/") {
                first.push(app.to_string());
            }
            first.push(node);
        }
        if let Some(role) = &host.role {
            first.push(crate::zk::paths::role_path(role));
        }
    }
    partial.read(client, first).await?;
    partial
        .settle(client, |tree| {
            let mut out = Prefetched::default();
            for path in app_paths {
                if tree.props_at(path).is_some() {
                    if let Ok(props) = resolved_props(tree, path) {
                        out.properties.insert(path.clone(), props);
                    }
                }
            }
            for host in without_inventory {
                let found = discover_in(tree, &nodes_of(host), host)
                    .map(|found| converged(&found))
                    .map_err(|e| e.to_string());
                out.converged.insert(host.id.clone(), found);
            }
            out
        })
        .await
}
