//! The scheduler of a run of deployments under node places (locks or leases,
//! [`super::exclusion`]): try the pending nodes in plan order and run the first one entered;
//! when every one is busy, wait in the queues of all of them at once ([`super::queues`]), so
//! that the first place given back to this host is the one it takes, and a place given back
//! wakes the next in its line only. After a wait without a place (the cluster changed, or
//! its bound) the host looks at the cluster and tries every node again. With a role
//! controller, the role lock covers the whole pass and node places are not used
//! ([`super::plan::Step::run`]).

use super::budget::{count_failure, node_gate, node_gates, BudgetError, FailureRecord, Gate};
use super::cluster::halt;
use super::error::{Failure, Interrupt, Left};
use super::exclusion::{release, try_enter, Entry, Held, Node, Queue, Release};
use super::pass::Pass;
use super::plan::{Lock, Step};
use super::queues::{wait_any, Busy};
use crate::files::now;
use crate::tree::literal::py_str;
use crate::zk::paths::semaphore_path;
use crate::zk::ZkError;

/// Runs a run of deployments under their node places, in plan order except that a busy node
/// is passed over and taken later.
pub(crate) async fn run_node_locked(pass: &mut Pass<'_>, run: &[Step]) -> Result<(), Interrupt> {
    let nodes: Vec<Node<'_>> = run.iter().filter_map(node_of).collect();
    let mut pending = open_nodes(pass, nodes).await?;
    let mut shown: Option<String> = None;
    let mut waited: Option<std::time::Instant> = None;
    while !pending.is_empty() {
        let (entered, busy) = try_each(pass, &pending).await?;
        let entered = match entered {
            Some(entered) => Some(entered),
            None => {
                pass.checkpoint().await?;
                tracing::info!("every pending node is locked by another host; waiting");
                waited.get_or_insert_with(std::time::Instant::now);
                let text = waiting_status(&busy);
                if shown.as_ref() != Some(&text) {
                    pass.status(&text).await;
                    shown = Some(text);
                }
                wait_any(pass, &pending, &busy).await?
            }
        };
        if let Some((i, held)) = entered {
            if let Some(since) = waited.take() {
                let seconds = since.elapsed().as_secs_f64();
                tracing::info!("waited {seconds:.1} s for node places");
                pass.metrics.lock_wait += seconds;
            }
            shown = None;
            let node = pending.remove(i);
            run_held(pass, &node, held).await?;
        }
    }
    Ok(())
}

/// The deployment under a node place, if `step` is one.
fn node_of(step: &Step) -> Option<Node<'_>> {
    match step {
        Step::Deploy {
            lock: Lock::Node(lock),
            path,
            n,
            rollout,
            ..
        } => Some(Node {
            step,
            path,
            lock,
            n: *n,
            rollout,
        }),
        _ => None,
    }
}

/// Tries the pending nodes in order: the first entered, or every one busy.
async fn try_each(
    pass: &Pass<'_>,
    pending: &[Node<'_>],
) -> Result<(Option<(usize, Held)>, Vec<Busy>), Interrupt> {
    let mut busy = Vec::new();
    for (index, node) in pending.iter().enumerate() {
        match try_enter(pass, node).await? {
            Entry::Held(held) => return Ok((Some((index, held)), busy)),
            Entry::Busy { who, queue } => {
                let place = match &queue {
                    Queue::Lock | Queue::Canary => node.lock.to_string(),
                    Queue::Semaphore => semaphore_path(node.path),
                    Queue::Watch(_) => node.path.to_string(),
                };
                tracing::info!("{place} is held by {who}; trying another node");
                busy.push(Busy {
                    index,
                    path: node.path.to_string(),
                    who,
                    queue,
                });
            }
        }
    }
    Ok((None, busy))
}

/// The nodes of `nodes` this host may start (CONTRACT 15), in one read of the cluster's node
/// state: one it failed at this cluster version, or halted or paused, is left undone.
async fn open_nodes<'p>(
    pass: &mut Pass<'_>,
    nodes: Vec<Node<'p>>,
) -> Result<Vec<Node<'p>>, Interrupt> {
    if nodes.is_empty() {
        return Ok(nodes);
    }
    let paths: Vec<&str> = nodes.iter().map(|n| n.path).collect();
    let agent = pass.agent;
    let gates = node_gates(&agent.client, &paths, &pass.version, &agent.host.id)
        .await
        .map_err(budget_lost)?;
    let mut open = Vec::with_capacity(nodes.len());
    for (node, gate) in nodes.into_iter().zip(gates) {
        match left_by(gate, node.path) {
            None => open.push(node),
            Some(left) => leave(pass, left),
        }
    }
    Ok(open)
}

/// A node left undone, said in the log and kept for the pass's end.
fn leave(pass: &mut Pass<'_>, left: Left) {
    match &left {
        Left::Failed(path, error) => tracing::error!("{path} left undone: {error}"),
        Left::Halted(path, _) => tracing::warn!("{path} is halted; not deploying it"),
        Left::Paused(path, _) => tracing::warn!("{path} is paused; not deploying it"),
    }
    pass.left.push(left);
}

/// What a node's gate leaves undone, if anything.
fn left_by(gate: Gate, path: &str) -> Option<Left> {
    let path = path.to_string();
    match gate {
        Gate::Open => None,
        Gate::Quarantined(record) => {
            let error = record.get("error").map(py_str).unwrap_or_default();
            let why = format!("quarantined for {path} at this cluster version: {error}");
            Some(Left::Failed(path, why))
        }
        Gate::Halted(record) => Some(Left::Halted(path, record)),
        Gate::Paused(record) => Some(Left::Paused(path, record)),
    }
}

