//! The fleet facts a pass's rollout rule needs ([`super::rollout_rule`], docs/design.md,
//! "Exclusion"): whether the fleet is mixed (any registered host node without `agent`: the
//! original's agent, which knows only the node locks; then every node uses the node lock with
//! K = 1, [`super::mixed`]), and how many hosts each node whose `max-parallel` is a percentage
//! is deployed to. Where a deployment then runs: [`super::exclusion`].

use std::collections::BTreeMap;

use super::discover::Discovered;
use crate::tree::rollout::Rollout as Settings;
use crate::zk::{join, Client, ZkError};

pub(crate) use super::mixed::{mixed_fleet_and_stats, mixed_reason, MixedCache, BUDGETS_OFF};
pub(crate) use crate::zk::paths::AGENT_PROPERTY;

use super::rollout_rule::{node_settings, percent_nodes, wants_parallel, FleetFacts};

/// Reads what [`plan_rollouts`] needs of the fleet for the application nodes at `paths`
/// (a pass's discovered deployments, before it knows which it will run): whether the fleet
/// is mixed (only when one of them wants K > 1) and the deploy targets of those whose
/// `max-parallel` is a percentage, in one round trip. Sent before the yum queries, answered
/// while they run.
pub(crate) async fn read_fleet_facts(
    client: &Client,
    mixed_cache: &MixedCache,
    found: &Discovered,
    paths: &[&str],
) -> Result<FleetFacts, ZkError> {
    let wanted: BTreeMap<&str, (&str, Settings)> = paths
        .iter()
        .map(|path| (*path, ("", node_settings(found, path))))
        .collect();
    // A node whose max-parallel is a percentage wants K > 1: its deploy node's stat is read
    // with the mixed-fleet check (one multi-read). The targets are the stat's `numChildren`,
    // not a list of them: a few bytes whatever the fleet's size (a list of 10,000 host names
    // would be about 100 KB, for every host, on every pass).
    let percent = percent_nodes(&wanted);
    if !wants_parallel(&wanted) {
        return Ok(FleetFacts::default());
    }
    let deploy_nodes: Vec<String> = percent.iter().map(|path| join(path, "deploy")).collect();
    let (mixed, stats) = mixed_fleet_and_stats(client, mixed_cache, &deploy_nodes).await?;
    let mut facts = FleetFacts {
        mixed,
        ..FleetFacts::default()
    };
    for (path, stat) in percent.into_iter().zip(stats) {
        let count = stat.map_or(0, |s| usize::try_from(s.num_children).unwrap_or(0));
        facts.targets.insert(path.to_string(), count);
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use crate::agent::rollout_rule::{add_canary, canary_count, Canary};
    use serde_json::json;

    fn canary(path: &str) -> Canary {
        Canary {
            path: path.into(),
            key: "foo 1.0".into(),
        }
    }

    #[test]
    fn a_canary_record_counts_for_its_own_path_or_one_without_a_path() {
        let mut p = crate::tree::Props::new();
        add_canary(&mut p, &canary("/a,b"), "h1");
        assert_eq!(canary_count(&p, &canary("/a,b")), 1);
        assert_eq!(canary_count(&p, &canary("/a/b")), 0);
        add_canary(&mut p, &canary("/a/b"), "h2");
        assert_eq!(
            p["canary"],
            json!({"path": "/a/b", "version": "foo 1.0", "hosts": ["h2"]})
        );
        let old = json!({"version": "foo 1.0", "hosts": ["h1", "h3"]});
        p.insert("canary".into(), old);
        assert_eq!(canary_count(&p, &canary("/a/b")), 2);
    }
}
