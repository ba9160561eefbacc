//! The agent's view of the cluster in ZooKeeper: the cluster version on `/hosts`, halting the
//! cluster (`version = None` plus a `halt` record, or a record under `/hosts-halt` when
//! `/hosts` is protected), registering the host's ephemeral node (with its registry node
//! `/agent-registry/<id>`, in the same transaction). Properties are changed
//! with [`crate::zk::update::update_props`] (version-guarded, so concurrent edits by others
//! are never clobbered).

use std::time::Duration;

use futures::future::{BoxFuture, Shared};
use futures::FutureExt;
use serde_json::{json, Value};
use zookeeper_client::{
    Acl, Acls, CreateMode, EventType, MultiWriteError, OneshotWatcher, Permission, SessionState,
};

use super::model::{agent_id, Host};
use crate::files::now;
use crate::tree::Props;
use crate::zk::halts::{record_halt, HALTS, HALT_PREFIX};
use crate::zk::node::ensure_node;
use crate::zk::paths::{host_path, registry_path, AGENT_PROPERTY, AGENT_REGISTRY, HOSTS};
use crate::zk::update::update_props;
use crate::zk::{call, call_retrying, decode, encode, Client, ZkError, REQUEST_TIMEOUT};

/// The cluster version (`None`/missing → `Value::Null`); `None` too while a host's halt
/// record exists under [`HALTS`] (see [`crate::zk::halts`]).
pub(crate) async fn cluster_version(client: &Client) -> Result<Value, ZkError> {
    // Both requests in flight at once: one round trip, as before halt records existed.
    let (hosts, halts) = futures::join!(
        call_retrying("get", HOSTS, || client.get_data(HOSTS)),
        call_retrying("list", HALTS, || client.list_children(HALTS)),
    );
    let (data, _) = hosts?;
    effective_version(&data, halts)
}

/// [`cluster_version`] with `/hosts` and its halt records watched ([`ClusterWatch`]), and
/// the version as `/hosts` says it (halt records aside), in the same round trip.
pub(crate) async fn watch_cluster_version(
    client: &Client,
) -> Result<(Value, Value, ClusterWatch), ZkError> {
    let (hosts, halts) = futures::join!(
        call("watch", HOSTS, client.get_and_watch_data(HOSTS)),
        watch_halts(client),
    );
    let (data, _, hosts) = hosts?;
    let (names, halts) = halts?;
    let written = decode(&data).get("version").cloned().unwrap_or(Value::Null);
    let effective = effective_version(&data, Ok(names))?;
    Ok((written, effective, ClusterWatch::new(hosts, halts)))
}

/// The halt records' names with a watch on their list; while [`HALTS`] is missing, none,
/// with a watch on its creation.
async fn watch_halts(client: &Client) -> Result<(Vec<String>, OneshotWatcher), ZkError> {
    for _ in 0..3 {
        match call_retrying("watch", HALTS, || client.list_and_watch_children(HALTS)).await {
            Err(e) if e.is_no_node() => {}
            listed => return listed,
        }
        let check = || client.check_and_watch_stat(HALTS);
        if let (None, watcher) = call_retrying("watch", HALTS, check).await? {
            return Ok((Vec::new(), watcher));
        }
        // Made in between: list it, with its watch.
    }
    Err(ZkError::Op {
        op: "watch",
        path: HALTS.into(),
        source: zookeeper_client::Error::UnexpectedError(format!(
            "{HALTS} keeps being made and deleted"
        )),
    })
}

/// Watches on `/hosts` and its halt records, set with a read of the cluster version: whatever
/// changes that version (a new version, a halt, a pause, a resume) fires them. Until then,
/// while the session is connected, the version read is the cluster's, so a pass's
/// checkpoints need no request.
#[derive(Clone)]
pub(crate) struct ClusterWatch {
    /// The first event of the two watches.
    fired: Shared<BoxFuture<'static, EventType>>,
}

impl ClusterWatch {
    fn new(hosts: OneshotWatcher, halts: OneshotWatcher) -> ClusterWatch {
        let first = async move {
            tokio::select! {
                event = hosts.changed() => event.event_type,
                event = halts.changed() => event.event_type,
            }
        };
        ClusterWatch {
            fired: first.boxed().shared(),
        }
    }

    /// Whether the version read with the watches is still the cluster's: no watch fired, and
    /// `client` is connected (while it is not, a change would not be told).
    pub(crate) fn unchanged(&self, client: &Client) -> bool {
        client.state() == SessionState::SyncConnected && self.fired.clone().now_or_never().is_none()
    }

    /// Resolves at the first event (a session event when the session ended).
    pub(crate) fn changed(&self) -> impl std::future::Future<Output = EventType> {
        self.fired.clone()
    }
}

