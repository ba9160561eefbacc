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
pub mod read;
pub mod render;

use serde::Serialize;
use serde_json::Value;

use crate::tree::Node;
use crate::zk::{Client, ZkError};
use index::TargetIndex;
use plan::{plan_fleet, FleetPlan, Indexed};

/// The stable JSON document of `plan --json`: the candidate, the current cluster version, and
/// the plan (new keys may be added, none removed or renamed).
#[derive(Debug, Clone, Serialize)]
pub struct Document {
    /// The candidate: a git revision, or `files`.
    pub revision: String,
    /// The cluster version now.
    pub cluster: Value,
    /// The plan.
    #[serde(flatten)]
    pub plan: FleetPlan,
}

/// Reads the fleet and the current tree, and plans `candidate` (a merged, linted tree) for
/// every registered host.
pub async fn plan_candidate(
    client: &Client,
    revision: &str,
    candidate: &Node,
) -> Result<Document, ZkError> {
    let (hosts, current) = futures::try_join!(read::read_hosts(client), read::read_current(client))?;
    let cluster = hosts.props.get("version").cloned().unwrap_or(Value::Null);
    let registered = read::registered(&hosts);
    let current_index = TargetIndex::build(&current);
    let candidate_index = TargetIndex::build(candidate);
    let plan = plan_fleet(
        &Indexed {
            tree: &current,
            index: &current_index,
        },
        &Indexed {
            tree: candidate,
            index: &candidate_index,
        },
        &registered,
    );
    Ok(Document {
        revision: revision.to_string(),
        cluster,
        plan,
    })
}
