//! Running deployments. Without a role controller each instance runs under its node lock
//! (`/agent-locks/<name>`, kazoo's recipe): a host holds at most one node lock, goes on with
//! another pending node of the run when one is busy, and waits (on watches) only when every
//! pending node is busy. After taking a lock and before the script runs, an in-flight record
//! goes into the lock node's data; it is cleared when the step has ended, so a record found by
//! the next holder means its writer died mid-step, and that host halts the cluster naming it.
//! A node whose `max-parallel` K is above 1 is entered with a lease of its semaphore instead
//! (and its canaries under the node lock): see [`super::rollout`]. After a successful deploy
//! script, the package's health check runs while the lock or lease is still held
//! ([`super::steps`], [`super::health`]). With a role controller, the role lock covers the
//! whole pass and node locks are not used (those deployments run as any other step,
//! [`super::plan::Step::run`]). The deploy script itself is the step's work
//! ([`super::steps`]).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::error::Interrupt;
use super::pass::Pass;
use super::plan::{Lock, Rollout, Step};
use super::rollout::{
    canary_key, dead_lease_holder, deploy_leased, execute_halting, halt_for_dead_holder, halted,
    has_lease_records, in_canary_phase, in_flight_record, record_canary,
};
use crate::tree::literal::py_str;
use crate::zk::lock::{try_lock, wait_for_any, Held, TryLock};
use crate::zk::paths::semaphore_path;
use crate::zk::semaphore::{self, Lease, TryLease};
use crate::zk::update::{update_props, update_props_known};
use crate::zk::{call_retrying, decode, Client, ZkError};

/// Longest wait on busy locks before looking again.
const LOCK_RECHECK: Duration = Duration::from_secs(10);

/// How a host entered an application node, or why it could not.
enum Entry {
    /// Its node lock (K = 1, or a canary: then the canary version key).
    Lock { held: Held, canary: Option<String> },
    /// A lease of its semaphore (K > 1).
    Lease { lease: Lease },
    /// Every place is taken: the lock or semaphore, the nodes to watch, and who holds them.
    Busy {
        place: String,
        nodes: Vec<String>,
        who: String,
    },
}

/// Runs a run of deployments under their node locks (or semaphore leases), in plan order
/// except that a busy node is passed over and taken later.
pub async fn run_node_locked(pass: &mut Pass<'_>, run: &[Step]) -> Result<(), Interrupt> {
    let agent = pass.agent;
    let identifier = format!("{} ({})", agent.host.name, agent.host.id);
    let mut pending: Vec<NodeLocked<'_>> = run
        .iter()
        .filter_map(|step| match step {
            Step::Deploy {
                lock: Lock::Node(lock),
                path,
                n,
                rollout,
                ..
            } => Some(NodeLocked {
                step,
                lock,
                path,
                n: *n,
                rollout,
            }),
            _ => None,
        })
        .collect();
    let mut waited_since: Option<Instant> = None;
    // The waiting status last written: rewritten only when it changes, so that its age
    // (what the monitor reports) counts from the start of the wait.
    let mut waiting: Option<String> = None;
    while !pending.is_empty() {
        let mut busy = Vec::new();
        let mut holders = Vec::new();
        let mut ran = None;
        // Once per round (entering a node checks again before its script runs).
        pass.checkpoint().await?;
        for (i, node) in pending.iter().enumerate() {
            match enter(pass, node, &identifier).await? {
                Entry::Busy { place, nodes, who } => {
                    tracing::info!("{place} is held by {who}; trying another node");
                    busy.extend(nodes);
                    holders.push(format!("{} held by {who}", node.path));
                }
                entry => {
                    if let Some(since) = waited_since.take() {
                        let waited = since.elapsed().as_secs_f64();
                        tracing::info!("waited {waited:.1} s for node locks");
                        pass.metrics.lock_wait += waited;
                    }
                    let (result, released) = match entry {
                        Entry::Lock { held, canary } => {
                            let result = deploy_locked(pass, node, canary).await;
                            (result, held.release(&agent.client).await)
                        }
                        Entry::Lease { lease } => {
                            let sem = semaphore_path(node.path);
                            let result = deploy_leased(pass, node.step, &sem, &lease).await;
                            (result, lease.release(&agent.client).await)
                        }
                        Entry::Busy { .. } => (Ok(()), Ok(())),
                    };
                    // The step's own outcome first: a failed release only hides it.
                    result?;
                    released?;
                    ran = Some(i);
                    break;
                }
            }
        }
        match ran {
            Some(i) => {
                pending.remove(i);
                waiting = None;
            }
            None => {
                waited_since.get_or_insert_with(Instant::now);
                tracing::info!("every pending node is locked by another host; waiting");
                // The status says what the host waits for, and for whom (not the step it
                // last ran).
                let text = waiting_status(&holders);
                if waiting.as_ref() != Some(&text) {
                    pass.status(&text).await;
                    waiting = Some(text);
                }
                wait_for_any(&agent.client, &busy, LOCK_RECHECK).await?;
            }
        }
    }
    Ok(())
}

/// A deployment step under its node lock (or a lease of its semaphore).
struct NodeLocked<'p> {
    step: &'p Step,
    lock: &'p str,
    path: &'p str,
    n: u32,
    rollout: &'p Rollout,
}

