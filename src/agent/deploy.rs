//! Running deployments. Without a role controller each instance runs under its node lock
//! (`/agent-locks/<name>`, kazoo's recipe): a host holds at most one node lock, goes on with
//! another pending node of the run when one is busy, and waits (on watches) only when every
//! pending node is busy. After taking a lock and before the script runs, an in-flight record
//! goes into the lock node's data; it is cleared when the step has ended, so a record found by
//! the next holder means its writer died mid-step, and that host halts the cluster naming it.
//! With a role controller, the role lock covers the whole pass and node locks are not used
//! (those deployments run as any other step, [`super::plan::Step::run`]). The deploy script
//! itself is the step's work ([`super::steps`]).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::halt;
use super::error::{Failure, Interrupt, StepError};
use super::pass::Pass;
use super::plan::{Lock, Step};
use crate::files::now;
use crate::tree::literal::py_str;
use crate::zk::lock::{try_lock, wait_for_any, TryLock};
use crate::zk::update::update_props;
use crate::zk::{call_retrying, decode, Client, ZkError};

/// Longest wait on busy locks before looking again.
const LOCK_RECHECK: Duration = Duration::from_secs(10);

/// Runs a run of deployments under their node locks, in plan order except that a busy node is
/// passed over and taken later.
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
                ..
            } => Some(NodeLocked {
                step,
                lock,
                path,
                n: *n,
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
        for (i, node) in pending.iter().enumerate() {
            pass.checkpoint().await?;
            let lock = node.lock;
            match try_lock(&agent.client, lock, &identifier).await? {
                TryLock::Busy { holder } => {
                    tracing::info!(
                        "{lock} is held by {}; trying another node",
                        holder.identifier
                    );
                    busy.push(format!("{lock}/{}", holder.name));
                    holders.push(format!("{} held by {}", node.path, holder.identifier));
                }
                TryLock::Acquired(held) => {
                    if let Some(since) = waited_since.take() {
                        let waited = since.elapsed().as_secs_f64();
                        tracing::info!("waited {waited:.1} s for node locks");
                        pass.metrics.lock_wait += waited;
                    }
                    let result = deploy_locked(pass, node).await;
                    // The step's own outcome first: a failed release only hides it.
                    let released = held.release(&agent.client).await;
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

/// A deployment step under its node lock.
struct NodeLocked<'p> {
    step: &'p Step,
    lock: &'p str,
    path: &'p str,
    n: u32,
}

/// One deployment with its node lock held: the in-flight record around the step. A failure
/// halts the cluster before the caller releases the lock.
async fn deploy_locked(pass: &mut Pass<'_>, node: &NodeLocked<'_>) -> Result<(), Interrupt> {
    let agent = pass.agent;
    let (step, lock) = (node.step, node.lock);
    pass.checkpoint().await?;
    if let Some(text) = step.status_text() {
        pass.status(&text).await;
    }
    let (data, _) = call_retrying("get", lock, || agent.client.get_data(lock)).await?;
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
            halt(&agent.client, &agent.host, &pass.version, &message).await?;
            clear_in_flight(&agent.client, lock).await?;
            return Err(Interrupt::Fail(Failure {
                error: StepError::DiedInFlight(message),
                halted: true,
            }));
        }
    }
    let record = json!({
        "host": agent.host.id, "name": agent.host.name, "path": node.path, "n": node.n,
        "version": pass.version, "pid": std::process::id(), "since": now(),
    });
    // Version-guarded, and read again after a connection loss: written exactly once.
    update_props(&agent.client, lock, |p| {
        p.insert("in-flight".into(), record.clone());
    })
    .await?;
    let result = step.execute(pass).await;
    if let Err(Interrupt::Fail(failure)) = &result {
        halt(
            &agent.client,
            &agent.host,
            &pass.version,
            &failure.error.to_string(),
        )
        .await?;
    }
    clear_in_flight(&agent.client, lock).await?;
    result.map_err(|i| match i {
        Interrupt::Fail(Failure { error, .. }) => Interrupt::Fail(Failure {
            error,
            halted: true,
        }),
        other => other,
    })
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