/// A budget question ZooKeeper could not answer, as an interrupt (the pass is run again).
fn budget_lost(e: BudgetError) -> Interrupt {
    match e {
        BudgetError::Zk(e) | BudgetError::NotAllowed(e) => Interrupt::Lost(e),
    }
}

/// How a step under its place ended.
enum Ran {
    /// It went well.
    Done,
    /// It failed within its node's budget (or beyond it, the node halted): the host goes on.
    Left(Left),
    /// The pass stops (the cluster halted for a failure, or abandoned).
    Stop(Interrupt),
}

/// One deployment with its place held: the checkpoint and the node's gate (read together),
/// the step (a failure halts the cluster or the node, or is counted in the node's budget,
/// before the place is let go), then the release.
async fn run_held(pass: &mut Pass<'_>, node: &Node<'_>, held: Held) -> Result<(), Interrupt> {
    let host_id = pass.agent.host.id.clone();
    let looked: &Pass<'_> = pass;
    let (checked, gate) = tokio::join!(looked.checkpoint(), gate_of(looked, node));
    let gate = checked.and(gate);
    let closed = match gate {
        Ok(closed) => closed,
        // No step ran: the place goes back as it was (a canary not counted).
        Err(interrupt) => {
            let _ = release(&pass.agent.client, held, Release::Undone, &host_id).await;
            return Err(interrupt);
        }
    };
    if let Some(left) = closed {
        leave(pass, left);
        let released = release(&pass.agent.client, held, Release::Undone, &host_id).await;
        return Ok(released?);
    }
    if let Some(label) = node.step.status_text() {
        pass.status(&label).await;
    }
    let ran = run_step(pass, node, held.is_canary()).await;
    let client = &pass.agent.client;
    let (result, released) = match ran {
        Ok(Ran::Done) => (Ok(()), release(client, held, Release::Done, &host_id).await),
        Ok(Ran::Left(left)) => {
            let released = release(client, held, Release::Undone, &host_id).await;
            leave(pass, left);
            (Ok(()), released)
        }
        Ok(Ran::Stop(interrupt)) => (
            Err(interrupt),
            release(client, held, Release::Undone, &host_id).await,
        ),
        // The halt could not be recorded: the record stays for the next holder to report.
        Err(e) => (
            Err(e.into()),
            release(client, held, Release::KeepRecord, &host_id).await,
        ),
    };
    // The step's own outcome first: a failed release only hides it.
    result?;
    released.map_err(Interrupt::from)
}

/// The gate of the node this host just entered: what leaves it undone, if anything.
async fn gate_of(pass: &Pass<'_>, node: &Node<'_>) -> Result<Option<Left>, Interrupt> {
    let agent = pass.agent;
    let gate = node_gate(&agent.client, node.path, &pass.version, &agent.host.id)
        .await
        .map_err(budget_lost)?;
    Ok(left_by(gate, node.path))
}

/// Runs the step; a failure halts the cluster, unless the node has a budget (CONTRACT 15):
/// then it is counted, and within the budget (or beyond it with `on-failure = 'halt-node'`,
/// the node halted) the host goes on. A canary spends no budget. The error is a halt that
/// could not be recorded.
async fn run_step(pass: &mut Pass<'_>, node: &Node<'_>, canary: bool) -> Result<Ran, ZkError> {
    let failure = match node.step.execute(pass).await {
        Ok(()) => return Ok(Ran::Done),
        Err(Interrupt::Fail(failure)) => failure,
        Err(other) => return Ok(Ran::Stop(other)),
    };
    let error = failure.error.to_string();
    if !node.rollout.budgeted() {
        return halt_cluster(pass, failure, &error).await;
    }
    let agent = pass.agent;
    let path = node.path;
    let record = FailureRecord {
        host: agent.host.id.clone(),
        name: agent.host.name.clone(),
        n: node.n,
        version: pass.version.clone(),
        error: error.clone(),
        time: now(),
    };
    let counted = count_failure(&agent.client, node.rollout, path, &record, canary).await;
    let text = counted.annotate(&error);
    if counted.halts_cluster() {
        return halt_cluster(pass, failure, &text).await;
    }
    Ok(Ran::Left(Left::Failed(path.into(), text)))
}

/// Halts the cluster for `failure` (its message `error`), before the place is let go.
async fn halt_cluster(pass: &Pass<'_>, failure: Failure, error: &str) -> Result<Ran, ZkError> {
    let agent = pass.agent;
    halt(&agent.client, &agent.host, &pass.version, error).await?;
    Ok(Ran::Stop(Interrupt::Fail(Failure {
        error: failure.error,
        halted: true,
    })))
}

/// The status of a host waiting for node places: the first few nodes and their holders.
fn waiting_status(busy: &[Busy]) -> String {
    const SHOWN: usize = 3;
    let held: Vec<String> = busy
        .iter()
        .take(SHOWN)
        .map(|b| format!("{} held by {}", b.path, b.who))
        .collect();
    let mut text = format!("waiting for node locks: {}", held.join(", "));
    if busy.len() > SHOWN {
        text.push_str(&format!(" and {} more", busy.len() - SHOWN));
    }
    text
}
