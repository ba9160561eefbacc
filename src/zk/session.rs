//! Closing sessions on the way out: every session [`super::connect`](fn@super::connect) opens is
//! tracked here, and [`close_all`] waits (bounded) until each one is closed on the server.
//!
//! The client library sends `CloseSession` once the last clone of a client is dropped, but
//! from a task of the runtime: a command that returns and drops its runtime at once never
//! sends it, and the server keeps the session (and its ephemeral nodes) for the whole session
//! timeout. So a command drops its clients, then awaits [`close_all`] before it exits.

use std::sync::Mutex;
use std::time::Duration;

use zookeeper_client::StateWatcher;

use super::Client;

/// Longest wait for the server to confirm that the sessions are closed (a server that does
/// not answer cannot close them anyway; they then expire on their own).
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

static OPEN: Mutex<Vec<StateWatcher>> = Mutex::new(Vec::new());

/// Registers a new session (called by [`super::connect()`] for every client it returns).
pub(crate) fn track(client: &Client) {
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|w| !w.peek_state().is_terminated());
    open.push(client.state_watcher());
}

/// Waits until every tracked session has ended, at most [`CLOSE_TIMEOUT`]. Call it after the
/// clients are dropped (a client still held somewhere keeps its session open: the wait then
/// runs out and says so in the log).
pub(crate) async fn close_all() {
    let watchers = std::mem::take(&mut *OPEN.lock().unwrap_or_else(|e| e.into_inner()));
    let closed = futures::future::join_all(watchers.into_iter().map(|mut w| async move {
        while !w.peek_state().is_terminated() {
            w.changed().await;
        }
    }));
    if tokio::time::timeout(CLOSE_TIMEOUT, closed).await.is_err() {
        tracing::warn!(
            "a ZooKeeper session was not closed within {} s; the server ends it after its timeout",
            CLOSE_TIMEOUT.as_secs()
        );
    }
}
