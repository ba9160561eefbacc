//! Rolling deploys in a pass (README, "Rolling deploys"): what each application node's rollout
//! properties mean on this fleet now ([`RolloutPlan`]), and the exclusion a deployment runs
//! under.
//!
//! - K = 1 (`max-parallel` unset or 1, or a mixed fleet): the node lock `/agent-locks/<name>`
//!   of section 4, unchanged.
//! - K > 1: a lease of the kazoo-compatible semaphore `/agent-semaphores/<name>`
//!   ([`crate::zk::semaphore`]) with max_leases = K. Each lease's in-flight record goes into
//!   the data of the semaphore's guard lock node `/agent-semaphores/<name>-__lock__`, as
//!   `{"in-flight": {<lease>: record}}`; a host that takes a lease and finds a record whose
//!   lease is gone (its writer died mid-step) halts the cluster naming it. A live holder
//!   clears its record before giving its lease back, so "record present after its lease was
//!   seen gone" proves the writer died. Whichever way a host enters a node (lock or lease),
//!   it also reads the other place's records, so a holder that died before K changed (or a
//!   dead canary) is still named.
//! - `canary = C` (with K > 1): while fewer than C hosts have deployed the node's package
//!   version (health check included), hosts deploy it one at a time under the node lock; the
//!   count lives in the node lock's data, `{"canary": {"version": "<rpm> <version>",
//!   "hosts": [ids]}}`, and a canary adds itself (in the same write that clears its in-flight
//!   record) only after its step succeeded, still holding the lock. A failing canary halts
//!   the cluster, so no other host starts that version; the next version starts a new count.
//! - Mixed fleets: while any registered host node lacks `agent` (the original's agent, which
//!   knows only the node locks), every node uses the node lock with K = 1.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::cluster::halt;
use super::discover::Discovered;
use super::error::{Failure, Interrupt, StepError};
use super::health::has_health_check;
use super::pass::Pass;
use super::plan::{Rollout, Step};
use crate::files::now;
use crate::tree::literal::py_str;
use crate::tree::rollout::{self as settings, Rollout as Settings};
use crate::zk::paths::{node_lock_path as lock_path, HOSTS};
use crate::zk::semaphore::{self, Lease};
use crate::zk::update::update_props;
use crate::zk::{call_retrying, decode, join, Client, ZkError};

pub use crate::zk::paths::AGENT_PROPERTY;

/// The rollout of every application node of a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RolloutPlan {
    /// By application node path.
    pub nodes: BTreeMap<String, Rollout>,
    /// Why every node falls back to the node lock with K = 1, if it does.
    pub mixed: Option<String>,
}

/// The rollout settings of a node as discovered (its properties with links followed).
pub fn node_settings(found: &Discovered, path: &str) -> Settings {
    let props = found.properties.get(path);
    settings::parse(path, |k| props.and_then(|p| p.get(k)).cloned()).unwrap_or_default()
}

