//! The syncer: git → ZooKeeper, one merged diff, guarded.
//!
//! [`run`] does a whole sync after the local lock file is taken (see [`local`]): update the git
//! checkout ([`git`]), build and lint the desired tree offline ([`desired`]), then, in order,
//! the ZooKeeper guards — `/hosts` created if missing, a halted cluster refused, an unchanged
//! revision is nothing to do, unconverged hosts refused, `/hosts-lock` taken without blocking —
//! and finally the new top-level nodes claimed in `synced-roots`, one diff applied, `/hosts`
//! `version`, `synced` and `synced-roots` set last, in one write (a cluster paused by
//! `zkdeployment pause` keeps `version` `false`: only `resume` ends that pause). With `--auth`, everything it
//! owns is protected ([`protect`]). A sync that dies while applying leaves `version` as it was,
//! so no agent acts on a half-applied tree, and the next sync completes it. The deployment
//! index ([`index`]) is invalidated before the tree changes; after the apply the tree is
//! walked and compared with the generation live before: unchanged, that generation is made
//! live again; changed, the entries that differ are written in place, or (a change too big for
//! one transaction) a new generation is written. Either way the index goes live, and any
//! in-place writes land, in the one transaction that sets `version`.

pub(crate) mod desired;
pub mod git;
pub mod index;
pub mod local;
pub(crate) mod protect;

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::tree::literal::py_str;
use crate::tree::Props;
use crate::zk::acl::{Kind, Protection};
use crate::zk::halts::{clear_halts, effective, is_paused, read_halts, PAUSE};
use crate::zk::import::{apply_with_acl, plan, plan_delete, read_existing, ApplyError, Op};
use crate::zk::index::INDEX;
use crate::zk::paths::{version_set, VERSION_SET};
use crate::zk::recipe::lock::Lock;
use crate::zk::recipe::Attempt;
use crate::zk::snapshot::{read_subtree, ReadOptions};
use crate::zk::{
    call, connect, decode, encode, join, open_persistent, Client, ConnectOptions, ZkError,
};
use desired::{Desired, TreeError};
use zookeeper_client::MultiWriteError;

pub(crate) use crate::zk::paths::{HOSTS, HOSTS_LOCK};

/// What to sync.
#[derive(Debug, Clone)]
pub struct Options {
    /// Repository URL (a path, `file://`, or whatever libgit2 supports).
    pub url: String,
    /// Working directory of the checkout.
    pub dir: PathBuf,
    /// Branch (default `master`).
    pub branch: String,
    /// Print the diff, write nothing.
    pub dry_run: bool,
    /// Skip the halted and unconverged guards; re-import an unchanged revision.
    pub force: bool,
    /// ZooKeeper connection string.
    pub connection: String,
    /// `--auth`: the syncer's identity (digest credentials or its TLS client certificate);
    /// with it, what the syncer owns is protected (see [`protect`]).
    pub auth: Option<crate::config::Identity>,
    /// TLS to ZooKeeper.
    pub tls: crate::zk::TlsFiles,
    /// The largest answer accepted from a server (`jute-maxbuffer`).
    pub max_answer: usize,
    /// `--open-hosts`: leave `/hosts` writable by everyone (a mixed fleet).
    pub open_hosts: bool,
    /// The bound on fetching from git, every attempt included.
    pub git_bound: std::time::Duration,
}

/// Why a sync did nothing on purpose.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// `/hosts` `version` is `null`.
    #[error("ALL STOP, cluster version is None{}", halt_suffix(.0))]
    Halted(Option<Value>),
    /// A host has not reached the cluster version.
    #[error("Version mismatch detected, can't resync since host {host} has not converged ({host_version} -> {cluster_version})")]
    Unconverged {
        /// The first such host.
        host: String,
        /// Its version.
        host_version: String,
        /// The cluster version.
        cluster_version: String,
    },
    /// Another syncer holds `/hosts-lock`.
    #[error("Refused to update zookeeper tree, couldn't obtain cluster lock (held by {0})")]
    LockBusy(String),
}