/// The version in `/hosts`' data, `None` while a halt record is among `halts`.
pub(super) fn effective_version(
    data: &[u8],
    halts: Result<Vec<String>, ZkError>,
) -> Result<Value, ZkError> {
    let version = decode(data).get("version").cloned().unwrap_or(Value::Null);
    let halted = match halts {
        Ok(names) => names.iter().any(|n| n.starts_with(HALT_PREFIX)),
        Err(e) if e.is_no_node() => false,
        Err(e) => return Err(e),
    };
    Ok(if halted { Value::Null } else { version })
}

/// Halts the cluster: `/hosts` `version = None` and the halt record
/// `{host, name, version, error, time}`.
pub(crate) async fn halt(
    client: &Client,
    host: &Host,
    version: &Value,
    error: &str,
) -> Result<(), ZkError> {
    let record = json!({
        "host": host.id,
        "name": host.name,
        "version": version,
        "error": error,
        "time": now(),
    });
    tracing::error!("halting the cluster: {error}");
    let written = update_props(client, HOSTS, |p| {
        p.insert("version".into(), Value::Null);
        p.insert("halt".into(), record.clone());
    })
    .await;
    match written {
        // `/hosts` belongs to the syncer's identity (a protected cluster): the halt is
        // recorded where every host may create it.
        Err(e) if e.is_no_auth() => {
            tracing::info!("{HOSTS} is protected; recording the halt under {HALTS}");
            let Value::Object(record) = record else {
                unreachable!("a JSON object")
            };
            record_halt(client, &record).await
        }
        other => other.map(|_| ()),
    }
}

/// Why the agent could not register.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Another live agent holds the host node.
    #[error("Another agent is running")]
    AnotherAgent,
    /// `/hosts` does not exist yet.
    #[error("{HOSTS} does not exist in ZooKeeper (run the syncer first)")]
    NoHosts,
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

/// Registers the host: the ephemeral `/hosts/<id>` with `name`, `version`, `role`, `pid` and
/// `agent`, and with it (one transaction) the ephemeral registry node `/agent-registry/<id>`.
/// A legacy persistent node's `version` wins over `version` (and the node is replaced). A node
/// left by a dead agent of this host (same name, its pid gone) is waited out for up to
/// `wait`; a live one means another agent is running. Returns the host version in effect.
pub(crate) async fn register(
    client: &Client,
    host: &Host,
    version: Value,
    wait: Duration,
    secured: bool,
) -> Result<Value, RegisterError> {
    if call("stat", HOSTS, client.check_stat(HOSTS))
        .await?
        .is_none()
    {
        return Err(RegisterError::NoHosts);
    }
    let path = host_path(&host.id);
    let deadline = tokio::time::Instant::now() + wait;
    let mut version = version;
    loop {
        version = wait_for_host_node(client, host, &path, version, deadline).await?;
        if let Some(v) = create_or_update(client, host, &path, version.clone(), secured).await? {
            return Ok(v);
        }
        // Another session created the node between our look and our create: whose it is
        // decides (a live agent of this host: `AnotherAgent`).
    }
}

/// Waits until `path` is free or this session's own, within `deadline`: a legacy persistent
/// node is replaced (its `version` wins), a node left by a dead agent of this host is waited
/// out, any other owner means another agent is running. Returns the host version in effect.
async fn wait_for_host_node(
    client: &Client,
    host: &Host,
    path: &str,
    mut version: Value,
    deadline: tokio::time::Instant,
) -> Result<Value, RegisterError> {
    loop {
        match call("get", path, client.get_data(path)).await {
            Err(e) if e.is_no_node() => return Ok(version),
            Err(e) => return Err(e.into()),
            Ok((data, stat)) => {
                let props = decode(&data);
                if stat.ephemeral_owner == 0 {
                    if let Some(v) = props.get("version") {
                        version = v.clone();
                    }
                    match call("delete", path, client.delete(path, None)).await {
                        Err(e) if !e.is_no_node() => return Err(e.into()),
                        _ => continue,
                    }
                }
                if stat.ephemeral_owner == client.session_id().0 {
                    return Ok(version);
                }
                let ours = props.get("name").and_then(Value::as_str) == Some(host.name.as_str());
                // Left by a dead agent of this host, or by this very process's previous
                // (expired) session.
                let stale = props.get("pid").and_then(Value::as_i64).is_some_and(|p| {
                    !crate::command::pid_alive(p) || p == i64::from(std::process::id())
                });
                if !(ours && stale) || tokio::time::Instant::now() >= deadline {
                    return Err(RegisterError::AnotherAgent);
                }
                tracing::warn!("{path} is left by a previous agent (pid gone); waiting for its session to expire");
                let (stat, watcher) =
                    call("watch", path, client.check_and_watch_stat(path)).await?;
                if stat.is_some() {
                    let _ = tokio::time::timeout_at(deadline, watcher.changed()).await;
                }
            }
        }
    }
}

