//! In-flight records, and what a host does when it finds one left by a holder that died.
//!
//! Before its deploy script runs, the holder of a node's place records who runs what: the
//! holder of the node lock `/agent-locks/<name>` in the lock node's data (`in-flight`), the
//! holder of a lease of the semaphore `/agent-semaphores/<name>` in a record node
//! `/agent-semaphores/<name>-__in-flight__/<lease>` created and deleted with its lease (one
//! transaction each, [`crate::zk::recipe::semaphore`]). A live holder's record goes when it
//! lets go of its place, or before. So a record still there when its place is seen free was
//! left by a holder that died mid-step: the host that finds it clears it and halts the
//! cluster naming it ([`halting`]), or, on a node with a failure budget, counts it as the dead
//! holder's host's failure of the node ([`dead_holder_found`], CONTRACT 15). A record left by
//! this very process (an earlier session) is cleared silently.

use serde_json::{json, Value};

use super::budget::{count_failure, FailureRecord};
use super::cluster::halt;
use super::error::{Failure, Interrupt, StepError};
use super::pass::Pass;
use super::plan::Rollout;
use crate::files::now;
use crate::tree::literal::py_str;
use crate::tree::Props;
use crate::zk::recipe::semaphore::{leases, records_path};
use crate::zk::update::update_props;
use crate::zk::{call_retrying, decode, join, list_or_empty, Client, ZkError};

/// The key of the in-flight record in a node lock's data.
pub(crate) const IN_FLIGHT: &str = "in-flight";

/// The in-flight record of this host's deployment of instance `n` of `path`.
pub(crate) fn record(pass: &Pass<'_>, path: &str, n: u32) -> Value {
    let agent = pass.agent;
    json!({
        "host": agent.host.id, "name": agent.host.name, "path": path, "n": n,
        "version": pass.version, "pid": std::process::id(), "since": now(),
    })
}

/// Whether an in-flight record was written by this very process.
pub(crate) fn is_mine(host_id: &str, rec: &serde_json::Map<String, Value>) -> bool {
    rec.get("host").and_then(Value::as_str) == Some(host_id)
        && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()))
}

/// `<name> (<host>) died deploying <path> <n> (version <v>) since <t>: <left>`.
fn died_with_record(rec: &serde_json::Map<String, Value>, left: &str) -> String {
    let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
    format!(
        "{} ({}) died deploying {} {} (version {}) since {}: {left}",
        field("name"),
        field("host"),
        field("path"),
        field("n"),
        field("version"),
        field("since"),
    )
}

/// The message naming a node lock's holder that died mid-step, from its record `rec` left
/// in `lock`.
pub(crate) fn died_under_lock(rec: &serde_json::Map<String, Value>, lock: &str) -> String {
    died_with_record(rec, &format!("in-flight record left in {lock}"))
}

/// The record kept in a node lock's data `props`, if any.
pub(crate) fn lock_record(props: &Props) -> Option<&serde_json::Map<String, Value>> {
    match props.get(IN_FLIGHT) {
        Some(Value::Object(rec)) => Some(rec),
        _ => None,
    }
}

/// A holder that died mid-step, found by another host: its record and the message naming it.
#[derive(Debug, Clone)]
pub(crate) struct Dead {
    pub(crate) message: String,
    pub(crate) record: serde_json::Map<String, Value>,
}

impl Dead {
    /// The holder whose record `rec` was left in the node lock `lock`.
    pub(crate) fn under_lock(rec: &serde_json::Map<String, Value>, lock: &str) -> Dead {
        Dead {
            message: died_under_lock(rec, lock),
            record: rec.clone(),
        }
    }

    /// Its failure, as counted in the node's budget (CONTRACT 15): for the dead holder's
    /// host, at the cluster version its record names (else `version`, the finder's).
    pub(crate) fn failure(&self, version: &Value) -> FailureRecord {
        let text = |k: &str| self.record.get(k).map(py_str).unwrap_or_default();
        let n = self.record.get("n").and_then(Value::as_u64).unwrap_or(0);
        FailureRecord {
            host: text("host"),
            name: text("name"),
            n: u32::try_from(n).unwrap_or(0),
            version: self.record.get("version").unwrap_or(version).clone(),
            error: self.message.clone(),
            time: now(),
        }
    }
}

/// Halts the cluster for a holder that died mid-step: the interrupt that ends this host's
/// step, or the error that kept the halt from being recorded.
pub(crate) async fn halting(pass: &Pass<'_>, message: String) -> Interrupt {
    let agent = pass.agent;
    match halt(&agent.client, &agent.host, &pass.version, &message).await {
        Ok(()) => Interrupt::Fail(Failure {
            error: StepError::DiedInFlight(message),
            halted: true,
        }),
        Err(e) => e.into(),
    }
}

