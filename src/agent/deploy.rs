//! The scheduler of a run of deployments under node places (locks or leases,
//! [`super::exclusion`]): try the pending nodes in plan order and run the first one entered;
//! when every one is busy, wait in the queue of one of them (in turn), as kazoo's blocking
//! `acquire` does, so that a place given back wakes the next in line only. The wait ends
//! when the place is ours, when the cluster changes (a new version, a halt, a pause: a watch
//! on `/hosts` and its halt records), when the agent stops, or at a bound: the host then
//! looks at the cluster and tries every node again. With a role controller, the role lock
//! covers the whole pass and node places are not used ([`super::plan::Step::run`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::error::Interrupt;
use super::exclusion::{release, try_enter, wait_enter, Entry, Held, Node, Queue};
use super::in_flight::execute_halting;
use super::pass::Pass;
use super::plan::{Lock, Step};
use crate::zk::paths::{semaphore_path, HALTS, HOSTS};
use crate::zk::{call, Client};

/// Longest wait in one node's queue while other nodes are pending too (they are tried again
/// after it).
const TURN_LIMIT: Duration = Duration::from_secs(10);
/// Longest wait in the queue of a host's last pending node before it looks again.
const QUEUE_LIMIT: Duration = Duration::from_secs(600);
/// How often a waiting host looks whether the agent is stopping.
const STOP_POLL: Duration = Duration::from_millis(250);

/// Runs a run of deployments under their node places, in plan order except that a busy node
/// is passed over and taken later.
pub async fn run_node_locked(pass: &mut Pass<'_>, run: &[Step]) -> Result<(), Interrupt> {
    let mut pending: Vec<Node<'_>> = run.iter().filter_map(node_of).collect();
    let mut turn = 0;
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
                turn = (turn + 1) % busy.len();
                wait_turn(pass, &pending, &busy[turn]).await?
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

/// A busy node: its index among the pending, who holds it, and how to wait for it.
struct Busy {
    index: usize,
    path: String,
    who: String,
    queue: Queue,
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
                    Queue::Lock => node.lock.to_string(),
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

/// Waits in the queue of the busy node `busy` (bounded, and cancelled by a change of the
/// cluster or a stop): the node entered, if it was.
async fn wait_turn(
    pass: &Pass<'_>,
    pending: &[Node<'_>],
    busy: &Busy,
) -> Result<Option<(usize, Held)>, Interrupt> {
    let limit = match pending.len() {
        1 => QUEUE_LIMIT,
        _ => TURN_LIMIT,
    };
    let deadline = Instant::now() + limit;
    let mut cancel = Box::pin(cluster_changes(pass));
    let node = &pending[busy.index];
    let entry = wait_enter(pass, node, &busy.queue, deadline, &mut cancel).await?;
    Ok(match entry {
        Some(Entry::Held(held)) => Some((busy.index, held)),
        _ => None,
    })
}

/// Resolves when the cluster's version or halt records change (watches set now), when the
/// agent is asked to stop, or at once when the watches cannot be set (the caller's next
/// checkpoint then says why).
async fn cluster_changes(pass: &Pass<'_>) {
    let client = &pass.agent.client;
    let stop = &pass.agent.stop;
    let stopping = async {
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(STOP_POLL).await;
        }
    };
    let (hosts, halts) = tokio::join!(
        call("watch", HOSTS, client.check_and_watch_stat(HOSTS)),
        watch_halts(client),
    );
    let (Ok((_, hosts)), Ok(halts)) = (hosts, halts) else {
        return;
    };
    tokio::select! {
        _ = hosts.changed() => {}
        _ = halts.changed() => {}
        () = stopping => {}
    }
}

/// A watch on the halt records: on their list, or on the node's creation when it is missing.
async fn watch_halts(client: &Client) -> Result<zookeeper_client::OneshotWatcher, ()> {
    match call("watch", HALTS, client.list_and_watch_children(HALTS)).await {
        Ok((_, watcher)) => Ok(watcher),
        Err(e) if e.is_no_node() => call("watch", HALTS, client.check_and_watch_stat(HALTS))
            .await
            .map(|(_, watcher)| watcher)
            .map_err(|_| ()),
        Err(_) => Err(()),
    }
}

/// One deployment with its place held: the checkpoint, the step (a failure halts the cluster
/// before the place is let go), then the release.
async fn run_held(pass: &mut Pass<'_>, node: &Node<'_>, held: Held) -> Result<(), Interrupt> {
    let host_id = pass.agent.host.id.clone();
    if let Err(interrupt) = pass.checkpoint().await {
        let _ = release(&pass.agent.client, held, false, &host_id).await;
        return Err(interrupt);
    }
    if let Some(label) = node.step.status_text() {
        pass.status(&label).await;
    }
    let ran = execute_halting(pass, node.step).await;
    let client = &pass.agent.client;
    let (result, released) = match ran {
        Ok(Ok(())) => (Ok(()), release(client, held, false, &host_id).await),
        Ok(Err(interrupt)) => (
            Err(interrupt),
            release(client, held.failed(), false, &host_id).await,
        ),
        // The halt could not be recorded: the record stays for the next holder to report.
        Err(e) => (
            Err(e.into()),
            release(client, held.failed(), true, &host_id).await,
        ),
    };
    // The step's own outcome first: a failed release only hides it.
    result?;
    released.map_err(Interrupt::from)
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
