//! Failure budgets, node halts and node pauses in the soak (CONTRACT 15): what the soak does
//! and sees of them. The checks are in `budget_check.rs`.
//!
//! - [`observe`] (the operator, every round): journals every node halt, node pause and
//!   failure record under `/node-state` and `/node-pauses` once, with the time the server
//!   created it; a failure record with its place among the failed hosts of its node at its
//!   version in the listing it was first seen in.
//! - The operator ([`Resumer`]) ends what would stop the fleet for good with the real
//!   `zkdeployment resume PATH`: a node halt 0.3–2 s after it saw it, the failure records of
//!   a node at the cluster's version (its quarantined hosts run it again) 1–5 s after, a
//!   pause the nemesis left 12 s after.
//! - The nemesis: `budget-fail` makes the next deploy run of a node with a budget fail on
//!   1 to F + 2 of its hosts at once (the `fail-node` knob, `payload.rs`: within the budget,
//!   and beyond it, counted when several fail together); `node-pause` pauses a node with the
//!   real `zkdeployment pause PATH` for 1–5 s, then resumes it with `resume PATH`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::Value;
use zkdeployment::zk::decode;
use zkdeployment::zk::node_state::{parse_record, path_of_state_key, version_key, HALT_PREFIX};

use super::rng::Rng;
use super::support::agent::now;
use super::world::{NodeCommand, NodeRecord, World};

/// Where the records are.
const NODE_STATE: &str = "/node-state";
/// Where the pauses are.
const NODE_PAUSES: &str = "/node-pauses";

/// What [`observe`] found in place this round.
#[derive(Debug, Default)]
pub struct Present {
    /// Halted nodes.
    pub halted: BTreeSet<String>,
    /// Paused nodes, with when their pause was made.
    pub paused: BTreeMap<String, f64>,
    /// Nodes with failure records, with their version keys.
    pub failed: BTreeMap<String, BTreeSet<String>>,
}

/// Reads `/node-state` and `/node-pauses` and journals what is new; what is in place now
/// (None if ZooKeeper could not say).
pub async fn observe(world: &World) -> Option<Present> {
    let names = list(world, NODE_STATE).await?;
    let pauses = list(world, NODE_PAUSES).await?;
    let known: BTreeSet<String> = {
        let journal = world.journal.lock().unwrap();
        journal
            .node_records
            .iter()
            .filter(|r| r.kind == "fail")
            .map(|r| r.name.clone())
            .collect()
    };
    let mut present = Present::default();
    for name in &names {
        if let Some(r) = parse_record(name) {
            let Some(path) = path_of_state_key(r.key) else {
                continue;
            };
            present
                .failed
                .entry(path.clone())
                .or_default()
                .insert(r.vkey.to_string());
            if !known.contains(name) {
                let place = place_in(&names, name);
                record(world, "fail", NODE_STATE, name, &path, place).await;
            }
        } else if let Some(key) = name.strip_prefix(HALT_PREFIX) {
            let Some(path) = path_of_state_key(key) else {
                continue;
            };
            if record(world, "halt", NODE_STATE, name, &path, 0).await {
                present.halted.insert(path);
            }
        }
    }
    for key in &pauses {
        let Some(path) = path_of_state_key(key) else {
            continue;
        };
        if record(world, "pause", NODE_PAUSES, key, &path, 0).await {
            let ctime = world
                .journal
                .lock()
                .unwrap()
                .node_records
                .iter()
                .rev()
                .find(|r| r.kind == "pause" && r.path == path)
                .map_or(now(), |r| r.ctime);
            present.paused.insert(path, ctime);
        }
    }
    Some(present)
}

/// The children of `path` (none if it is missing); None if ZooKeeper failed.
async fn list(world: &World, path: &str) -> Option<Vec<String>> {
    let p = path.to_string();
    world
        .zk
        .call_opt(|c| async move { c.list_children(&p).await })
        .await
        .ok()
        .map(Option::unwrap_or_default)
}

/// The place of the failure record `name` among the failed hosts of its node at its version
/// in `names`: one more than the distinct other hosts with a record numbered before its
/// host's first.
pub fn place_in(names: &[String], name: &str) -> usize {
    let Some(me) = parse_record(name) else {
        return 0;
    };
    let records: Vec<_> = names
        .iter()
        .filter_map(|n| parse_record(n))
        .filter(|r| r.key == me.key && r.vkey == me.vkey)
        .collect();
    let first = records
        .iter()
        .filter(|r| r.host == me.host)
        .map(|r| r.seq)
        .fold(me.seq, i64::min);
    let before: BTreeSet<&str> = records
        .iter()
        .filter(|r| r.host != me.host && r.seq < first)
        .map(|r| r.host)
        .collect();
    before.len() + 1
}

/// Reads the node `dir/name` and journals it if this creation of it is new; true if it is
/// there.
async fn record(
    world: &World,
    kind: &'static str,
    dir: &str,
    name: &str,
    path: &str,
    place: usize,
) -> bool {
    let at = format!("{dir}/{name}");
    let Ok(Some((data, stat))) = world
        .zk
        .call_opt(|c| async move { c.get_data(&at).await })
        .await
    else {
        return false;
    };
    let mut journal = world.journal.lock().unwrap();
    let known = journal
        .node_records
        .iter()
        .any(|r| r.name == name && r.czxid == stat.czxid);
    if !known {
        journal.node_records.push(NodeRecord {
            kind,
            name: name.to_string(),
            path: path.to_string(),
            czxid: stat.czxid,
            ctime: stat.ctime as f64 / 1000.0,
            seen: now(),
            data: decode(&data),
            place,
        });
    }
    true
}

