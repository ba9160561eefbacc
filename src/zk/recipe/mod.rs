//! kazoo's coordination recipes, plain: the [`lock::Lock`] (`kazoo.recipe.lock.Lock`) and the
//! [`semaphore::Semaphore`] (`kazoo.recipe.lock.Semaphore`), with the same node names and data
//! as kazoo, so kazoo clients, the Python original and earlier versions of this agent exclude
//! each other through them.
//!
//! Both give a guard object: `try_acquire` never waits (it reports who is in the way),
//! `acquire(deadline, cancel)` waits in kazoo's queue (each contender watches the one just
//! before its own, and looks again when that one goes), `release` gives the guard back. No
//! step depends on the order in which the requests of one round trip are answered: every
//! decision is taken on an answer already received. [`wait_for_any`] is the one way a
//! caller that found several places busy waits for one of them.

pub mod lock;
pub mod semaphore;

use std::future::Future;

use tokio::time::Instant;

use super::{call_retrying, Client, ZkError};

/// Which of `buckets` (more than 0) the key `key` falls in: the same bucket for the same key
/// within a build, spread evenly over the keys of a fleet.
pub(crate) fn bucket(key: &str, buckets: u64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish() % buckets
}

/// What a `try_acquire` found: the guard, or what is in the way.
#[derive(Debug)]
pub enum Attempt<G, B> {
    /// Taken: the guard.
    Acquired(G),
    /// Busy: who holds it.
    Busy(B),
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The watched node changed or went away (or the session's state changed): look again.
    Changed,
    /// The deadline passed.
    Deadline,
    /// The caller cancelled the wait.
    Cancelled,
}

/// Waits for `event`, at most until `deadline`, unless `cancel` resolves first.
pub(crate) async fn wait_for<E: Future>(
    event: E,
    deadline: Instant,
    cancel: &mut (impl Future<Output = ()> + Unpin),
) -> Woken {
    tokio::select! {
        _ = event => Woken::Changed,
        () = tokio::time::sleep_until(deadline) => Woken::Deadline,
        () = cancel => Woken::Cancelled,
    }
}

/// Waits until one of `nodes` (full paths: lock contenders or lease nodes) changes or goes
/// away, at most until `deadline`, unless `cancel` resolves first: how a process that found
/// every place it wants busy waits, on watches rather than polling. Gives the index of a node
/// that changed or went away, `None` at the deadline or when cancelled. With no node to
/// watch, it pauses at most 100 ms.
pub async fn wait_for_any(
    client: &Client,
    nodes: &[String],
    deadline: Instant,
    cancel: &mut (impl Future<Output = ()> + Unpin),
) -> Result<Option<usize>, ZkError> {
    if nodes.is_empty() {
        let pause = Instant::now() + std::time::Duration::from_millis(100);
        wait_for(std::future::pending::<()>(), deadline.min(pause), cancel).await;
        return Ok(None);
    }
    let mut watches = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        match call_retrying("watch", node, || client.check_and_watch_stat(node)).await? {
            (None, _) => return Ok(Some(i)),
            (Some(_), watcher) => watches.push(Box::pin(async move {
                watcher.changed().await;
                i
            })),
        }
    }
    let fired = futures::future::select_all(watches);
    tokio::select! {
        (i, _, _) = fired => Ok(Some(i)),
        () = tokio::time::sleep_until(deadline) => Ok(None),
        () = cancel => Ok(None),
    }
}