/// Tries to enter a node: its node lock when K = 1 or while its canaries are not done,
/// else a lease of its semaphore (K > 1). Never waits for another host.
async fn enter(
    pass: &Pass<'_>,
    node: &NodeLocked<'_>,
    identifier: &str,
) -> Result<Entry, Interrupt> {
    let client = &pass.agent.client;
    let lock = node.lock;
    let canary = in_canary_phase(client, node.step, node.rollout).await?;
    if node.rollout.parallel <= 1 || canary {
        return Ok(match try_lock(client, lock, identifier).await? {
            TryLock::Busy { holder } => Entry::Busy {
                nodes: vec![format!("{lock}/{}", holder.name)],
                place: lock.to_string(),
                who: holder.identifier,
            },
            TryLock::Acquired(held) if canary => {
                // The canaries may have finished while we took the lock: then the others
                // hold leases, and so must we.
                if in_canary_phase(client, node.step, node.rollout).await? {
                    Entry::Lock {
                        held,
                        canary: Some(canary_key(node.step)),
                    }
                } else {
                    held.release(client).await?;
                    enter_semaphore(pass, node, identifier).await?
                }
            }
            TryLock::Acquired(held) => Entry::Lock { held, canary: None },
        });
    }
    enter_semaphore(pass, node, identifier).await
}

/// Tries to take a lease of the node's semaphore (K = its `parallel`).
async fn enter_semaphore(
    pass: &Pass<'_>,
    node: &NodeLocked<'_>,
    identifier: &str,
) -> Result<Entry, Interrupt> {
    let sem = semaphore_path(node.path);
    let client = &pass.agent.client;
    Ok(
        match semaphore::try_acquire(client, &sem, identifier, node.rollout.parallel).await? {
            TryLease::Acquired(lease) => Entry::Lease { lease },
            TryLease::Full { holders } => {
                let named: Vec<&str> = holders
                    .iter()
                    .map(|h| h.identifier.as_str())
                    .filter(|i| !i.is_empty())
                    .collect();
                Entry::Busy {
                    place: sem.clone(),
                    who: if named.is_empty() {
                        format!("{} lease holders", holders.len())
                    } else {
                        named.join(", ")
                    },
                    nodes: holders.into_iter().map(|h| h.node).collect(),
                }
            }
        },
    )
}

/// One deployment with its node lock held: the in-flight record around the step (and, for
/// a canary, its count in the same write that clears the record). A failure halts the
/// cluster before the caller releases the lock.
async fn deploy_locked(
    pass: &mut Pass<'_>,
    node: &NodeLocked<'_>,
    canary: Option<String>,
) -> Result<(), Interrupt> {
    let agent = pass.agent;
    let (step, lock) = (node.step, node.lock);
    // Three independent round trips at once: the checkpoint, the status on the host node,
    // and the lock node's data (the hand-off between hosts is made of these).
    let label = step.status_text().unwrap_or_default();
    // And whether the node's semaphore keeps records (of lease holders that may have died
    // before K became 1).
    let sem = semaphore_path(node.path);
    let guard = semaphore::lock_path(&sem);
    let (checked, (), got, leased) = tokio::join!(
        pass.checkpoint(),
        pass.status(&label),
        call_retrying("get", lock, || agent.client.get_data(lock)),
        has_lease_records(&agent.client, &guard),
    );
    checked?;
    let (data, stat) = got?;
    let lock_props = decode(&data);
    if let Some(Value::Object(rec)) = lock_props.get("in-flight") {
        let ours = rec.get("host").and_then(Value::as_str) == Some(agent.host.id.as_str())
            && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()));
        if !ours {
            let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
            let message = format!(
                "{} ({}) died deploying {} {} (version {}) since {}: in-flight record left in {lock}",
                field("name"),
                field("host"),
                field("path"),
                field("n"),
                field("version"),
                field("since"),
            );
            let interrupt = halt_for_dead_holder(pass, message).await?;
            clear_in_flight(&agent.client, lock).await?;
            return Err(interrupt);
        }
    }
    if leased? {
        if let Some(message) = dead_lease_holder(pass, &sem, &guard, None).await? {
            return Err(halt_for_dead_holder(pass, message).await?);
        }
    }
    let record = in_flight_record(pass, node.path, node.n);
    // Version-guarded from the data just read (one round trip), and read again after a
    // connection loss or a concurrent write: written exactly once.
    let written = update_props_known(&agent.client, lock, &lock_props, stat.version, |p| {
        p.insert("in-flight".into(), record.clone());
    })
    .await?;
    let result = execute_halting(pass, step).await?;
    let clear = |p: &mut crate::tree::Props| {
        p.remove("in-flight");
    };
    match (&canary, &result, &written) {
        // A canary counts once its step (health check included) went well.
        (Some(key), Ok(()), _) => record_canary(&agent.client, lock, key, &agent.host.id).await?,
        // Only the holder writes the lock node: the version of our own write is current.
        (_, _, Some((props, v))) => {
            update_props_known(&agent.client, lock, props, *v, clear).await?;
        }
        _ => clear_in_flight(&agent.client, lock).await?,
    }
    result.map_err(halted)
}

/// The status of a host waiting for node locks: the first few nodes and their holders.
fn waiting_status(holders: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = format!(
        "waiting for node locks: {}",
        holders[..holders.len().min(SHOWN)].join(", ")
    );
    if holders.len() > SHOWN {
        text.push_str(&format!(" and {} more", holders.len() - SHOWN));
    }
    text
}

/// Removes the in-flight record from a lock node.
async fn clear_in_flight(client: &Client, lock: &str) -> Result<(), ZkError> {
    update_props(client, lock, |p| {
        p.remove("in-flight");
    })
    .await
    .map(|_| ())
}