/// Creates the host node (and the registry node), or, when this session already owns it,
/// replaces its properties. `None` when another session holds it.
async fn create_or_update(
    client: &Client,
    host: &Host,
    path: &str,
    version: Value,
    secured: bool,
) -> Result<Option<Value>, RegisterError> {
    let mut props = Props::new();
    props.insert("name".into(), json!(host.name));
    props.insert("version".into(), version.clone());
    if let Some(role) = &host.role {
        props.insert("role".into(), json!(role));
    }
    props.insert("pid".into(), json!(std::process::id()));
    // Says "not the original's agent" (the mixed-fleet rule, docs/design.md, "Exclusion").
    props.insert(AGENT_PROPERTY.into(), json!(agent_id()));
    // With digest auth, the host node is readable by all and writable only by this identity.
    static SECURED: [Acl; 2] = [
        Acl::new_const(Permission::READ, "world", "anyone"),
        Acl::new_const(Permission::ALL, "auth", ""),
    ];
    let acls = if secured {
        Acls::new(&SECURED)
    } else {
        Acls::anyone_all()
    };
    let mode = CreateMode::Ephemeral.with_acls(acls);
    let data = encode(&props);
    if create_registered(client, path, &host.id, &data, &mode).await? {
        return Ok(Some(version));
    }
    // Exists: only this session's own node (a re-registration) is updated; checked, since
    // another agent of this host may have created it a moment ago.
    match call("stat", path, client.check_stat(path)).await? {
        Some(stat) if stat.ephemeral_owner == client.session_id().0 => {}
        _ => return Ok(None),
    }
    // Replace its properties, and add the registry node if this session has none yet.
    update_props(client, path, |p| *p = props.clone()).await?;
    let registry = registry_path(&host.id);
    match call("create", &registry, client.create(&registry, b"", &mode)).await {
        Ok(_) => {}
        Err(ZkError::Op {
            source: zookeeper_client::Error::NodeExists,
            ..
        }) => {}
        Err(ZkError::Op { source, .. }) if registry_refused(&source) => {
            unregistered(&registry, &source)
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Some(version))
}

/// Creates the host node `path` and the registry node of `id` in one transaction (so any
/// snapshot of ZooKeeper has both or neither, and the session's end removes both in one
/// transaction too; docs/design.md, "Exclusion"). `/agent-registry` is created if missing; if
/// the registry node cannot be made (the agent may not create `/agent-registry` on a
/// protected root, or a node of another session holds the name), the host node is created
/// alone: the mixed-fleet check then reads this host's node (slower, still right). False if
/// the host node exists already.
async fn create_registered(
    client: &Client,
    path: &str,
    id: &str,
    data: &[u8],
    mode: &zookeeper_client::CreateOptions<'_>,
) -> Result<bool, RegisterError> {
    let registry = registry_path(id);
    let op = |source| ZkError::Op {
        op: "register",
        path: path.to_string(),
        source,
    };
    let mut made_parent = false;
    loop {
        let mut writer = client.new_multi_writer();
        writer.add_create(path, data, mode).map_err(op)?;
        writer.add_create(&registry, b"", mode).map_err(op)?;
        let failed = match tokio::time::timeout(REQUEST_TIMEOUT, writer.commit()).await {
            Ok(Ok(_)) => return Ok(true),
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(ZkError::Timeout {
                    op: "register",
                    path: path.to_string(),
                }
                .into())
            }
        };
        match failed {
            MultiWriteError::OperationFailed {
                index: 0,
                source: zookeeper_client::Error::NodeExists,
            } => return Ok(false),
            MultiWriteError::OperationFailed {
                index: 1,
                source: zookeeper_client::Error::NoNode,
            } if !made_parent => {
                made_parent = true;
                match ensure_node(client, AGENT_REGISTRY).await {
                    Ok(()) => continue,
                    Err(ZkError::Op { source, .. }) if registry_refused(&source) => {
                        unregistered(AGENT_REGISTRY, &source)
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            MultiWriteError::OperationFailed { index: 1, source } if registry_refused(&source) => {
                unregistered(&registry, &source)
            }
            other => return Err(op(other.into()).into()),
        }
        // The host node alone.
        return match call("create", path, client.create(path, data, mode)).await {
            Ok(_) => Ok(true),
            Err(ZkError::Op {
                source: zookeeper_client::Error::NodeExists,
                ..
            }) => Ok(false),
            Err(e) => Err(e.into()),
        };
    }
}

/// True for the errors of a registry node that registration goes on without: no permission
/// (a protected root without `/agent-registry`), the parent missing, or a node of another
/// session holding the name.
fn registry_refused(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error::*;
    matches!(e, NoAuth | NoNode | NodeExists)
}

/// Logs (once per process) that this host registered without its registry node.
fn unregistered(path: &str, e: &zookeeper_client::Error) {
    static LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "cannot create {path} ({e}): registering without it; agents check whether the fleet is mixed by reading this host's node (run `sync --auth` to create {AGENT_REGISTRY})"
        );
    }
}