fn halt_suffix(halt: &Option<Value>) -> String {
    match halt {
        Some(Value::Object(h)) => format!(
            " (halted by {} deploying {}: {})",
            h.get("name")
                .or(h.get("host"))
                .map(py_str)
                .unwrap_or_default(),
            h.get("version").map(py_str).unwrap_or_default(),
            h.get("error").map(py_str).unwrap_or_default()
        ),
        _ => String::new(),
    }
}

/// How a sync ended (when it did not fail).
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The tree was applied and the cluster version set to `revision`.
    Applied {
        /// The new cluster version.
        revision: String,
        /// Writes sent (tree nodes and `/hosts`).
        writes: usize,
    },
    /// The cluster version already is `revision`.
    UpToDate {
        /// The revision.
        revision: String,
    },
    /// Dry run: the diff lines, and the guard that would have refused, if any.
    DryRun {
        /// The revision.
        revision: String,
        /// zc.zk's dry-run lines.
        lines: Vec<String>,
        /// What a real run would refuse.
        refusal: Option<Refusal>,
    },
    /// A guard refused.
    Refused(Refusal),
}

/// A failed sync.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Git failed (after retries).
    #[error(transparent)]
    Git(#[from] git::GitError),
    /// The repository's files have errors; nothing was written.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Tree(Vec<TreeError>),
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
    /// Applying the diff failed part-way; the cluster version was not changed.
    #[error("applying the tree failed, cluster version unchanged: {0}")]
    Apply(#[from] ApplyError),
    /// The deployment index could not be written; the cluster version was not changed.
    #[error(transparent)]
    Index(#[from] index::IndexError),
    /// The cluster was halted while the tree was applied; the version was left `null`.
    #[error("the cluster was halted while syncing: tree applied, cluster version left None")]
    HaltedDuringSync,
    /// The connection string names a chroot that does not exist: nothing was written.
    #[error(
        "the chroot of {0} does not exist: the cluster is not initialised there or the \
         connection string names the wrong chroot (create the chroot node first)"
    )]
    NoChroot(String),
}

/// Runs one sync (the local lock file is the caller's business).
pub async fn run(opts: &Options) -> Result<Outcome, SyncError> {
    let checkout = git::update(&opts.url, &opts.dir, &opts.branch, opts.git_bound).await?;
    let revision = checkout.revision.clone();
    tracing::info!("VCS Version: {revision}");
    let desired = desired::build(&checkout.files).map_err(SyncError::Tree)?;
    for warning in &desired.warnings {
        tracing::warn!("{warning}");
    }
    let mut connect_opts = ConnectOptions::new(opts.connection.clone());
    connect_opts.digest = opts
        .auth
        .as_ref()
        .and_then(crate::config::Identity::digest)
        .map(|s| s.expose().to_string());
    connect_opts.tls = opts.tls.clone();
    connect_opts.max_answer = opts.max_answer;
    let client = connect(&connect_opts).await?;
    let protection = match &opts.auth {
        Some(crate::config::Identity::Digest(s)) => Some(Protection::new(s.expose())),
        Some(crate::config::Identity::X509) => Some(Protection::x509(&client).await?),
        None => None,
    };
    let Some(mut hosts) = read_hosts(&client, opts.dry_run).await? else {
        return Err(SyncError::NoChroot(opts.connection.clone()));
    };
    effective(&mut hosts, &read_halts(&client).await?);
    let version = hosts.get("version").cloned().unwrap_or(Value::Null);
    tracing::info!("ZK Version: {}", py_str(&version));

    let mut refusal = None;
    if version.is_null() && !opts.force {
        refusal = Some(Refusal::Halted(hosts.get("halt").cloned()));
    } else if up_to_date(&hosts, &revision) && !opts.force {
        if let (Some(p), false) = (&protection, opts.dry_run) {
            protect::protect(&client, p, &desired, opts.open_hosts).await?;
        }
        return Ok(Outcome::UpToDate { revision });
    } else if !opts.force && version != Value::Bool(false) {
        refusal = unconverged(&client, &version).await?;
    }
    if let Some(r) = &refusal {
        tracing::warn!("{r}");
        if !opts.dry_run {
            return Ok(Outcome::Refused(refusal.unwrap()));
        }
    }
    if opts.dry_run {
        let (ops_plan, _) = plan_sync(&client, &desired, &hosts, true).await?;
        return Ok(Outcome::DryRun {
            revision,
            lines: ops_plan,
            refusal,
        });
    }
    let identifier = std::process::id().to_string();
    let held = match Lock::new(&client, HOSTS_LOCK, &identifier)
        .try_acquire()
        .await?
    {
        Attempt::Acquired(held) => held,
        Attempt::Busy(holder) => {
            let holder = holder.map_or_else(
                || "another syncer".to_string(),
                |h| format!("{} ({})", h.identifier, h.name),
            );
            let refusal = Refusal::LockBusy(holder);
            tracing::error!("{refusal}");
            return Ok(Outcome::Refused(refusal));
        }
    };
    tracing::info!("Version mismatch detected, resyncing");
    let result = apply_locked(&client, &desired, &revision, opts, protection.as_ref()).await;
    held.release(&client).await?;
    result
}