/// Runs `zkdeployment pause PATH` or `resume PATH` and journals it; its exit status.
pub async fn node_command(world: &World, what: &'static str, path: &str) -> i32 {
    let start = now();
    let mut args = vec![what, path, "-z", &world.conn];
    if what == "pause" {
        args.extend(["--reason", "the soak's nemesis"]);
    }
    let run = super::support::run_with_async(&args, None, &[]).await;
    world
        .journal
        .lock()
        .unwrap()
        .node_commands
        .push(NodeCommand {
            what,
            path: path.to_string(),
            start,
            end: now(),
            code: run.code,
        });
    run.code
}

/// The operator's schedule of `resume PATH`: when each node is due.
#[derive(Debug, Default)]
pub struct Resumer {
    due: BTreeMap<String, f64>,
}

impl Resumer {
    /// Schedules what `present` asks for (`version`: the cluster's), and resumes the nodes
    /// that are due.
    pub async fn round(
        &mut self,
        world: &World,
        present: &Present,
        version: &Value,
        rng: &mut Rng,
    ) {
        let t = now();
        let vkey = version_key(version);
        for path in &present.halted {
            self.due
                .entry(path.clone())
                .or_insert(t + rng.between(0.3, 2.0));
        }
        for (path, vkeys) in &present.failed {
            if vkeys.contains(&vkey) {
                self.due
                    .entry(path.clone())
                    .or_insert(t + rng.between(1.0, 5.0));
            }
        }
        for (path, made) in &present.paused {
            // The nemesis resumes its own pauses; one it could not (the ensemble was down).
            if t - made > 12.0 {
                self.due.entry(path.clone()).or_insert(t);
            }
        }
        let ready: Vec<String> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= t)
            .map(|(p, _)| p.clone())
            .collect();
        for path in ready {
            self.due.remove(&path);
            node_command(world, "resume", &path).await;
        }
    }
}

/// `budget-fail`: the next deploy run of a node with a budget (of the last commit) fails on
/// 1 to F + 2 of its hosts (the `fail-node` knob); true if a run took one within 10 s. A
/// knob no run took stays for the host's next pass (only a pass that deploys the node takes
/// it, and the cluster is often halted), until [`clear_knobs`].
pub async fn budget_fail(world: &World, rng: &mut Rng) -> bool {
    let (_, tree) = world.last_commit();
    let nodes: Vec<(&String, usize, Vec<usize>)> = tree
        .acme
        .iter()
        .filter(|(_, node)| node.budgeted())
        .map(|(name, node)| {
            let slots = node
                .hosts
                .keys()
                .filter_map(|h| slot_of(world, h))
                .collect();
            (name, node.f(), slots)
        })
        .collect();
    if nodes.is_empty() {
        return false;
    }
    let (name, f, mut slots) = nodes[rng.below(nodes.len())].clone();
    let path = format!("/acme/{name}");
    let mut chosen = Vec::new();
    for _ in 0..(1 + rng.below(f + 2)).min(slots.len()) {
        chosen.push(slots.remove(rng.below(slots.len())));
    }
    for &i in &chosen {
        let knobs = &world.slots[i].knobs;
        let tmp = knobs.join("fail-node.tmp");
        std::fs::write(&tmp, &path).unwrap();
        std::fs::rename(&tmp, knobs.join("fail-node")).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let taken = || {
        chosen
            .iter()
            .filter(|i| {
                std::fs::read_to_string(world.slots[**i].knobs.join("fail-node")).ok()
                    != Some(path.clone())
            })
            .count()
    };
    while taken() < chosen.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    taken() > 0
}

/// Removes the `fail-node` knobs no run took (when the faults stop).
pub fn clear_knobs(world: &World) {
    for slot in &world.slots {
        let _ = std::fs::remove_file(slot.knobs.join("fail-node"));
    }
}

/// The slot of the host `id`.
fn slot_of(world: &World, id: &str) -> Option<usize> {
    world.slots.iter().position(|s| s.host.id == id)
}

/// `node-pause`: pauses a node of the last commit for 1–5 s with the real commands; true if
/// the pause was made (a mixed fleet refuses it).
pub async fn node_pause(world: &World, rng: &mut Rng) -> bool {
    let (_, tree) = world.last_commit();
    let names: Vec<&String> = tree.acme.keys().collect();
    let path = format!("/acme/{}", names[rng.below(names.len())]);
    if node_command(world, "pause", &path).await != 0 {
        return false;
    }
    tokio::time::sleep(Duration::from_secs_f64(rng.between(1.0, 5.0))).await;
    // Bounded: a resume refused while the ensemble restarts is tried again (the operator
    // ends any pause left after 12 s).
    for _ in 0..5 {
        if node_command(world, "resume", &path).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    true
}