/// What the host that found `dead` in a place of the node at `path` does. With a budget
/// (CONTRACT 15) the death counts as the dead holder's host's failure of the node, and the
/// finder goes on (`Ok`) when it is within the budget or halted the node (the finder's gate
/// then leaves the node undone). Otherwise, or when it cannot be counted, the cluster halts
/// naming it (the interrupt). `canary`: the dead holder was one of the node's canaries.
pub(crate) async fn dead_holder_found(
    pass: &Pass<'_>,
    path: &str,
    rollout: &Rollout,
    dead: Dead,
    canary: bool,
) -> Result<(), Interrupt> {
    if !rollout.budgeted() {
        return Err(halting(pass, dead.message).await);
    }
    let failure = dead.failure(&pass.version);
    let counted = count_failure(&pass.agent.client, rollout, path, &failure, canary).await;
    let text = counted.annotate(&dead.message);
    if counted.halts_cluster() {
        return Err(halting(pass, text).await);
    }
    tracing::warn!("{text}");
    Ok(())
}

/// A lease holder of the semaphore `sem` that died mid-step, if its records show one (that
/// record is cleared). `ours`: the lease this host holds, if any.
/// The records are listed before the leases, and a suspect's record read again after: a
/// holder that gave its lease back took its record with it in one transaction.
pub(crate) async fn dead_lease_holder(
    pass: &Pass<'_>,
    sem: &str,
    ours: Option<&str>,
) -> Result<Option<Dead>, ZkError> {
    let client = &pass.agent.client;
    let records = records_path(sem);
    let kept = list_or_empty(client, &records).await?;
    let kept: Vec<&String> = kept.iter().filter(|k| Some(k.as_str()) != ours).collect();
    if kept.is_empty() {
        return Ok(None);
    }
    let live = leases(client, sem).await?;
    for key in kept.into_iter().filter(|k| !live.contains(k)) {
        let node = join(&records, key);
        let data = match call_retrying("get", &node, || client.get_data(&node)).await {
            Ok((data, _)) => data,
            Err(e) if e.is_no_node() => continue,
            Err(e) => return Err(e),
        };
        let rec = match serde_json::from_slice(&data) {
            Ok(Value::Object(rec)) => rec,
            _ => Default::default(),
        };
        match call_retrying("delete", &node, || client.delete(&node, None)).await {
            Err(e) if e.is_no_node() => {}
            other => other?,
        }
        if !is_mine(&pass.agent.host.id, &rec) {
            let left = format!("in-flight record of lease {key} left in {records}");
            let message = died_with_record(&rec, &left);
            return Ok(Some(Dead {
                message,
                record: rec,
            }));
        }
    }
    Ok(None)
}

/// A node-lock holder that died mid-step, for a host holding a lease: the
/// lock node's record `rec` while the lock has no contender, read again to be sure (a live
/// holder clears its record before, or as, it lets go). The record is cleared.
pub(crate) async fn dead_lock_holder(
    pass: &Pass<'_>,
    lock: &str,
    rec: &serde_json::Map<String, Value>,
) -> Result<Option<Dead>, ZkError> {
    let client = &pass.agent.client;
    if !list_or_empty(client, lock).await?.is_empty() {
        // A holder (it clears its record), or waiters: the first of them looks.
        return Ok(None);
    }
    let (data, _) = call_retrying("get", lock, || client.get_data(lock)).await?;
    let again = decode(&data);
    if lock_record(&again) != Some(rec) {
        return Ok(None);
    }
    let wanted = Value::Object(rec.clone());
    update_props(client, lock, |p| {
        if p.get(IN_FLIGHT) == Some(&wanted) {
            p.remove(IN_FLIGHT);
        }
    })
    .await?;
    if is_mine(&pass.agent.host.id, rec) {
        return Ok(None);
    }
    Ok(Some(Dead::under_lock(rec, lock)))
}

/// Clears this host's record `rec` from the lock node `lock` (what a holder that could not
/// write its release with the data it knew does): only if the record there is still `rec`.
pub(crate) async fn clear_lock_record(
    client: &Client,
    lock: &str,
    rec: &Value,
    change: impl Fn(&mut Props),
) -> Result<(), ZkError> {
    update_props(client, lock, |p| {
        if p.get(IN_FLIGHT) == Some(rec) {
            p.remove(IN_FLIGHT);
            change(p);
        }
    })
    .await
    .map(|_| ())
}