async fn apply_locked(
    client: &Client,
    desired: &Desired,
    revision: &str,
    opts: &Options,
    protection: Option<&Protection>,
) -> Result<Outcome, SyncError> {
    let hosts = read_hosts(client, false)
        .await?
        .ok_or_else(|| SyncError::NoChroot(opts.connection.clone()))?;
    let (_, ops) = plan_sync(client, desired, &hosts, false).await?;
    let previous = index::live_generation(client).await?;
    if !ops.is_empty() {
        // From here until the new version is set, no agent may trust the old index.
        index::invalidate(client, &format!("sync of {revision} in progress")).await?;
    }
    claim_roots(client, desired).await?;
    let acl = protection.map(|p| p.acl(Kind::Owned));
    let mut writes = apply_with_acl(client, &ops, acl.as_deref()).await?;
    if let Some(p) = protection {
        writes += protect::protect(client, p, desired, opts.open_hosts)
            .await?
            .len();
    }
    if opts.force {
        // A forced sync ends a halt, wherever it was recorded.
        let cleared = clear_halts(client).await?;
        for record in &cleared {
            tracing::warn!("--force: cleared the halt record {record}");
        }
        writes += cleared.len();
    }
    writes += set_version(
        client,
        desired,
        revision,
        opts.force,
        previous,
        acl.as_deref(),
    )
    .await?;
    if let Some(p) = protection {
        // The generation set_version wrote was created protected; this only repairs what an
        // older syncer (or a hand) left open.
        writes += protect::protect_index(client, p).await?.len();
    }
    Ok(Outcome::Applied {
        revision: revision.to_string(),
        writes,
    })
}

/// True when `/hosts` (`hosts`) is at `revision`: its version, or, while it is paused by
/// `zkdeployment pause`, the revision last synced.
fn up_to_date(hosts: &Props, revision: &str) -> bool {
    let at = |key: &str| hosts.get(key) == Some(&json!(revision));
    at("version") || (is_paused(hosts) && at("synced"))
}