/// Why the fleet is mixed: the first registered host node without [`AGENT_PROPERTY`].
pub async fn mixed_fleet(client: &Client) -> Result<Option<String>, ZkError> {
    let mut ids = call_retrying("list", HOSTS, || client.list_children(HOSTS)).await?;
    ids.sort();
    let reads = ids.iter().map(|id| {
        let path = join(HOSTS, id);
        async move {
            let got = call_retrying("get", &path, || client.get_data(&path)).await;
            (id, got)
        }
    });
    for (id, got) in futures::future::join_all(reads).await {
        match got {
            Ok((data, _)) => {
                let props = decode(&data);
                if props.get(AGENT_PROPERTY).is_none() {
                    let name = props.get("name").map(py_str).unwrap_or_default();
                    return Ok(Some(format!(
                        "host {id} ({name}) has no '{AGENT_PROPERTY}' property (the original's agent): every node uses the node lock, max-parallel 1"
                    )));
                }
            }
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// The number of deploy targets of the application node at `path` (children of
/// `<path>/deploy`): the hosts a percentage counts.
async fn deploy_targets(client: &Client, path: &str) -> Result<usize, ZkError> {
    let deploy = join(path, "deploy");
    match call_retrying("list", &deploy, || client.list_children(&deploy)).await {
        Ok(names) => Ok(names.len()),
        Err(e) if e.is_no_node() => Ok(0),
        Err(e) => Err(e),
    }
}

/// Works out the rollout of every application node among `steps`' deployments.
pub async fn rollout_plan(
    client: &Client,
    root: &std::path::Path,
    found: &Discovered,
    steps: &[Step],
) -> Result<RolloutPlan, ZkError> {
    let mut plan = RolloutPlan::default();
    let mut wanted: BTreeMap<&str, (&str, Settings)> = BTreeMap::new();
    for step in steps {
        if let Step::Deploy { path, rpm, .. } = step {
            wanted.insert(path, (rpm, node_settings(found, path)));
        }
    }
    let parallel_wanted = wanted
        .values()
        .any(|(_, r)| r.max_parallel != settings::Parallel::Count(1));
    if parallel_wanted {
        plan.mixed = mixed_fleet(client).await?;
    }
    let needs_count = plan.mixed.is_none();
    let counts = futures::future::join_all(wanted.iter().map(|(path, (_, r))| async move {
        if r.max_parallel.is_percent() && needs_count {
            deploy_targets(client, path).await.map(Some)
        } else {
            Ok(None)
        }
    }))
    .await;
    for ((path, (rpm, r)), hosts) in wanted.into_iter().zip(counts) {
        let hosts = hosts?;
        let parallel = if plan.mixed.is_some() {
            1
        } else {
            r.max_parallel.effective(hosts.unwrap_or(0))
        };
        plan.nodes.insert(
            path.to_string(),
            Rollout {
                parallel,
                canary: r.canary,
                health: has_health_check(root, rpm),
                health_deadline_ms: (r.health_deadline * 1000.0) as u64,
            },
        );
    }
    Ok(plan)
}

/// The canary count of a node's version key, from the node lock's data.
fn canary_count(lock_props: &crate::tree::Props, key: &str) -> usize {
    match lock_props.get("canary") {
        Some(Value::Object(c)) if c.get("version").and_then(Value::as_str) == Some(key) => {
            c.get("hosts").and_then(Value::as_array).map_or(0, Vec::len)
        }
        _ => 0,
    }
}

/// The canary version key of a deployment: its package and version.
pub fn canary_key(step: &Step) -> String {
    match step {
        Step::Deploy { rpm, version, .. } => {
            format!("{rpm} {}", version.as_deref().unwrap_or("*"))
        }
        _ => String::new(),
    }
}

/// Reads the node lock's data (`{}` if it does not exist yet).
async fn lock_data(client: &Client, lock: &str) -> Result<crate::tree::Props, ZkError> {
    match call_retrying("get", lock, || client.get_data(lock)).await {
        Ok((data, _)) => Ok(decode(&data)),
        Err(e) if e.is_no_node() => Ok(Default::default()),
        Err(e) => Err(e),
    }
}

/// True while the canaries of `step`'s version are not all done.
pub async fn in_canary_phase(
    client: &Client,
    step: &Step,
    node: &Rollout,
) -> Result<bool, ZkError> {
    if node.canary == 0 || node.parallel <= 1 {
        return Ok(false);
    }
    let Step::Deploy { path, .. } = step else {
        return Ok(false);
    };
    let props = lock_data(client, &lock_path(path)).await?;
    Ok(canary_count(&props, &canary_key(step)) < node.canary as usize)
}

/// Adds this host to the canaries of `key` in the node lock's data, and removes the
/// in-flight record, in one write.
pub async fn record_canary(
    client: &Client,
    lock: &str,
    key: &str,
    host_id: &str,
) -> Result<(), ZkError> {
    update_props(client, lock, |p| {
        p.remove("in-flight");
        let mut hosts: Vec<Value> = match p.get("canary") {
            Some(Value::Object(c)) if c.get("version").and_then(Value::as_str) == Some(key) => c
                .get("hosts")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if !hosts.iter().any(|h| h.as_str() == Some(host_id)) {
            hosts.push(json!(host_id));
        }
        p.insert("canary".into(), json!({"version": key, "hosts": hosts}));
    })
    .await
    .map(|_| ())
}

/// One deployment holding a lease of the semaphore `sem`: first the in-flight records of
/// dead holders (halt, naming the first), then ours around the script and its health check.
/// A failure halts the cluster before the caller gives the lease back.
pub async fn deploy_leased(
    pass: &mut Pass<'_>,
    step: &Step,
    sem: &str,
    lease: &Lease,
) -> Result<(), Interrupt> {
    let agent = pass.agent;
    pass.checkpoint().await?;
    pass.status(&step.to_string()).await;
    let Step::Deploy { path, n, .. } = step else {
        return Ok(());
    };
    let guard = semaphore::lock_path(sem);
    // The node lock's record too: a holder that died under the lock (K was 1, or it was a
    // canary) is named by the next host whichever way it enters.
    let lock = lock_path(path);
    let (dead, lock_record) = tokio::join!(
        dead_lease_holder(pass, sem, &guard, Some(lease.name())),
        has_lock_record(&agent.client, &lock),
    );
    let dead = match dead? {
        None if lock_record? => dead_lock_holder(pass, &lock).await?,
        other => other,
    };
    if let Some(message) = dead {
        return Err(halt_for_dead_holder(pass, message).await?);
    }
    let record = in_flight_record(pass, path, *n);
    let name = lease.name().to_string();
    update_props(&agent.client, &guard, |p| {
        let mut all = match p.remove("in-flight") {
            Some(Value::Object(m)) => m,
            _ => Default::default(),
        };
        all.insert(name.clone(), record.clone());
        p.insert("in-flight".into(), Value::Object(all));
    })
    .await?;
    let result = execute_halting(pass, step).await?;
    clear_lease_record(&agent.client, &guard, &name).await?;
    result.map_err(halted)
}

/// The in-flight record a holder writes into its lock node (or its semaphore's guard node)
/// before it runs a deploy step: who runs what, so the next holder can name a holder that died.
pub(super) fn in_flight_record(pass: &Pass<'_>, path: &str, n: u32) -> Value {
    let agent = pass.agent;
    json!({
        "host": agent.host.id, "name": agent.host.name, "path": path, "n": n,
        "version": pass.version, "pid": std::process::id(), "since": now(),
    })
}

/// Runs a deploy step while its lock or lease is held; a failure halts the cluster before the
/// caller lets the lock or lease go. The outer error is a failure to record the halt.
pub(super) async fn execute_halting(
    pass: &mut Pass<'_>,
    step: &Step,
) -> Result<Result<(), Interrupt>, ZkError> {
    let result = step.execute(pass).await;
    if let Err(Interrupt::Fail(failure)) = &result {
        let agent = pass.agent;
        halt(
            &agent.client,
            &agent.host,
            &pass.version,
            &failure.error.to_string(),
        )
        .await?;
    }
    Ok(result)
}

/// Halts the cluster for a holder that died mid-step (its in-flight record is still there),
/// and gives the interrupt that ends this host's step.
pub(super) async fn halt_for_dead_holder(
    pass: &Pass<'_>,
    message: String,
) -> Result<Interrupt, ZkError> {
    let agent = pass.agent;
    halt(&agent.client, &agent.host, &pass.version, &message).await?;
    Ok(Interrupt::Fail(Failure {
        error: StepError::DiedInFlight(message),
        halted: true,
    }))
}

/// A failed step's interrupt, marked as having halted the cluster.
pub(super) fn halted(i: Interrupt) -> Interrupt {
    match i {
        Interrupt::Fail(Failure { error, .. }) => Interrupt::Fail(Failure {
            error,
            halted: true,
        }),
        other => other,
    }
}

/// True if the node lock `lock` holds an in-flight record.
async fn has_lock_record(client: &Client, lock: &str) -> Result<bool, ZkError> {
    Ok(lock_data(client, lock).await?.contains_key("in-flight"))
}

/// True if the semaphore guard `guard` holds in-flight records.
pub(super) async fn has_lease_records(client: &Client, guard: &str) -> Result<bool, ZkError> {
    Ok(lock_data(client, guard).await?.contains_key("in-flight"))
}

/// The message naming a node-lock holder that died mid-step, for a host entering the node
/// with a lease: the lock node's in-flight record while the lock has no contender (a live
/// holder clears its record before it releases), read again to be sure. The record is
/// cleared; one left by this very process (an earlier session) silently.
async fn dead_lock_holder(pass: &Pass<'_>, lock: &str) -> Result<Option<String>, ZkError> {
    let agent = pass.agent;
    let contenders = match call_retrying("list", lock, || agent.client.list_children(lock)).await {
        Ok(c) => c,
        Err(e) if e.is_no_node() => Vec::new(),
        Err(e) => return Err(e),
    };
    if !contenders.is_empty() {
        // A holder (it will clear its record), or waiters: the first of them will look.
        return Ok(None);
    }
    let Some(Value::Object(rec)) = lock_data(&agent.client, lock).await?.remove("in-flight") else {
        return Ok(None);
    };
    update_props(&agent.client, lock, |p| {
        p.remove("in-flight");
    })
    .await?;
    let mine = rec.get("host").and_then(Value::as_str) == Some(agent.host.id.as_str())
        && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()));
    if mine {
        return Ok(None);
    }
    let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
    Ok(Some(format!(
        "{} ({}) died deploying {} {} (version {}) since {}: in-flight record left in {lock}",
        field("name"),
        field("host"),
        field("path"),
        field("n"),
        field("version"),
        field("since"),
    )))
}

/// The message naming a lease holder that died mid-step, if the guard's records show one
/// (its record is cleared). Records left by this very process (an earlier session) are
/// cleared silently. `ours`: the lease we hold, if any (a host entering under the node lock
/// holds none, and still names a lease holder that died before K became 1).
pub(super) async fn dead_lease_holder(
    pass: &Pass<'_>,
    sem: &str,
    guard: &str,
    ours: Option<&str>,
) -> Result<Option<String>, ZkError> {
    let agent = pass.agent;
    let records = |props: crate::tree::Props| match props.get("in-flight") {
        Some(Value::Object(m)) => m.clone(),
        _ => Default::default(),
    };
    let first = records(lock_data(&agent.client, guard).await?);
    if first.is_empty() {
        return Ok(None);
    }
    let live = semaphore::leases(&agent.client, sem).await?;
    let suspects: Vec<&String> = first
        .keys()
        .filter(|k| !live.contains(k) && Some(k.as_str()) != ours)
        .collect();
    if suspects.is_empty() {
        return Ok(None);
    }
    // A live holder clears its record before deleting its lease: a record still there after
    // its lease was seen gone was left by a holder that died.
    let again = records(lock_data(&agent.client, guard).await?);
    for key in suspects {
        let Some(Value::Object(rec)) = again.get(key) else {
            continue;
        };
        let mine = rec.get("host").and_then(Value::as_str) == Some(agent.host.id.as_str())
            && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()));
        clear_lease_record(&agent.client, guard, key).await?;
        if mine {
            continue;
        }
        let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
        return Ok(Some(format!(
            "{} ({}) died deploying {} {} (version {}) since {}: in-flight record of lease {key} left in {guard}",
            field("name"),
            field("host"),
            field("path"),
            field("n"),
            field("version"),
            field("since"),
        )));
    }
    Ok(None)
}

/// Removes the in-flight record of lease `name` from the guard node.
async fn clear_lease_record(client: &Client, guard: &str, name: &str) -> Result<(), ZkError> {
    update_props(client, guard, |p| {
        if let Some(Value::Object(m)) = p.get_mut("in-flight") {
            m.remove(name);
            if m.is_empty() {
                p.remove("in-flight");
            }
        }
    })
    .await
    .map(|_| ())
}
