//! Waiting for node places when every pending node is busy: the host waits in the queue of
//! each busy node at once, as kazoo's blocking `acquire` does for one
//! ([`super::exclusion::wait_enter`]), once per place (the instances of one application
//! node share theirs), and the first place entered ends the other waits, whose contenders
//! leave their queues. A wait that ends without a place (a canary started
//! or done, a holder of the other kind gone) tries its own node again and waits anew; the
//! other queues keep their places. Every wait ends when the cluster changes (a new version,
//! a halt, a pause: watches on `/hosts` and its halt records), when the agent stops, or at a
//! bound; the scheduler ([`super::deploy`]) then looks at the cluster and tries every node
//! again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::cluster::watch_cluster_version;
use super::error::Interrupt;
use super::exclusion::{release, try_enter, wait_enter, Entry, Held, Node, Queue, Release};
use super::pass::Pass;

/// Longest wait in the queues before the host looks at the cluster and tries again.
const QUEUE_LIMIT: Duration = Duration::from_secs(600);
/// How often a waiting host looks whether the agent is stopping.
const STOP_POLL: Duration = Duration::from_millis(250);

/// A busy node: its index among the pending, who holds it, and how to wait for it.
pub(crate) struct Busy {
    pub(crate) index: usize,
    pub(crate) path: String,
    pub(crate) who: String,
    pub(crate) queue: Queue,
}

/// Waits in the queues of every node of `busy` at once: the first place entered (its index
/// among `pending`), or `None` when the waits ended without one. A second place entered in
/// the same moment is given back untouched.
pub(crate) async fn wait_any(
    pass: &Pass<'_>,
    pending: &[Node<'_>],
    busy: &[Busy],
) -> Result<Option<(usize, Held)>, Interrupt> {
    let deadline = Instant::now() + QUEUE_LIMIT;
    let (over, ended) = watch::channel(false);
    let busy = one_per_place(pending, busy);
    let waits = async {
        let each = busy.iter().map(|b| async {
            let node = &pending[b.index];
            let waited = wait_one(pass, node, b.queue.clone(), deadline, &ended).await;
            over.send_replace(true);
            waited
        });
        futures::future::join_all(each).await
    };
    let changes = async {
        tokio::select! {
            () = cluster_changes(pass) => {}
            () = ends(ended.clone()) => {}
        }
        over.send_replace(true);
    };
    let (results, ()) = tokio::join!(waits, changes);
    first_entered(pass, &busy, results).await
}

/// The busy nodes to wait for, one per place: the instances of one application node share
/// its lock and semaphore, and one session queues once in each (kazoo's recipes take a
/// contender of their own session found ahead of them for a leftover, and delete it).
fn one_per_place<'b>(pending: &[Node<'_>], busy: &'b [Busy]) -> Vec<&'b Busy> {
    let mut places = std::collections::BTreeSet::new();
    busy.iter()
        .filter(|b| places.insert(pending[b.index].lock))
        .collect()
}

/// Resolves once `ended` holds true.
async fn ends(mut ended: watch::Receiver<bool>) {
    let _ = ended.wait_for(|over| *over).await;
}

/// Waits for `node` as `queue` says, and after a wait that ended without a place tries it
/// again, until a place is held, `ended` is set or the deadline passes.
async fn wait_one(
    pass: &Pass<'_>,
    node: &Node<'_>,
    mut queue: Queue,
    deadline: Instant,
    ended: &watch::Receiver<bool>,
) -> Result<Option<Held>, Interrupt> {
    loop {
        if *ended.borrow() {
            return Ok(None);
        }
        let mut cancel = Box::pin(ends(ended.clone()));
        let entry = wait_enter(pass, node, &queue, deadline, &mut cancel).await?;
        if let Some(Entry::Held(held)) = entry {
            return Ok(Some(held));
        }
        if *ended.borrow() || Instant::now() >= deadline {
            return Ok(None);
        }
        let entry = match entry {
            Some(busy) => busy,
            None => try_enter(pass, node).await?,
        };
        match entry {
            Entry::Held(held) => return Ok(Some(held)),
            Entry::Busy { queue: next, .. } => queue = next,
        }
    }
}

/// One place of `results` kept, the first in plan order when several were entered at once;
/// the others given back (a step of theirs did not run). An error is the answer once every
/// place is given back.
async fn first_entered(
    pass: &Pass<'_>,
    busy: &[&Busy],
    results: Vec<Result<Option<Held>, Interrupt>>,
) -> Result<Option<(usize, Held)>, Interrupt> {
    let (client, host) = (&pass.agent.client, &pass.agent.host.id);
    let mut kept = None;
    let mut error = None;
    for (b, result) in busy.iter().zip(results) {
        match result {
            Ok(Some(held)) if kept.is_none() => kept = Some((b.index, held)),
            Ok(Some(held)) => {
                tracing::info!("{} entered too; giving it back", b.path);
                if let Err(e) = release(client, held, Release::Undone, host).await {
                    error.get_or_insert(e.into());
                }
            }
            Ok(None) => {}
            Err(e) if error.is_none() => error = Some(e),
            Err(e) => tracing::warn!("waiting for {}: {e}", b.path),
        }
    }
    match (error, kept) {
        (None, kept) => Ok(kept),
        (Some(e), kept) => {
            if let Some((_, held)) = kept {
                let _ = release(client, held, Release::Undone, host).await;
            }
            Err(e)
        }
    }
}

/// Resolves when the cluster's version or halt records change (the pass's watches, or new
/// ones once those fired), when the agent is asked to stop, or at once when the watches
/// cannot be set (the caller's next checkpoint then says why).
async fn cluster_changes(pass: &Pass<'_>) {
    let stop = &pass.agent.stop;
    let stopping = async {
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(STOP_POLL).await;
        }
    };
    let watch = match &pass.watch {
        Some(watch) if pass.unchanged() => watch.clone(),
        _ => match watch_cluster_version(&pass.agent.client).await {
            // Halted or paused already: the caller's checkpoint says so.
            Ok((_, effective, _)) if pass.judge(&effective).is_err() => return,
            Ok((_, _, watch)) => watch,
            Err(_) => return,
        },
    };
    tokio::select! {
        _ = watch.changed() => {}
        () = stopping => {}
    }
}