/// Reads `/hosts`, creating it with `version = "initial"` if missing (not in a dry run);
/// `None` if the session's chroot does not exist (where `/hosts` cannot be created).
async fn read_hosts(client: &Client, dry_run: bool) -> Result<Option<Props>, ZkError> {
    match call("get", HOSTS, client.get_data(HOSTS)).await {
        Ok((data, _)) => Ok(Some(decode(&data))),
        Err(e) if e.is_no_node() => {
            // Under a chroot, `/` is the chroot node itself.
            if call("stat", "/", client.check_stat("/")).await?.is_none() {
                return Ok(None);
            }
            let mut props = Props::new();
            props.insert("version".into(), json!("initial"));
            if !dry_run {
                tracing::info!("creating {HOSTS} with version 'initial'");
                match call(
                    "create",
                    HOSTS,
                    client.create(HOSTS, &encode(&props), &open_persistent()),
                )
                .await
                {
                    Ok(_) => {}
                    Err(ZkError::Op {
                        source: zookeeper_client::Error::NodeExists,
                        ..
                    }) => {
                        let (data, _) = call("get", HOSTS, client.get_data(HOSTS)).await?;
                        return Ok(Some(decode(&data)));
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(Some(props))
        }
        Err(e) => Err(e),
    }
}

/// The first host (by name) whose version is not the cluster version.
async fn unconverged(client: &Client, version: &Value) -> Result<Option<Refusal>, ZkError> {
    let skip = |p: &str| p.matches('/').count() > 2;
    let opts = ReadOptions {
        include_ephemeral: true,
        skip: &skip,
    };
    let Some(hosts) = read_subtree(client, HOSTS, &opts).await? else {
        return Ok(None);
    };
    for (host, node) in &hosts.children {
        let host_version = node.props.get("version").cloned().unwrap_or(Value::Null);
        if host_version != *version {
            return Ok(Some(Refusal::Unconverged {
                host: host.clone(),
                host_version: py_str(&host_version),
                cluster_version: py_str(version),
            }));
        }
    }
    Ok(None)
}

/// Plans the whole sync: the merged tree, and the deletion of top-level nodes the repository
/// owned (`synced-roots`) and no longer has. Returns the printed lines and the writes.
async fn plan_sync(
    client: &Client,
    desired: &Desired,
    hosts: &Props,
    dry_run: bool,
) -> Result<(Vec<String>, Vec<Op>), ZkError> {
    let existing = read_existing(client, &desired.tree, "/")
        .await?
        .unwrap_or_default();
    let mut plan = plan(
        &desired.tree,
        "/",
        &existing,
        &|p| desired.trim_of(p),
        dry_run,
    );
    let roots = desired.roots();
    let owned = hosts
        .get("synced-roots")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for name in owned.iter().filter_map(Value::as_str) {
        let reserved = crate::zk::paths::is_reserved_root(name);
        if reserved || roots.iter().any(|r| r == name) || crate::tree::bad_node_name(name).is_some()
        {
            continue;
        }
        let path = join("/", name);
        if let Some(node) = read_subtree(client, &path, &ReadOptions::default()).await? {
            let gone = plan_delete(&path, &node, dry_run);
            plan.lines.extend(gone.lines);
            plan.ops.extend(gone.ops);
        }
    }
    Ok((plan.lines, plan.ops))
}

/// Adds the repository's top-level nodes to `synced-roots` before anything is written under
/// them (a guarded write of `/hosts` that leaves `version` alone): a sync that fails or is
/// killed part-way leaves no top-level node that the next sync does not own, so reverting
/// the file and syncing again deletes it. [`set_version`] then sets the exact list.
async fn claim_roots(client: &Client, desired: &Desired) -> Result<(), SyncError> {
    for _ in 0..10 {
        let (data, stat) = call("get", HOSTS, client.get_data(HOSTS)).await?;
        let mut props = decode(&data);
        let mut owned: Vec<Value> = props
            .get("synced-roots")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let before = owned.len();
        for root in desired.roots() {
            if !owned.iter().any(|o| o.as_str() == Some(root.as_str())) {
                owned.push(json!(root));
            }
        }
        if owned.len() == before {
            return Ok(());
        }
        props.insert("synced-roots".into(), Value::Array(owned));
        match call(
            "set",
            HOSTS,
            client.set_data(HOSTS, &encode(&props), Some(stat.version)),
        )
        .await
        {
            Ok(_) => return Ok(()),
            Err(ZkError::Op {
                source: zookeeper_client::Error::BadVersion,
                ..
            }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(SyncError::Zk(ZkError::Op {
        op: "set",
        path: HOSTS.into(),
        source: zookeeper_client::Error::UnexpectedError("/hosts kept changing".into()),
    }))
}

/// Sets `version`, `synced` and `synced-roots` on `/hosts` in one guarded write (retried if
/// an agent wrote `/hosts` meanwhile; a halt that happened meanwhile is left standing unless
/// the sync was forced), in the same transaction that makes the deployment index live for it
/// ([`index::prepare`]: the previous generation again, updated in place, or a new one).
/// Nothing is written if `/hosts` already says so and the index is live for it. Returns the
/// writes: `/hosts` and the index nodes.
async fn set_version(
    client: &Client,
    desired: &Desired,
    revision: &str,
    force: bool,
    previous: Option<String>,
    acl: Option<&[zookeeper_client::Acl]>,
) -> Result<usize, SyncError> {
    let mut prepared = None;
    for _ in 0..10 {
        let (data, stat) = call("get", HOSTS, client.get_data(HOSTS)).await?;
        let mut props = decode(&data);
        if !force
            && (props.get("version").is_none_or(Value::is_null)
                || !read_halts(client).await?.is_empty())
        {
            return Err(SyncError::HaltedDuringSync);
        }
        let before = props.clone();
        if is_paused(&props) {
            // A pause made by `zkdeployment pause` outlasts syncs: only `resume` ends it.
            tracing::warn!(
                "the cluster is paused ({}): revision {revision} imported, the version stays \
                 false until `zkdeployment resume`",
                props[PAUSE]
            );
        } else {
            if props.get("version") != Some(&json!(revision)) {
                props.insert(VERSION_SET.into(), version_set(&json!(revision)));
            }
            props.insert("version".into(), json!(revision));
        }
        props.insert("synced".into(), json!(revision));
        props.insert("synced-roots".into(), json!(desired.roots()));
        if props == before && index::is_live_for(client, revision, stat.mzxid).await? {
            return Ok(0);
        }
        let live = match &prepared {
            Some(p) => p,
            None => prepared.insert(index::prepare(client, acl, previous.as_deref()).await?),
        };
        let hosts = (encode(&props), stat.version);
        if commit_version(client, hosts, revision, live, acl).await? {
            let keep: Vec<&str> = [Some(live.generation.name.as_str()), previous.as_deref()]
                .into_iter()
                .flatten()
                .collect();
            let pruned = index::prune(client, &keep).await;
            if !is_paused(&props) {
                prune_failures(client, revision).await;
            }
            return Ok(1 + live.writes() + pruned);
        }
    }
    Err(SyncError::Zk(ZkError::Op {
        op: "set",
        path: HOSTS.into(),
        source: zookeeper_client::Error::UnexpectedError("/hosts kept changing".into()),
    }))
}

/// Deletes the failure records of cluster versions other than `revision` (CONTRACT 15: a
/// record quarantines its host until the cluster version changes). A failure is logged:
/// the records left quarantine nobody at `revision`.
async fn prune_failures(client: &Client, revision: &str) {
    match crate::zk::node_state::prune_failures(client, &json!(revision)).await {
        Ok(0) => {}
        Ok(n) => tracing::info!("deleted {n} failure record(s) of earlier cluster versions"),
        Err(e) => {
            tracing::warn!("cannot delete the failure records of earlier cluster versions: {e}")
        }
    }
}

/// The one transaction of a sync's end: `/hosts` (`hosts`: its data, guarded by its data
/// version), the index's root naming `live`'s generation for `revision`, and `live`'s
/// in-place writes. `Ok(false)`: `/hosts` changed meanwhile (nothing was written).
async fn commit_version(
    client: &Client,
    hosts: (Vec<u8>, i32),
    revision: &str,
    live: &index::Prepared,
    acl: Option<&[zookeeper_client::Acl]>,
) -> Result<bool, SyncError> {
    let root = index::live_data(&json!(revision), &live.generation);
    // The paths written, in the order of the transaction's operations.
    let mut paths = vec![HOSTS.to_string(), INDEX.to_string()];
    let mut writer = client.new_multi_writer();
    let mut added = writer
        .add_set_data(HOSTS, &hosts.0, Some(hosts.1))
        .and_then(|_| writer.add_set_data(INDEX, &root, None));
    if let (Ok(()), Some(in_place)) = (&added, &live.in_place) {
        added = index::add_in_place(&mut writer, &live.generation.name, in_place, acl)
            .map(|more| paths.extend(more));
    }
    let failed = |index: usize, source| {
        SyncError::Zk(ZkError::Op {
            op: "write",
            path: paths.get(index).map_or(HOSTS, String::as_str).to_string(),
            source,
        })
    };
    added.map_err(|source| failed(0, source))?;
    let result = tokio::time::timeout(crate::zk::REQUEST_TIMEOUT, writer.commit())
        .await
        .map_err(|_| {
            SyncError::Zk(ZkError::Timeout {
                op: "set",
                path: HOSTS.into(),
            })
        })?;
    match result {
        Ok(_) => Ok(true),
        Err(MultiWriteError::OperationFailed {
            index: 0,
            source: zookeeper_client::Error::BadVersion,
        }) => Ok(false),
        Err(MultiWriteError::OperationFailed { source, index }) => Err(failed(index, source)),
        Err(MultiWriteError::RequestFailed { source }) => Err(failed(0, source)),
    }
}
