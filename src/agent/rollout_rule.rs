//! The rollout rule, pure (docs/rollouts.md): what each application node's rollout properties
//! mean on this fleet now. K is `max-parallel` (a percentage of the node's deploy targets,
//! rounded up, at least 1); while any registered host is the original's agent (a mixed
//! fleet) every node uses the node lock with K = 1, but only when some node wants K > 1; a
//! node's canaries are counted per package version in its node lock's data. The agent
//! ([`super::execute`]) and the fleet plan ([`crate::fleet::plan`]) both call
//! [`plan_rollouts`], so the plan shown is the plan run.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::discover::Discovered;
use super::plan::{Rollout, Step};
use crate::tree::rollout::{self as settings, Rollout as Settings};

/// The rollout of every application node of a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RolloutPlan {
    /// By application node path.
    pub(crate) nodes: BTreeMap<String, Rollout>,
    /// Why every node falls back to the node lock with K = 1, if it does.
    pub(crate) mixed: Option<String>,
}

/// The rollout settings of a node as discovered (its properties with links followed).
pub(crate) fn node_settings(found: &Discovered, path: &str) -> Settings {
    let props = found.properties.get(path);
    settings::parse(path, |k| props.and_then(|p| p.get(k)).cloned()).unwrap_or_default()
}

/// What the rollout of a pass's deployments depends on beyond the tree: read from ZooKeeper
/// by the agent ([`read_fleet_facts`]), or taken from what `zkdeployment plan` read
/// (`crate::fleet`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FleetFacts {
    /// Why the fleet is mixed, if it is (it matters only when a node wants K > 1).
    pub(crate) mixed: Option<String>,
    /// The number of deploy targets (children of `<node>/deploy`) of application nodes whose
    /// `max-parallel` is a percentage; a node not here counts 0.
    pub(crate) targets: BTreeMap<String, usize>,
}

/// The application nodes among `steps`' deployments, each with its package and its rollout
/// settings as discovered (a bad value reads as the defaults: discovery reported it).
pub(crate) fn wanted_rollouts<'a>(
    found: &Discovered,
    steps: &'a [Step],
) -> BTreeMap<&'a str, (&'a str, Settings)> {
    let mut wanted = BTreeMap::new();
    for step in steps {
        if let Step::Deploy { path, rpm, .. } = step {
            wanted.insert(path.as_str(), (rpm.as_str(), node_settings(found, path)));
        }
    }
    wanted
}

/// True if a node of `wanted` asks for K > 1 or a failure budget (`max-failures` above 0,
/// or `on-failure = 'halt-node'`): only then does the mixed-fleet rule matter (and the agent
/// reads the host nodes).
pub(crate) fn wants_parallel(wanted: &BTreeMap<&str, (&str, Settings)>) -> bool {
    wanted.values().any(|(_, r)| {
        r.max_parallel != settings::Parallel::Count(1)
            || r.max_failures != settings::Budget::Count(0)
            || r.on_failure != settings::OnFailure::HaltCluster
    })
}

/// The nodes of `wanted` whose `max-parallel` or `max-failures` is a percentage (of their
/// deploy targets).
pub(crate) fn percent_nodes<'a>(wanted: &BTreeMap<&'a str, (&'a str, Settings)>) -> Vec<&'a str> {
    wanted
        .iter()
        .filter(|(_, (_, r))| {
            r.max_parallel.is_percent() || matches!(r.max_failures, settings::Budget::Percent(_))
        })
        .map(|(path, _)| *path)
        .collect()
}

/// The rollout of every application node among `steps`' deployments, pure: from the
/// discovered settings, what is known of the fleet (`facts`), and `health` (whether a package
/// has a health check). The mixed-fleet note is kept only when a node wants K > 1.
pub(crate) fn plan_rollouts(
    found: &Discovered,
    steps: &[Step],
    facts: &FleetFacts,
    mut health: impl FnMut(&str) -> bool,
) -> RolloutPlan {
    let wanted = wanted_rollouts(found, steps);
    let mut plan = RolloutPlan {
        mixed: facts.mixed.clone().filter(|_| wants_parallel(&wanted)),
        ..RolloutPlan::default()
    };
    for (path, (rpm, r)) in wanted {
        let targets = facts.targets.get(path).copied().unwrap_or(0);
        let (parallel, max_failures) = match plan.mixed {
            Some(_) => (1, None),
            None => (
                r.max_parallel.effective(targets),
                Some(r.max_failures.effective(targets)),
            ),
        };
        plan.nodes.insert(
            path.to_string(),
            Rollout {
                parallel,
                canary: r.canary,
                health: health(rpm),
                health_deadline_ms: (r.health_deadline * 1000.0) as u64,
                max_failures,
                on_failure: r.on_failure,
            },
        );
    }
    plan
}

/// The canary record a deployment counts in: its node's path and its version key (package
/// and version). Two nodes whose lock names collide (`/a/b`, `/a,b`) share a lock node, so
/// the record names the path; a record without one (written by an agent that did not name
/// it) is taken as this node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Canary {
    /// The application node's path.
    pub(crate) path: String,
    /// `<rpm> <version>`.
    pub(crate) key: String,
}

