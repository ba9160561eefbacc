//! The ZooKeeper side: connecting ([`connect`]), zc.zk's node encoding ([`encoding`]), reading
//! subtrees with pipelined requests ([`snapshot`]), symbolic and property links ([`links`]),
//! importing a parsed tree as a minimal diff ([`import`]), exporting it back ([`export`]), and
//! the kazoo-compatible lock recipe ([`lock`]).

pub mod connect;
pub mod encoding;
pub mod export;
pub mod import;
pub mod links;
pub mod lock;
pub mod snapshot;

pub use connect::{connect, ConnectOptions};
pub use encoding::{decode, encode};
pub use snapshot::{read_subtree, ZNode};

use std::time::Duration;

pub use zookeeper_client as client;

/// A ZooKeeper client (re-exported so callers need not name the crate).
pub type Client = zookeeper_client::Client;

/// Longest time any single ZooKeeper request may take before it is reported as an error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A ZooKeeper operation that failed, with the operation and path it was about.
#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    /// The server (or the client library) answered with an error.
    #[error("{op} {path}: {source}")]
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
    pub fn source_error(&self) -> Option<&zookeeper_client::Error> {
        match self {
            ZkError::Op { source, .. } => Some(source),
            _ => None,
        }
    }

    /// True if the node did not exist.
    pub fn is_no_node(&self) -> bool {
        matches!(self.source_error(), Some(zookeeper_client::Error::NoNode))
    }
}

/// Awaits a ZooKeeper request with [`REQUEST_TIMEOUT`], attaching the operation and path.
pub async fn call<T>(
    op: &'static str,
    path: &str,
    fut: impl std::future::Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, ZkError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
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

/// Joins a parent path and a child name (`/` + `a` = `/a`, `/a` + `b` = `/a/b`).
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" || parent.is_empty() {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Options for creating ordinary persistent nodes with an open ACL (as zc.zk does).
pub fn open_persistent() -> zookeeper_client::CreateOptions<'static> {
    zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all())
}
