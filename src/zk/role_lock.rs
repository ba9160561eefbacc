//! The persistent role lock, the original's recipe at `/role-locks/<role>` (operators create
//! the node): persistent sequential `lr-` requests holding `{"requestor", "hostname"}`, served
//! in sequence order. A host that fails keeps its request, so the role stays locked until
//! that host succeeds or an operator deletes the request. `status` reads the same layout
//! ([`request_sequence`], [`requester`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use zookeeper_client::{Acls, CreateMode};

use super::paths::role_lock_path;
use super::{call, call_retrying, decode, join, Client, ZkError};
use crate::tree::literal::py_str;
use crate::tree::Props;

/// The name prefix of a request node.
pub(crate) const REQUEST_PREFIX: &str = "lr-";

/// A held role lock (our request node).
#[derive(Debug)]
pub(crate) struct RoleLock {
    /// Our request node.
    pub(crate) request: String,
}

/// Why the role lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RoleLockError {
    /// The lock node is missing (operators create it).
    #[error("role lock node '{0}' must exist")]
    Missing(String),
    /// The agent was asked to stop (SIGTERM) while it waited; its waiting request is gone.
    #[error("the agent is stopping")]
    Stopping,
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

/// How often a wait for the role lock looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// The requests of the lock, in order, with their requestor.
async fn requests(client: &Client, path: &str) -> Result<Vec<(String, Option<String>)>, ZkError> {
    let mut names: Vec<String> = call_retrying("list", path, || client.list_children(path))
        .await?
        .into_iter()
        .filter(|n| n.starts_with(REQUEST_PREFIX))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let node = join(path, &name);
        match call_retrying("get", &node, || client.get_data(&node)).await {
            Ok((data, _)) => {
                let who = decode(&data)
                    .get("requestor")
                    .and_then(|v| v.as_str().map(str::to_string));
                out.push((name, who));
            }
            // A request deleted between the listing and the read is simply gone.
            Err(e) if e.is_no_node() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Checks that the role lock node of `role` exists (operators create it).
pub(crate) async fn check_lock_node(client: &Client, role: &str) -> Result<(), RoleLockError> {
    let path = role_lock_path(role);
    if call("stat", &path, client.check_stat(&path))
        .await?
        .is_none()
    {
        return Err(RoleLockError::Missing(path));
    }
    Ok(())
}

/// Enters the role lock: makes (or re-adopts) this host's request and waits until it is first.
/// When `stop` is set while it waits (SIGTERM), it withdraws the request (a waiting request
/// holds nothing) and returns [`RoleLockError::Stopping`]: the wait may be endless (a host
/// that failed keeps the lock), and a stopping agent starts no new step.
pub(crate) async fn enter(
    client: &Client,
    role: &str,
    host_id: &str,
    host_name: &str,
    stop: &AtomicBool,
) -> Result<RoleLock, RoleLockError> {
    let path = role_lock_path(role);
    check_lock_node(client, role).await?;
    let data = json!({"requestor": host_id, "hostname": host_name}).to_string();
    let mode = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let prefix = join(&path, REQUEST_PREFIX);
    let (_, seq) = call(
        "create",
        &prefix,
        client.create(&prefix, data.as_bytes(), &mode),
    )
    .await?;
    let ours =
        adopt_first_request(client, &path, host_id, format!("{REQUEST_PREFIX}{seq}")).await?;
    let mut logged: Option<String> = None;
    loop {
        let (names, _, watcher) =
            call("watch", &path, client.get_and_watch_children(&path)).await?;
        let mut names: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with(REQUEST_PREFIX))
            .collect();
        names.sort();
        match names.first() {
            Some(first) if *first == ours => break,
            Some(first) => {
                // Name the holder (once per holder): who blocks the role is what an operator
                // needs to know, e.g. a host that failed and keeps its request.
                if logged.as_ref() != Some(first) {
                    let who = requestor(client, &join(&path, first)).await;
                    tracing::info!(
                        "waiting for the role lock {path}, held by {who} (request {first})"
                    );
                    logged = Some(first.clone());
                }
                let stopping = async {
                    while !stop.load(Ordering::SeqCst) {
                        tokio::time::sleep(STOP_CHECK).await;
                    }
                };
                tokio::select! {
                    _ = watcher.changed() => {}
                    _ = stopping => {
                        let request = join(&path, &ours);
                        match call("delete", &request, client.delete(&request, None)).await {
                            Err(e) if !e.is_no_node() => return Err(e.into()),
                            _ => return Err(RoleLockError::Stopping),
                        }
                    }
                }
            }
            None => {
                return Err(RoleLockError::Zk(ZkError::Op {
                    op: "lock",
                    path: path.clone(),
                    source: zookeeper_client::Error::NoNode,
                }))
            }
        }
    }
    Ok(RoleLock {
        request: join(&path, &ours),
    })
}

/// The request of this host (`host_id`) that stays in the role lock at `path`: its first
/// one (`created` unless an earlier one is left); any other request of its own is deleted.
async fn adopt_first_request(
    client: &Client,
    path: &str,
    host_id: &str,
    created: String,
) -> Result<String, RoleLockError> {
    let all = requests(client, path).await?;
    let mine: Vec<&String> = all
        .iter()
        .filter(|(_, who)| who.as_deref() == Some(host_id))
        .map(|(name, _)| name)
        .collect();
    let Some(first_ours) = mine.first() else {
        return Ok(created);
    };
    if **first_ours != created {
        tracing::info!("re-adopting our earlier role lock request {first_ours}");
    }
    // Only the first request of ours may stay: another one (left by a pass cut off between
    // creating its request and adopting an earlier one) would block the role for every other
    // host until this one runs a pass again, which may be never.
    for extra in mine.iter().skip(1) {
        let node = join(path, extra);
        match call_retrying("delete", &node, || client.delete(&node, None)).await {
            Err(e) if !e.is_no_node() => return Err(e.into()),
            _ => {}
        }
    }
    Ok((*first_ours).clone())
}

/// `hostname (requestor)` of a request node, as far as it can be read.
async fn requestor(client: &Client, request: &str) -> String {
    match call("get", request, client.get_data(request)).await {
        Ok((data, _)) => requester(&decode(&data)),
        Err(_) => "a request gone meanwhile".to_string(),
    }
}

/// Who made a request, from its data: `hostname (requestor)`, or the requestor alone.
pub(crate) fn requester(props: &Props) -> String {
    let field = |k: &str| props.get(k).map(py_str).unwrap_or_default();
    let (who, name) = (field("requestor"), field("hostname"));
    if name.is_empty() {
        who
    } else {
        format!("{name} ({who})")
    }
}

/// The sequence number of a request node name (`lr-0000000003` → 3).
pub(crate) fn request_sequence(name: &str) -> Option<i64> {
    name.strip_prefix(REQUEST_PREFIX)?.parse().ok()
}

impl RoleLock {
    /// Leaves the lock: the request is deleted after success, kept after a failure.
    pub(crate) async fn leave(self, client: &Client, ok: bool) -> Result<(), ZkError> {
        if !ok {
            tracing::warn!(
                "keeping the role lock request {} after the failure",
                self.request
            );
            return Ok(());
        }
        // Retried across a connection loss: a request left behind would block the role for
        // every other host until this one runs another pass.
        match call_retrying("delete", &self.request, || {
            client.delete(&self.request, None)
        })
        .await
        {
            Err(e) if !e.is_no_node() => Err(e),
            _ => Ok(()),
        }
    }
}
