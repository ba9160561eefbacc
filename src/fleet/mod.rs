//! The fleet plan (`zkdeployment plan`): what a candidate tree would change on every
//! registered host, before it is synced. Nothing is written and no lock is taken.
//!
//! - [`read`]: the registered hosts (with their published inventories) and the current tree,
//!   read from ZooKeeper with pipelined multi-reads;
//! - [`index`]: a tree held in memory indexed by deploy target, so that every host's
//!   discovery is answered without a walk per host;
//! - [`plan`] (pure): each host planned by the agent's own discovery and planner, and the plans
//!   grouped by what changes;
//! - [`render`]: the terminal form (the JSON form is [`Document`]).

pub mod index;
pub mod plan;
pub(crate) mod read;
pub(crate) mod render;

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use crate::agent::model::Host;
use crate::tree::Node;
use crate::zk::{Client, ZkError};
use index::TargetIndex;
use plan::{fleet_facts, plan_fleet, FleetPlan, Indexed};

/// The stable JSON document of `plan --json`: the candidate, the current cluster version, and
/// the plan (new keys may be added, none removed or renamed).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Document {
    /// The candidate: a git revision, or `files`.
    pub(crate) revision: String,
    /// The cluster version now (`null` when halted, on `/hosts` or by a halt record).
    pub(crate) cluster: Value,
    /// True if every host is listed with its plan (`--per-host`); false if the lists of hosts
    /// name only the hosts that change.
    pub(crate) per_host: bool,
    /// The plan.
    #[serde(flatten)]
    pub(crate) plan: FleetPlan,
}

/// Reads the fleet (and, of the current tree, what the plan asks about), and plans
/// `candidate` (a merged, linted tree) for every registered host.
pub(crate) async fn plan_candidate(
    client: &Client,
    revision: &str,
    candidate: &Node,
) -> Result<Document, ZkError> {
    let hosts = read::read_hosts(client).await?;
    // A halt recorded under `/hosts-halt` halts the cluster as `/hosts` `version` = None does.
    let mut props = hosts.props.clone();
    crate::zk::halts::effective(&mut props, &crate::zk::halts::read_halts(client).await?);
    let cluster = props.get("version").cloned().unwrap_or(Value::Null);
    let registered = read::registered(&hosts);
    drop(hosts);
    let candidate_index = TargetIndex::build(candidate);
    let app_paths: BTreeSet<String> = registered
        .iter()
        .flat_map(|r| candidate_index.deploy_nodes(&r.host))
        .filter_map(|node| node.rsplit_once("/deploy/").map(|(app, _)| app.to_string()))
        .collect();
    let without: Vec<&Host> = registered
        .iter()
        .filter(|r| r.inventory.is_none())
        .map(|r| &r.host)
        .collect();
    let current = read::prefetch(client, &app_paths, &without).await?;
    let facts = fleet_facts(candidate, &app_paths, &registered);
    let plan = plan_fleet(
        &current,
        &Indexed {
            tree: candidate,
            index: &candidate_index,
        },
        &registered,
        &facts,
    );
    Ok(Document {
        revision: revision.to_string(),
        cluster,
        per_host: true,
        plan,
    })
}