impl Canary {
    /// True if the node lock's canary record `c` is this deployment's.
    fn matches(&self, c: &serde_json::Map<String, Value>) -> bool {
        c.get("version").and_then(Value::as_str) == Some(self.key.as_str())
            && c.get("path")
                .is_none_or(|p| p.as_str() == Some(self.path.as_str()))
    }
}

/// The canary count of a deployment, from the node lock's data.
pub(crate) fn canary_count(lock_props: &crate::tree::Props, canary: &Canary) -> usize {
    match lock_props.get("canary") {
        Some(Value::Object(c)) if canary.matches(c) => {
            c.get("hosts").and_then(Value::as_array).map_or(0, Vec::len)
        }
        _ => 0,
    }
}

/// The canary record of a deployment: its node's path, its package and version.
pub(crate) fn canary_key(step: &Step) -> Canary {
    match step {
        Step::Deploy {
            rpm, version, path, ..
        } => Canary {
            path: path.clone(),
            key: format!("{rpm} {}", version.as_deref().unwrap_or("*")),
        },
        _ => Canary {
            path: String::new(),
            key: String::new(),
        },
    }
}

/// Adds this host to the canaries of `canary` in the node lock's data `p` (a record of
/// another node or version is replaced).
pub(crate) fn add_canary(p: &mut crate::tree::Props, canary: &Canary, host_id: &str) {
    let mut hosts: Vec<Value> = match p.get("canary") {
        Some(Value::Object(c)) if canary.matches(c) => c
            .get("hosts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if !hosts.iter().any(|h| h.as_str() == Some(host_id)) {
        hosts.push(json!(host_id));
    }
    let record = json!({"path": canary.path, "version": canary.key, "hosts": hosts});
    p.insert("canary".into(), record);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::plan::Lock;

    fn deploy(path: &str, rpm: &str, version: Option<&str>) -> Step {
        Step::Deploy {
            rpm: rpm.into(),
            app: rpm.into(),
            path: path.into(),
            n: 0,
            version: version.map(Into::into),
            subtype: None,
            lock: Lock::Node(format!("/agent-locks/{}", &path[1..])),
            rollout: Rollout::default(),
        }
    }

    /// Discovery that found `/a` with the properties `props` (JSON object text).
    fn found(props: &str) -> Discovered {
        let props: crate::tree::Props = serde_json::from_str(props).unwrap();
        Discovered {
            deployments: Vec::new(),
            properties: BTreeMap::from([("/a".to_string(), props)]),
            controller: None,
        }
    }

    #[test]
    fn k_follows_max_parallel_the_targets_and_the_mixed_fleet_rule() {
        // (properties of /a, targets of /a, mixed fleet, wanted K, mixed note kept)
        let cases: &[(&str, usize, bool, u32, bool)] = &[
            (r#"{}"#, 0, false, 1, false),
            (r#"{}"#, 0, true, 1, false),
            (r#"{"max-parallel": 1}"#, 9, true, 1, false),
            (r#"{"max-parallel": 4}"#, 0, false, 4, false),
            (r#"{"max-parallel": 4}"#, 0, true, 1, true),
            (r#"{"max-parallel": "10%"}"#, 100, false, 10, false),
            (r#"{"max-parallel": "10%"}"#, 101, false, 11, false),
            (r#"{"max-parallel": "25%"}"#, 3, false, 1, false),
            (r#"{"max-parallel": "25%"}"#, 0, false, 1, false),
            (r#"{"max-parallel": "100%"}"#, 7, false, 7, false),
            (r#"{"max-parallel": "50%"}"#, 10, true, 1, true),
            // A bad value reads as the default (discovery reported it).
            (r#"{"max-parallel": 0}"#, 5, false, 1, false),
        ];
        let steps = [deploy("/a", "foo", Some("1"))];
        for &(props, targets, mixed, k, note) in cases {
            let facts = FleetFacts {
                mixed: mixed.then(|| "the original".to_string()),
                targets: BTreeMap::from([("/a".to_string(), targets)]),
            };
            let got = plan_rollouts(&found(props), &steps, &facts, |_| false);
            let case = format!("{props} on {targets} targets, mixed {mixed}");
            assert_eq!(got.nodes["/a"].parallel, k, "{case}");
            assert_eq!(got.mixed.is_some(), note, "{case}");
        }
    }

    #[test]
    fn canaries_health_and_deadline_are_carried() {
        // (properties, has a health check, wanted canary, health, deadline in ms)
        let cases: &[(&str, bool, u32, bool, u64)] = &[
            (r#"{}"#, false, 0, false, 300_000),
            (
                r#"{"canary": 2, "max-parallel": 3}"#,
                true,
                2,
                true,
                300_000,
            ),
            (r#"{"health-deadline": 1.5}"#, true, 0, true, 1_500),
        ];
        let steps = [deploy("/a", "foo", None)];
        for &(props, health, canary, has, deadline) in cases {
            let got = plan_rollouts(&found(props), &steps, &FleetFacts::default(), |rpm| {
                health && rpm == "foo"
            });
            let r = &got.nodes["/a"];
            assert_eq!(
                (r.canary, r.health, r.health_deadline_ms),
                (canary, has, deadline),
                "{props}"
            );
        }
    }

    #[test]
    fn canaries_are_counted_per_version_key() {
        let step = deploy("/a", "foo", Some("2.0"));
        assert_eq!(canary_key(&step).key, "foo 2.0");
        assert_eq!(canary_key(&step).path, "/a");
        assert_eq!(canary_key(&deploy("/a", "foo", None)).key, "foo *");
        let at = |key: &str| Canary {
            path: "/a".into(),
            key: key.into(),
        };
        let mut lock = crate::tree::Props::new();
        // (host added, key, count wanted for "foo 2.0" after it)
        let cases = [
            ("h1", "foo 2.0", 1),
            ("h1", "foo 2.0", 1),
            ("h2", "foo 2.0", 2),
            // A new version starts a new count.
            ("h3", "foo 3.0", 0),
        ];
        for (host, key, count) in cases {
            add_canary(&mut lock, &at(key), host);
            assert_eq!(canary_count(&lock, &at("foo 2.0")), count, "{host} {key}");
        }
        assert_eq!(canary_count(&lock, &at("foo 3.0")), 1);
    }

    #[test]
    fn only_nodes_that_want_k_above_one_read_the_fleet() {
        let wanted = |props: &str| {
            let found = found(props);
            let steps = [deploy("/a", "foo", None)];
            let rollouts = wanted_rollouts(&found, &steps);
            let percent: Vec<String> = percent_nodes(&rollouts)
                .iter()
                .map(|s| s.to_string())
                .collect();
            (wants_parallel(&rollouts), percent)
        };
        assert_eq!(wanted(r#"{}"#), (false, vec![]));
        assert_eq!(wanted(r#"{"max-parallel": 2}"#), (true, vec![]));
        assert_eq!(
            wanted(r#"{"max-parallel": "5%"}"#),
            (true, vec!["/a".to_string()])
        );
        assert_eq!(node_settings(&found("{}"), "/nowhere"), Settings::default());
    }
}
