//! The ZooKeeper side: connecting ([`connect`](fn@connect)), zc.zk's node encoding (from
//! [`crate::tree::encoding`]), where things live ([`paths`]), the guarded property update
//! ([`update`]), reading subtrees with pipelined requests ([`snapshot`], [`multiread`]),
//! symbolic and property links ([`links`]), importing a parsed tree as a minimal diff
//! ([`import`]), exporting it back ([`export`]), kazoo's lock and semaphore recipes, plain
//! ([`recipe`]; the agent's present lock and semaphore with lease passing: [`lock`],
//! [`semaphore`]), generic node helpers ([`node`]), the persistent role lock ([`role_lock`]), closing
//! sessions on exit ([`session`]), ACLs of a protected tree ([`acl`]) and the halt records
//! hosts create when they may not write `/hosts` ([`halts`]), and the per-node halts, pauses
//! and failure records of failure budgets ([`node_state`]).

pub mod acl;
pub mod connect;
pub mod export;
pub mod halts;
pub mod import;
pub mod index;
pub mod links;
pub(crate) mod multiread;
pub mod node;
pub mod node_state;
pub mod paths;
pub mod recipe;
pub(crate) mod role_lock;
pub(crate) mod session;
pub mod snapshot;
pub(crate) mod tls;
pub(crate) mod update;

pub use crate::tree::encoding::{decode, encode, MAX_NODE_DATA};
pub(crate) use connect::{connect, ConnectOptions, DEFAULT_JUTE_MAXBUFFER};
pub(crate) use tls::TlsFiles;

use std::time::Duration;

/// A ZooKeeper client (re-exported so callers need not name the crate).
pub type Client = zookeeper_client::Client;

/// Longest time any single ZooKeeper request may take before it is reported as an error.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A ZooKeeper operation that failed, with the operation and path it was about.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    /// The server (or the client library) answered with an error. The message names
    /// ZooKeeper: it reaches operators as is (`zkdeployment: ZooKeeper get /hosts: session
    /// expired`).
    #[error("ZooKeeper {op} {path}: {source}")]
    Op {
        /// What was being done (`get`, `create`, …).
        op: &'static str,
        /// The node path (relative to the chroot).
        path: String,
        /// The client library's error.
        source: zookeeper_client::Error,
    },
    /// No answer within [`REQUEST_TIMEOUT`].
    #[error("{op} {path}: no answer from ZooKeeper within {secs} s", secs = REQUEST_TIMEOUT.as_secs())]
    Timeout {
        /// What was being done.
        op: &'static str,
        /// The node path.
        path: String,
    },
    /// Node data too large for ZooKeeper (whose server drops the connection of a client
    /// sending a request over `jute.maxbuffer`, 1 MiB by default): refused before sending.
    #[error("ZooKeeper {op} {path}: {bytes} bytes of path and data, over the limit of {MAX_NODE_DATA} bytes (jute.maxbuffer)")]
    TooLarge {
        /// What was being done.
        op: &'static str,
        /// The node path.
        path: String,
        /// The size of its path and data.
        bytes: usize,
    },
    /// An answer over the client's limit ([`connect::DEFAULT_JUTE_MAXBUFFER`], the
    /// `jute-maxbuffer` key): discarded unread; the session goes on.
    #[error("ZooKeeper {op} {path}: the answer is {len} bytes, over this client's limit of {limit} bytes (set jute-maxbuffer in the configuration file as on the servers)")]
    AnswerTooLarge {
        /// What was being done.
        op: &'static str,
        /// The node path (the first of a multi-read).
        path: String,
        /// The answer's size.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The TLS files cannot be used (or the client certificate has expired).
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Could not connect at all.
    #[error("cannot connect to ZooKeeper at {conn}: {reason}")]
    Connect {
        /// The connection string.
        conn: String,
        /// Why.
        reason: String,
    },
}

impl ZkError {
    /// The client error, if the server answered.
    pub(crate) fn source_error(&self) -> Option<&zookeeper_client::Error> {
        match self {
            ZkError::Op { source, .. } => Some(source),
            _ => None,
        }
    }

    /// True if the node did not exist.
    pub(crate) fn is_no_node(&self) -> bool {
        matches!(self.source_error(), Some(zookeeper_client::Error::NoNode))
    }

    /// True if the server said the node exists already.
    pub(crate) fn is_node_exists(&self) -> bool {
        matches!(
            self.source_error(),
            Some(zookeeper_client::Error::NodeExists)
        )
    }

    /// True if the server refused the request for want of permission (an ACL).
    pub(crate) fn is_no_auth(&self) -> bool {
        matches!(self.source_error(), Some(zookeeper_client::Error::NoAuth))
    }

    /// True if the request got no answer in time ([`REQUEST_TIMEOUT`]): it may still be
    /// applied.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, ZkError::Timeout { .. })
    }

    /// True if the connection broke while the request was in flight (`ConnectionLoss`, or the
    /// socket's own error): the request may or may not have been applied, and the session
    /// may live on (the client reconnects, to another server of an ensemble too).
    pub(crate) fn is_connection_loss(&self) -> bool {
        matches!(
            self.source_error(),
            Some(zookeeper_client::Error::ConnectionLoss | zookeeper_client::Error::Custom(_))
        )
    }
}

/// How many times [`call_retrying`] tries again after a connection loss.
pub(crate) const LOSS_RETRIES: u32 = 5;

/// [`call`] for requests that are safe to repeat (reads, version-guarded writes whose
/// outcome the caller checks, deletes of its own nodes): when the connection broke while the
/// request was in flight, it is made again, up to [`LOSS_RETRIES`] times. The new request is
/// queued by the client until it has reconnected within the session (or fails with
/// `SessionExpired` if the session is gone), so a leader election or a server restart costs
/// a pause, not an abandoned pass.
pub(crate) async fn call_retrying<T, F, Fut>(
    op: &'static str,
    path: &str,
    mut request: F,
) -> Result<T, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, zookeeper_client::Error>>,
{
    let mut attempt = 0;
    loop {
        match call(op, path, request()).await {
            Err(e) if e.is_connection_loss() && attempt < LOSS_RETRIES => {
                attempt += 1;
                tracing::info!("{e}; trying again once reconnected");
                tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
            }
            other => return other,
        }
    }
}

/// Awaits a ZooKeeper request with [`REQUEST_TIMEOUT`], attaching the operation and path.
pub(crate) async fn call<T>(
    op: &'static str,
    path: &str,
    fut: impl std::future::Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, ZkError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(zookeeper_client::Error::FrameTooLarge { len, limit })) => {
            Err(ZkError::AnswerTooLarge {
                op,
                path: path.to_string(),
                len,
                limit,
            })
        }
        Ok(Err(source)) => Err(ZkError::Op {
            op,
            path: path.to_string(),
            source,
        }),
        Err(_) => Err(ZkError::Timeout {
            op,
            path: path.to_string(),
        }),
    }
}

/// The children of `path` (none when it does not exist), retried after a connection loss.
pub(crate) async fn list_or_empty(client: &Client, path: &str) -> Result<Vec<String>, ZkError> {
    match call_retrying("list", path, || client.list_children(path)).await {
        Ok(names) => Ok(names),
        Err(e) if e.is_no_node() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Joins a parent path and a child name (`/` + `a` = `/a`, `/a` + `b` = `/a/b`).
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "/" || parent.is_empty() {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Options for creating ordinary persistent nodes with an open ACL (as zc.zk does).
pub(crate) fn open_persistent() -> zookeeper_client::CreateOptions<'static> {
    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all())
}
