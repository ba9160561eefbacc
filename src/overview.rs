//! The cluster at a glance (`zkdeployment status`): the cluster version, the synced revision,
//! the halt record, one row per host (converged or not, its error, its current step), and the
//! holders and waiters of the node locks and role locks with their age, and the application
//! nodes that have failures, a halt or a pause at the current cluster version
//! ([`NodeRow`]). [`Overview::read`]
//! reads it; [`Overview::render`] formats it for a terminal; the JSON form is stable.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use zookeeper_client::MultiReadResult;

use crate::summary::{summarize, Filter, HostFacts, Summary};

use crate::tree::literal::py_str;
use crate::zk::index::SKIPPED_ROOTS;
use crate::zk::multiread::{read_all, Want};
use crate::zk::node_state::NodeState;
use crate::zk::paths::{
    AGENT_LOCKS, AGENT_PROPERTY, AGENT_SEMAPHORES, DEPLOYED_AT, HOSTS, HOSTS_LOCK, ROLES,
    ROLE_LOCKS, VERSION_SET,
};
use crate::zk::recipe::lock::sequence_of;
use crate::zk::recipe::semaphore::{turnstiles_path, TURNSTILES_SUFFIX};
use crate::zk::role_lock::{request_sequence, requester};
use crate::zk::snapshot::{read_subtree, ReadOptions, ZNode};
use crate::zk::{call, join, Client, ZkError};

/// One host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct HostRow {
    /// Host id.
    pub(crate) id: String,
    /// Host name.
    pub(crate) name: Value,
    /// Role.
    pub(crate) role: Value,
    /// The host's version.
    pub(crate) version: Value,
    /// True if at the cluster version.
    pub(crate) converged: bool,
    /// The last failure's message, if any.
    pub(crate) error: Value,
    /// The current step.
    pub(crate) status: Value,
    /// When it last finished a pass successfully (`deployed-at`, Unix time), if recorded.
    pub(crate) deployed: Value,
    /// `converged`, `deploying` or `failed` (see [`crate::summary::state`]).
    pub(crate) state: &'static str,
}

/// One lock.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LockRow {
    /// The lock node.
    pub(crate) path: String,
    /// The holder's identifier (`host-name (host-id)` for node locks).
    pub(crate) holder: Option<String>,
    /// Identifiers of the waiting contenders, in order.
    pub(crate) waiters: Vec<String>,
    /// Seconds the holder has held it (since its request was made).
    pub(crate) age: Option<f64>,
    /// The contenders that are not ephemeral (full paths, in order): no session ends them,
    /// so each holds or blocks the lock for ever. kazoo locks only (a role lock's requests
    /// are persistent by design).
    pub(crate) permanent: Vec<String>,
}

/// One semaphore (`/agent-semaphores/<name>`, the leases of a node whose max-parallel is
/// above 1) with leases or waiters.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct SemaphoreRow {
    /// The semaphore node.
    pub(crate) path: String,
    /// How many leases it gives (its stored `max_leases`), or null.
    #[serde(rename = "max-leases")]
    pub(crate) max_leases: Value,
    /// Who holds its leases, oldest first.
    pub(crate) holders: Vec<LeaseRow>,
    /// Who waits for a lease: the contenders of its guard lock `PATH-__lock__`, in order, then
    /// those waiting in its turnstiles to queue there.
    pub(crate) waiters: Vec<String>,
    /// Leases and guard contenders that are not ephemeral (full paths): no session ends
    /// them, so each takes a lease, or blocks the guard, for ever.
    pub(crate) permanent: Vec<String>,
}

/// One lease of a semaphore.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct LeaseRow {
    /// The holder's identifier (`host-name (host-id)`).
    pub(crate) holder: String,
    /// Seconds it has held the lease.
    pub(crate) age: f64,
}

/// One application node with failures, a halt or a pause at the current cluster version
/// (CONTRACT 15).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct NodeRow {
    /// The application node.
    pub(crate) path: String,
    /// `halted`, `paused` or `degraded` (failures within the budget).
    pub(crate) state: &'static str,
    /// The effective budget (max-failures) the failed hosts applied, the last one's; null
    /// when no host failed.
    pub(crate) budget: Value,
    /// The failed hosts, each once, in the order they failed:
    /// `{host, name, n, version, error, time}`.
    pub(crate) failed: Vec<Value>,
    /// The node halt record, or null.
    pub(crate) halt: Value,
    /// The node pause record, or null.
    pub(crate) pause: Value,
    /// How many of the failed hosts are within the budget each applied (quarantined).
    #[serde(skip)]
    pub(crate) quarantined: usize,
}

/// The fields of a failure record `status` shows.
const FAILED_FIELDS: [&str; 6] = ["host", "name", "n", "version", "error", "time"];

impl NodeRow {
    /// The row of a node's recorded state.
    pub(crate) fn of(state: NodeState) -> NodeRow {
        let budget_of = |r: &Value| r.get("budget").and_then(Value::as_u64);
        let quarantined = state
            .failed
            .iter()
            .enumerate()
            .filter(|(i, r)| budget_of(r).is_some_and(|f| (*i as u64) < f))
            .count();
        let budget = state
            .failed
            .iter()
            .rev()
            .find_map(budget_of)
            .map_or(Value::Null, Value::from);
        let failed = state
            .failed
            .iter()
            .map(|r| {
                let field = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
                Value::Object(
                    FAILED_FIELDS
                        .iter()
                        .map(|k| (k.to_string(), field(k)))
                        .collect(),
                )
            })
            .collect();
        NodeRow {
            state: match (&state.halt, &state.pause) {
                (Some(_), _) => "halted",
                (None, Some(_)) => "paused",
                (None, None) => "degraded",
            },
            path: state.path,
            budget,
            failed,
            halt: state.halt.unwrap_or(Value::Null),
            pause: state.pause.unwrap_or(Value::Null),
            quarantined,
        }
    }

    /// The row in words, on one line: `PATH: STATE; K failed hosts, budget F (h1, h2); who
    /// halted or paused it and why`.
    pub(crate) fn describe(&self) -> String {
        let mut out = format!("{}: {}", one_line(&self.path), self.state);
        if !self.failed.is_empty() {
            let hosts: Vec<String> = self
                .failed
                .iter()
                .map(|r| r.get("host").map(py_str).unwrap_or_default())
                .collect();
            let budget = match self.budget.as_u64() {
                Some(f) => format!("budget {f}"),
                None => "budget unknown".into(),
            };
            out.push_str(&format!(
                "; {} failed host{}, {budget} ({})",
                hosts.len(),
                if hosts.len() == 1 { "" } else { "s" },
                one_line(&hosts.join(", "))
            ));
        }
        if let Some(p) = self.pause.as_object() {
            out.push_str(&format!("; {}", describe_pause(p)));
        }
        if let Some(h) = self.halt.as_object() {
            let (who, error) = describe_halt(h);
            out.push_str(&format!("; {who}: {error}"));
        }
        out
    }
}

/// The version node state is read at: the cluster version, or while the cluster is halted
/// or paused the version last set (`version-set`), else the synced revision.
pub(crate) fn state_version(cluster: &crate::tree::Props) -> Value {
    let get = |k: &str| cluster.get(k).cloned().unwrap_or(Value::Null);
    let version = get("version");
    if deployable(&version) {
        return version;
    }
    match cluster.get(VERSION_SET).and_then(|m| m.get("version")) {
        Some(v) if deployable(v) => v.clone(),
        _ => get("synced"),
    }
}

/// The application nodes with failures, a halt or a pause at `version`.
pub(crate) async fn read_nodes(client: &Client, version: &Value) -> Result<Vec<NodeRow>, ZkError> {
    Ok(crate::zk::node_state::read_all(client, version)
        .await?
        .into_iter()
        .map(NodeRow::of)
        .collect())
}

/// The whole picture.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct Overview {
    /// `/hosts` `version`.
    pub(crate) version: Value,
    /// `/hosts` `synced`.
    pub(crate) synced: Value,
    /// `/hosts` `halt`.
    pub(crate) halt: Value,
    /// The record of a pause made by `zkdeployment pause` (`{user, host, time, reason}`), or
    /// null.
    pub(crate) pause: Value,
    /// Application nodes with failures, a halt or a pause at the current cluster version.
    pub(crate) nodes: Vec<NodeRow>,
    /// Hosts, by id.
    pub(crate) hosts: Vec<HostRow>,
    /// Locks that have a holder or waiters.
    pub(crate) locks: Vec<LockRow>,
    /// Semaphores that have lease holders or waiters.
    pub(crate) semaphores: Vec<SemaphoreRow>,
    /// What is writable by anyone that should not be (`/hosts`, the root `/`, the top-level
    /// nodes agents discover deployments in), and lock contenders and leases that are not
    /// ephemeral: one message each.
    pub(crate) warnings: Vec<String>,
    /// True when `/hosts` is protected (resume then takes `--auth`).
    #[serde(skip)]
    pub(crate) protected: bool,
    /// Why every node uses the node lock with max-parallel 1 (a registered host without
    /// the `agent` property: the original's agent), if so.
    #[serde(rename = "mixed-fleet", skip_serializing_if = "Option::is_none")]
    pub(crate) mixed_fleet: Option<String>,
    /// The fleet summary of the hosts shown.
    pub(crate) summary: Summary,
    /// What the summary is made from besides the hosts (not shown).
    #[serde(skip)]
    pub(crate) facts: FleetFacts,
}

/// What the fleet summary needs besides the host rows: `/hosts` `version-set`, the deploy
/// targets named in the tree, and the roles known (declared under `/roles`, or registered).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FleetFacts {
    /// `/hosts` `version-set`.
    pub(crate) version_set: Value,
    /// Deploy targets of the tree.
    pub(crate) targets: BTreeSet<String>,
    /// Roles known.
    pub(crate) roles: BTreeSet<String>,
}

/// True for a cluster version hosts deploy (not `None`, not `False`).
fn deployable(version: &Value) -> bool {
    !matches!(version, Value::Null | Value::Bool(false))
}

/// A lock node's or lease's identifier: its data as text.
fn ident(node: &ZNode) -> String {
    match node.props.get("string_value") {
        Some(v) => py_str(v),
        None => requester(&node.props),
    }
}

/// The contenders of the kazoo lock at `path` that are not ephemeral (full paths, in order).
fn permanent_contenders(path: &str, lock: &ZNode) -> Vec<String> {
    let mut found: Vec<(i64, String)> = lock
        .children
        .iter()
        .filter(|(_, node)| !node.is_ephemeral())
        .filter_map(|(name, _)| sequence_of(name).map(|seq| (seq, join(path, name))))
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

fn contenders(path: &str, lock: &ZNode, now_ms: i64) -> Option<LockRow> {
    let mut found: Vec<(i64, &String, &ZNode)> = Vec::new();
    for (name, node) in &lock.children {
        if let Some(seq) = sequence_of(name) {
            found.push((seq, name, node));
        } else if let Some(seq) = request_sequence(name) {
            found.push((seq, name, node));
        }
    }
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|(seq, _, _)| *seq);
    let (_, _, first) = found[0];
    Some(LockRow {
        path: path.to_string(),
        holder: Some(ident(first)),
        waiters: found[1..].iter().map(|(_, _, n)| ident(n)).collect(),
        age: Some(age_of(first, now_ms)),
        permanent: permanent_contenders(path, lock),
    })
}

/// Seconds since `node` was created.
fn age_of(node: &ZNode, now_ms: i64) -> f64 {
    ((now_ms - node.ctime) as f64 / 1000.0).max(0.0)
}

/// The semaphore at `path` (`sem`, with its guard lock `guard`), if it has leases or
/// waiters: kazoo counts every child of the semaphore node as a lease.
fn semaphore_row(
    path: &str,
    sem: Option<&ZNode>,
    guard: Option<&ZNode>,
    turnstiles: Option<&ZNode>,
    now_ms: i64,
) -> Option<SemaphoreRow> {
    let mut leases: Vec<(&String, &ZNode)> =
        sem.map(|s| s.children.iter().collect()).unwrap_or_default();
    leases.sort_by_key(|(name, node)| (node.ctime, *name));
    let guard_path = crate::zk::recipe::semaphore::guard_path(path);
    let queue = guard.and_then(|g| contenders(&guard_path, g, now_ms));
    let turnstiles_path = turnstiles_path(path);
    let turns: Vec<_> = turnstiles
        .into_iter()
        .flat_map(|t| &t.children)
        .filter_map(|(name, t)| contenders(&join(&turnstiles_path, name), t, now_ms))
        .collect();
    if leases.is_empty() && queue.is_none() && turns.is_empty() {
        return None;
    }
    let mut permanent: Vec<String> = leases
        .iter()
        .filter(|(_, node)| !node.is_ephemeral())
        .map(|(name, _)| join(path, name))
        .collect();
    let mut waiters = Vec::new();
    if let Some(q) = queue {
        waiters.extend(q.holder);
        waiters.extend(q.waiters);
        permanent.extend(q.permanent);
    }
    // A turnstile's holder queues for the guard (above); its waiters come after.
    for turn in turns {
        waiters.extend(turn.waiters);
        permanent.extend(turn.permanent);
    }
    let max_leases = sem
        .and_then(|s| s.props.get("string_value"))
        .and_then(|v| v.as_str()?.trim().parse::<u64>().ok())
        .map_or(Value::Null, Value::from);
    Some(SemaphoreRow {
        path: path.to_string(),
        max_leases,
        holders: leases
            .iter()
            .map(|(_, node)| LeaseRow {
                holder: ident(node),
                age: age_of(node, now_ms),
            })
            .collect(),
        waiters,
        permanent,
    })
}

/// The semaphores under `/agent-semaphores` that have leases or waiters (the record nodes
/// `PATH-__in-flight__` are the agent's, not shown; the waiters in the turnstiles
/// `PATH-__turnstiles__/<NN>` are shown after the guard's).
async fn read_semaphores(client: &Client) -> Result<Vec<SemaphoreRow>, ZkError> {
    use crate::zk::recipe::semaphore::{GUARD_SUFFIX, RECORDS_SUFFIX};
    let now_ms = (crate::files::now() * 1000.0) as i64;
    let Some(tree) = read_subtree(client, AGENT_SEMAPHORES, &ReadOptions::default()).await? else {
        return Ok(Vec::new());
    };
    let names: BTreeSet<&str> = tree
        .children
        .keys()
        .filter(|n| !n.ends_with(RECORDS_SUFFIX))
        .map(|n| n.strip_suffix(GUARD_SUFFIX).unwrap_or(n))
        .map(|n| n.strip_suffix(TURNSTILES_SUFFIX).unwrap_or(n))
        .collect();
    Ok(names
        .into_iter()
        .filter_map(|name| {
            let sem = tree.children.get(name);
            let guard = tree.children.get(&format!("{name}{GUARD_SUFFIX}"));
            let turnstiles = tree.children.get(&format!("{name}{TURNSTILES_SUFFIX}"));
            semaphore_row(
                &join(AGENT_SEMAPHORES, name),
                sem,
                guard,
                turnstiles,
                now_ms,
            )
        })
        .collect())
}

/// A warning for each lock contender and lease that is not ephemeral.
fn permanent_warnings(locks: &[LockRow], semaphores: &[SemaphoreRow]) -> Vec<String> {
    let mut out = Vec::new();
    for lock in locks {
        for child in &lock.permanent {
            out.push(format!(
                "{child} is a contender of the lock {} that is not ephemeral: no session ends it, so it holds or blocks the lock for ever (delete it)",
                lock.path
            ));
        }
    }
    for sem in semaphores {
        let guard = crate::zk::recipe::semaphore::guard_path(&sem.path);
        let turnstiles = format!("{}/", turnstiles_path(&sem.path));
        for child in &sem.permanent {
            out.push(if child.starts_with(&format!("{guard}/")) {
                format!("{child} is a contender of the guard lock of {} that is not ephemeral: no session ends it, so it holds or blocks every host waiting for a lease for ever (delete it)", sem.path)
            } else if child.starts_with(&turnstiles) {
                format!("{child} is a contender of a turnstile of {} that is not ephemeral: no session ends it, so it holds or blocks the hosts waiting there for ever (delete it)", sem.path)
            } else {
                format!("{child} is a lease of {} that is not ephemeral: no session ends it, so it takes one of the leases for ever (delete it)", sem.path)
            });
        }
    }
    out
}

/// Why the fleet is mixed: the first host node without the `agent` property (the
/// original's agent), if any.
fn mixed_of(hosts: &ZNode) -> Option<String> {
    hosts
        .children
        .iter()
        .find(|(_, node)| !node.props.contains_key(AGENT_PROPERTY))
        .map(|(id, node)| {
            let name = node.props.get("name").map(py_str).unwrap_or_default();
            format!("host {id} ({name}) has no '{AGENT_PROPERTY}' property (the original's agent): every node uses the node lock, max-parallel 1")
        })
}

/// The node locks, role locks and the syncer's lock that have a holder or waiters.
async fn read_locks(client: &Client) -> Result<Vec<LockRow>, ZkError> {
    let now_ms = (crate::files::now() * 1000.0) as i64;
    let mut locks = Vec::new();
    for base in [AGENT_LOCKS, ROLE_LOCKS] {
        if let Some(tree) = read_subtree(client, base, &ReadOptions::default()).await? {
            for (name, lock) in &tree.children {
                if let Some(row) = contenders(&format!("{base}/{name}"), lock, now_ms) {
                    locks.push(row);
                }
            }
        }
    }
    if let Some(lock) = read_subtree(client, HOSTS_LOCK, &ReadOptions::default()).await? {
        if let Some(row) = contenders(HOSTS_LOCK, &lock, now_ms) {
            locks.push(row);
        }
    }
    Ok(locks)
}

/// The children of `path` (none if it does not exist).
async fn list(client: &Client, path: &str) -> Result<BTreeSet<String>, ZkError> {
    match call("list", path, client.list_children(path)).await {
        Ok(children) => Ok(children.into_iter().collect()),
        Err(e) if e.is_no_node() => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// The names under every `deploy` node of the tree (children-only pipelined walk, skipping
/// what the agent's discovery skips, [`SKIPPED_ROOTS`]). Unlike
/// [`crate::zk::index::walk_deploy_nodes`] it does not list the children of the targets
/// themselves (on the benches' tree two thirds of the nodes): only their names are wanted.
async fn deploy_targets(client: &Client) -> Result<BTreeSet<String>, ZkError> {
    let mut targets = BTreeSet::new();
    read_all(
        client,
        vec![Want::Children("/".into())],
        |want, result, queue| {
            let (Want::Children(path), MultiReadResult::Children { children }) = (want, result)
            else {
                return;
            };
            let is_deploy = path.ends_with("/deploy");
            for name in children {
                let child = join(&path, &name);
                if SKIPPED_ROOTS.contains(&child.as_str()) {
                    continue;
                }
                if is_deploy {
                    targets.insert(name);
                } else {
                    queue.push(Want::Children(child));
                }
            }
        },
    )
    .await?;
    Ok(targets)
}

/// True for top-level nodes agents never discover deployments in and whose openness is not a
/// warning: the reserved roots, except the deployment index (agents trust what it says).
fn not_tree(name: &str) -> bool {
    use crate::zk::paths::{is_reserved_root, DEPLOYMENT_INDEX};
    is_reserved_root(name) && DEPLOYMENT_INDEX.strip_prefix('/') != Some(name)
}

/// Warnings about nodes anyone may write (`/hosts`; the root and every top-level node agents
/// discover deployments in, the repository's or not), and whether `/hosts` is protected
/// (nobody but its owner writes its data).
async fn open_acl_warnings(client: &Client) -> Result<(Vec<String>, bool), ZkError> {
    use crate::zk::acl::open_permissions;
    use crate::zk::call;
    use zookeeper_client::Permission;
    let names = |p: Permission| {
        [
            (Permission::WRITE, "write"),
            (Permission::CREATE, "create children"),
            (Permission::DELETE, "delete children"),
            (Permission::ADMIN, "change the ACL"),
        ]
        .iter()
        .filter(|(q, _)| p.has(*q))
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(", ")
    };
    let open_of = |path: String| async move {
        match call("get-acl", &path, client.get_acl(&path)).await {
            Ok((acl, _)) => Ok((path, open_permissions(&acl))),
            Err(e) if e.is_no_node() => Ok((path, Permission::NONE)),
            Err(e) => Err(e),
        }
    };
    let mut warnings = Vec::new();
    let (_, open) = open_of("/hosts".into()).await?;
    // By design everyone may create children of /hosts (registration); nothing else.
    let protected = !open.has(Permission::WRITE);
    if !protected {
        warnings.push(format!(
            "/hosts is writable by anyone ({}): any client can set the cluster version (sync --auth protects it)",
            names(open)
        ));
    }
    let top = crate::zk::call_retrying("list", "/", || client.list_children("/")).await?;
    let mut tree = vec!["/".to_string()];
    tree.extend(top.iter().filter(|n| !not_tree(n)).map(|n| format!("/{n}")));
    let mut open_nodes = Vec::new();
    for path in tree {
        let (path, open) = open_of(path).await?;
        if open != Permission::NONE {
            open_nodes.push(format!("{path} ({})", names(open)));
        }
    }
    if !open_nodes.is_empty() {
        warnings.push(format!(
            "the tree is writable by anyone: {} (sync --auth protects it)",
            open_nodes.join("; ")
        ));
    }
    Ok((warnings, protected))
}

/// One row per host node under `/hosts` (`hosts`), converged when at `version`.
fn host_rows(hosts: &ZNode, version: &Value) -> Vec<HostRow> {
    hosts
        .children
        .iter()
        .map(|(id, node)| {
            let get = |k: &str| node.props.get(k).cloned().unwrap_or(Value::Null);
            // Nobody is at a halted (`None`) or paused (`False`) cluster version, not
            // even a host that never deployed anything (version `None` too).
            let converged = deployable(version) && node.props.get("version") == Some(version);
            HostRow {
                id: id.clone(),
                name: get("name"),
                role: get("role"),
                version: get("version"),
                converged,
                error: get("error"),
                status: get("status"),
                deployed: get(DEPLOYED_AT),
                state: crate::summary::state(converged, &get("error"), &get("status")),
            }
        })
        .collect()
}

impl Overview {
    /// Reads the overview from ZooKeeper.
    pub(crate) async fn read(client: &Client) -> Result<Overview, ZkError> {
        let hosts = read_subtree(
            client,
            HOSTS,
            &ReadOptions {
                include_ephemeral: true,
                skip: &|p| p.matches('/').count() > 2,
            },
        )
        .await?
        .unwrap_or_default();
        let mut cluster = hosts.props.clone();
        crate::zk::halts::effective(&mut cluster, &crate::zk::halts::read_halts(client).await?);
        let version = cluster.get("version").cloned().unwrap_or(Value::Null);
        let (warnings, protected) = open_acl_warnings(client).await?;
        let rows = host_rows(&hosts, &version);
        let mixed_fleet = mixed_of(&hosts);
        let locks = read_locks(client).await?;
        let semaphores = read_semaphores(client).await?;
        let mut warnings = warnings;
        warnings.extend(permanent_warnings(&locks, &semaphores));
        let mut roles = list(client, ROLES).await?;
        roles.extend(
            rows.iter()
                .filter_map(|r: &HostRow| r.role.as_str().map(String::from)),
        );
        let facts = FleetFacts {
            version_set: hosts.props.get(VERSION_SET).cloned().unwrap_or(Value::Null),
            targets: deploy_targets(client).await?,
            roles,
        };
        let nodes = read_nodes(client, &state_version(&cluster)).await?;
        let mut overview = Overview {
            version,
            nodes,
            synced: hosts.props.get("synced").cloned().unwrap_or(Value::Null),
            halt: cluster.get("halt").cloned().unwrap_or(Value::Null),
            pause: if crate::zk::halts::is_paused(&cluster) {
                cluster[crate::zk::halts::PAUSE].clone()
            } else {
                Value::Null
            },
            hosts: rows,
            locks,
            semaphores,
            warnings,
            protected,
            mixed_fleet,
            summary: summarize(
                &Value::Null,
                &Value::Null,
                &[],
                &BTreeSet::new(),
                &BTreeSet::new(),
                0.0,
            ),
            facts,
        };
        overview.select(&Filter::default(), crate::files::now());
        Ok(overview)
    }

    /// Keeps the hosts `filter` matches, and summarises them.
    pub(crate) fn select(&mut self, filter: &Filter, now: f64) {
        fn facts(h: &HostRow) -> HostFacts<'_> {
            HostFacts {
                id: &h.id,
                name: &h.name,
                role: &h.role,
                version: &h.version,
                state: h.state,
                deployed: h.deployed.as_f64(),
            }
        }
        self.hosts.retain(|h| filter.matches(&facts(h)));
        let shown: Vec<HostFacts<'_>> = self.hosts.iter().map(facts).collect();
        // A deploy target of a host the filter hides is not "not registered".
        let targets = if filter.is_empty() {
            self.facts.targets.clone()
        } else {
            BTreeSet::new()
        };
        self.summary = summarize(
            &self.version,
            &self.facts.version_set,
            &shown,
            &targets,
            &self.facts.roles,
            now,
        );
    }

    /// Human-readable text, made to fit [`WIDTH`] columns: long cells are cut (with `…`),
    /// git revisions in the tables are shortened to 12 characters, and a halted cluster shows
    /// who halted it, why, and the exact `zkdeployment resume` commands that end the halt.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let state = match &self.version {
            Value::Null => "HALTED".to_string(),
            Value::Bool(false) => "PAUSED".to_string(),
            v => one_line(&py_str(v)),
        };
        let synced = if self.synced.is_null() {
            "none".to_string()
        } else {
            one_line(&py_str(&self.synced))
        };
        for warning in &self.warnings {
            out.push_str(&wrap(&format!("WARNING: {warning}")));
        }
        out.push_str(&fit(&format!(
            "cluster version: {state}   synced revision: {synced}"
        )));
        out.push('\n');
        let halt = self.halt.as_object();
        if let Some(h) = halt {
            let (who, error) = describe_halt(h);
            out.push_str(&fit(&format!("{who}:")));
            out.push('\n');
            out.push_str(&fit(&format!("  {error}")));
            out.push('\n');
        } else if self.version.is_null() {
            out.push_str("halted (no halt record)\n");
        }
        if let Some(p) = self.pause.as_object() {
            out.push_str(&fit(&format!(
                "{}; syncs keep it, `zkdeployment resume` ends it",
                describe_pause(p)
            )));
            out.push('\n');
        }
        if let Some(why) = &self.mixed_fleet {
            out.push_str(&fit(&format!("mixed fleet: {why}")));
            out.push('\n');
            out.push_str(&format!("  {}\n", crate::agent::rollout::BUDGETS_OFF));
        }
        for node in &self.nodes {
            out.push_str(&self.node_lines(node));
        }
        if !self.nodes.is_empty() {
            out.push_str("  (zkdeployment resume PATH ends a node's halt or pause and clears its failures)\n");
        }
        if self.version.is_null() {
            out.push_str(&self.resume_hint(halt.and_then(|h| h.get("version"))));
        }
        out.push_str(&self.summary.render(crate::files::now()));
        out.push('\n');
        out.push_str(&self.host_table());
        if !self.locks.is_empty() {
            out.push('\n');
            out.push_str(&self.lock_table());
        }
        if !self.semaphores.is_empty() {
            out.push('\n');
            out.push_str(&self.semaphore_table());
        }
        out
    }

    /// The table of semaphores with lease holders or waiters.
    fn semaphore_table(&self) -> String {
        let mut rows = vec![[
            "SEMAPHORE".to_string(),
            "LEASES".into(),
            "HOLDERS (AGE)".into(),
            "WAITERS".into(),
        ]];
        for s in &self.semaphores {
            let holders: Vec<String> = s
                .holders
                .iter()
                .map(|l| format!("{} {}", l.holder, duration(l.age)))
                .collect();
            let max = s.max_leases.as_u64().map_or("?".into(), |k| k.to_string());
            rows.push([
                one_line(&s.path),
                format!("{}/{max}", s.holders.len()),
                one_line(&holders.join(", ")),
                one_line(&s.waiters.join(", ")),
            ]);
        }
        table(&rows)
    }

    /// The table of hosts.
    fn host_table(&self) -> String {
        let cell = |v: &Value| {
            if v.is_null() {
                "-".to_string()
            } else {
                one_line(&py_str(v))
            }
        };
        let mut rows = vec![[
            "HOST".to_string(),
            "NAME".into(),
            "ROLE".into(),
            "VERSION".into(),
            "OK".into(),
            "STATUS".into(),
            "ERROR".into(),
        ]];
        for h in &self.hosts {
            rows.push([
                one_line(&h.id),
                cell(&h.name),
                cell(&h.role),
                short_revision(&cell(&h.version)),
                if h.converged {
                    "yes".into()
                } else {
                    "NO".into()
                },
                cell(&h.status),
                cell(&h.error),
            ]);
        }
        table(&rows)
    }

    /// The table of locks with contenders.
    fn lock_table(&self) -> String {
        let mut rows = vec![[
            "LOCK".to_string(),
            "HOLDER".into(),
            "AGE".into(),
            "WAITERS".into(),
        ]];
        for l in &self.locks {
            rows.push([
                one_line(&l.path),
                l.holder
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_else(|| "-".into()),
                l.age.map(duration).unwrap_or_default(),
                one_line(&l.waiters.join(", ")),
            ]);
        }
        table(&rows)
    }

    /// The lines of a node in the text view: its line, and under it, as for the cluster's
    /// halt, who halted it and the error, each on a line of its own so that neither is cut.
    fn node_lines(&self, node: &NodeRow) -> String {
        let mut out = String::new();
        let halt = node.halt.as_object();
        let mut head = node.clone();
        head.halt = Value::Null;
        out.push_str(&fit(&format!("node {}", head.describe())));
        out.push('\n');
        if let Some(h) = halt {
            let (who, error) = describe_halt(h);
            out.push_str(&fit(&format!("  {who}:")));
            out.push('\n');
            out.push_str(&fit(&format!("    {error}")));
            out.push('\n');
        }
        out
    }

    /// The commands that end a halt: `resume` (the synced revision) when there is one, and
    /// `resume --version V` with the version the halted pass was deploying.
    fn resume_hint(&self, halted_version: Option<&Value>) -> String {
        let mut out = String::from("resume with:\n");
        if !self.synced.is_null() {
            out.push_str(&fit(&format!(
                "  zkdeployment resume   (deploys the synced revision {})",
                short_revision(&one_line(&py_str(&self.synced)))
            )));
            out.push('\n');
        }
        match halted_version.filter(|v| !v.is_null()) {
            Some(v) => {
                let arg = serde_json::to_string(v).unwrap_or_default();
                out.push_str(&fit(&format!(
                    "  zkdeployment resume --version {}   (deploys the halted version again)",
                    shell_words::quote(&arg),
                )));
            }
            None => out.push_str("  zkdeployment resume --version VERSION"),
        }
        out.push('\n');
        if self.protected {
            out.push_str("  (/hosts is protected: add --auth AUTH, the syncer's credentials)\n");
        }
        out
    }
}

/// A node metric: its name, its help text, and its value for a node.
type NodeSeries = (&'static str, &'static str, fn(&NodeRow) -> f64);

/// The node metrics of `status --metrics`: failed and quarantined hosts per node at the
/// current cluster version, node halts and pauses (a sample per node that has any).
pub(crate) fn node_metrics(nodes: &[NodeRow]) -> String {
    let mut out = String::new();
    let label = |path: &str| {
        let v = path
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        format!("{{path=\"{v}\"}}")
    };
    let series: [NodeSeries; 4] = [
        (
            "zkdeployment_fleet_node_failed_hosts",
            "Hosts that failed the application node at the current cluster version.",
            |n| n.failed.len() as f64,
        ),
        (
            "zkdeployment_fleet_node_quarantined_hosts",
            "Failed hosts within the node's failure budget (quarantined for it at this version).",
            |n| n.quarantined as f64,
        ),
        (
            "zkdeployment_fleet_node_halted",
            "1 if the application node is halted (until resume PATH).",
            |n| if n.halt.is_object() { 1.0 } else { 0.0 },
        ),
        (
            "zkdeployment_fleet_node_paused",
            "1 if the application node is paused (until resume PATH).",
            |n| if n.pause.is_object() { 1.0 } else { 0.0 },
        ),
    ];
    for (name, help, value) in series {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        for node in nodes {
            out.push_str(&format!("{name}{} {}\n", label(&node.path), value(node)));
        }
    }
    out
}

/// A halt record (`{host, name, version, error, time}`) in words: `halted 5m ago by NAME
/// (HOST) deploying VERSION`, and its error, each on one line.
pub(crate) fn describe_halt(h: &serde_json::Map<String, Value>) -> (String, String) {
    let field = |k: &str| h.get(k).map(|v| one_line(&py_str(v))).unwrap_or_default();
    let ago = h
        .get("time")
        .and_then(Value::as_f64)
        .map(|t| format!(" {} ago", duration(crate::files::now() - t)))
        .unwrap_or_default();
    (
        format!(
            "halted{ago} by {} ({}) deploying {}",
            field("name"),
            field("host"),
            field("version")
        ),
        field("error"),
    )
}

/// A pause record in words: `paused 5m ago by USER on HOST: REASON`.
pub(crate) fn describe_pause(record: &serde_json::Map<String, Value>) -> String {
    let text = |k: &str| {
        record
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let ago = record
        .get("time")
        .and_then(Value::as_f64)
        .map(|t| format!(" {} ago", duration(crate::files::now() - t)))
        .unwrap_or_default();
    let mut out = format!("paused{ago} by {}", text("user").unwrap_or("?"));
    if let Some(host) = text("host") {
        out.push_str(&format!(" on {host}"));
    }
    if let Some(reason) = text("reason") {
        out.push_str(&format!(": {reason}"));
    }
    out
}

/// The width the text view fits in.
pub(crate) const WIDTH: usize = 120;

/// Control characters (newlines, tabs) as spaces.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A git revision (40 or 64 hex digits) shortened to 12, as `git log --oneline` shows it.
fn short_revision(s: &str) -> String {
    if (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        s[..12].to_string()
    } else {
        s.to_string()
    }
}

/// The most characters of one line of human output: values anyone may write under `/hosts`
/// (names, roles, errors) are cut to it, the cut marked with the length.
pub(crate) const MAX_LINE_CHARS: usize = 500;

/// `s` cut to [`MAX_LINE_CHARS`], the cut marked with `…` and the number of characters.
pub(crate) fn cut_text(s: &str) -> String {
    match s.char_indices().nth(MAX_LINE_CHARS) {
        None => s.to_string(),
        Some((at, _)) => format!("{}… ({} characters)", &s[..at], s.chars().count()),
    }
}

/// Every line of `text` cut by [`cut_text`]: human output never carries a line of
/// megabytes from a value someone wrote.
pub(crate) fn cut_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(1 << 20));
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        out.push_str(&cut_text(body));
        out.push_str(end);
    }
    out
}

/// `s` on lines of at most [`WIDTH`] characters, broken at blanks (continuation lines
/// indented by two), each ending in a newline; a word too long for a line is cut.
fn wrap(s: &str) -> String {
    let s = one_line(&cut_text(s));
    let mut out = String::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let more = if line.is_empty() { 0 } else { 1 } + word.chars().count();
        if !line.trim().is_empty() && line.chars().count() + more > WIDTH {
            out.push_str(&fit(&line));
            out.push('\n');
            line = "  ".into();
        } else if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&fit(&line));
    out.push('\n');
    out
}

/// `s` cut to `width` characters, the cut marked with `…`.
fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A line cut to [`WIDTH`].
fn fit(line: &str) -> String {
    cut(line, WIDTH)
}

/// Seconds as `42s`, `5m`, `3h`, `2d`.
fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Columns separated by two spaces, fitted into [`WIDTH`] by narrowing the widest column
/// (never below its header) until the rows fit.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    let mut least = [0usize; N];
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    if let Some(header) = rows.first() {
        for (i, c) in header.iter().enumerate() {
            least[i] = c.chars().count().max(4);
        }
    }
    let total = |w: &[usize; N]| w.iter().sum::<usize>() + 2 * N.saturating_sub(1);
    while total(&widths) > WIDTH {
        let Some((i, _)) = widths
            .iter()
            .enumerate()
            .filter(|(i, w)| **w > least[*i])
            .max_by_key(|(_, w)| **w)
        else {
            break;
        };
        widths[i] -= 1;
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:<w$}", cut(c, widths[i]), w = widths[i]))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(id: &str, version: Value, status: &str, error: Value) -> HostRow {
        HostRow {
            id: id.into(),
            name: json!(format!("{id}.some-long-domain-name.example.com")),
            role: json!("webserver-frontend"),
            version,
            converged: false,
            error,
            status: json!(status),
            deployed: Value::Null,
            state: crate::summary::DEPLOYING,
        }
    }

    /// A lock and a semaphore with long names and many waiters.
    fn long_lock_rows() -> (Vec<LockRow>, Vec<SemaphoreRow>) {
        let locks = vec![LockRow {
            path: "/agent-locks/acme,some,long,application,path".into(),
            holder: Some("app02.some-long-domain-name.example.com (app02)".into()),
            waiters: vec!["app03.some-long-domain-name.example.com (app03)".into(); 3],
            age: Some(12.0),
            permanent: vec![],
        }];
        let semaphores = vec![SemaphoreRow {
            path: "/agent-semaphores/acme,some,long,application,path".into(),
            max_leases: json!(3),
            holders: vec![
                LeaseRow {
                    holder: "app04.some-long-domain-name.example.com (app04)".into(),
                    age: 75.0,
                };
                3
            ],
            waiters: vec!["app05.some-long-domain-name.example.com (app05)".into(); 3],
            permanent: vec![],
        }];
        (locks, semaphores)
    }

    #[test]
    fn the_text_view_fits_120_columns() {
        let rev = "0123456789abcdef0123456789abcdef01234567";
        let (locks, semaphores) = long_lock_rows();
        let error = format!(
            "Command failed: /opt/some-package/bin/zookeeper-deploy {}",
            "/x".repeat(80)
        );
        let o = Overview {
            version: Value::Null,
            synced: json!(rev),
            halt: json!({"host": "app01", "name": "app01.example.com", "version": rev,
                         "error": error, "time": 0.0}),
            pause: Value::Null,
            nodes: vec![NodeRow::of(NodeState {
                path: "/acme/some/long/application/path".into(),
                halt: Some(json!({"host": "app03", "name": "app03.example.com",
                                  "version": rev, "error": error, "time": 0.0})),
                pause: None,
                failed: vec![
                    json!({"host": "app01", "budget": 1}),
                    json!({"host": "app03", "budget": 1}),
                ],
            })],
            hosts: vec![
                host("app01", json!(rev), "error", json!(error)),
                host(
                    "app02",
                    json!(rev),
                    "deploy /acme/some/long/application/path 3 (webapp 1.4.2-17)",
                    Value::Null,
                ),
            ],
            locks,
            semaphores,
            warnings: vec![
                "/hosts is writable by anyone (write)".into(),
                format!("/agent-locks/{}/x__lock__0000000001 is a contender that is not ephemeral: it blocks the lock for ever (the end)", "a,".repeat(30)),
            ],
            protected: true,
            mixed_fleet: None,
            summary: summarize(
                &Value::Null,
                &Value::Null,
                &[],
                &BTreeSet::new(),
                &BTreeSet::new(),
                0.0,
            ),
            facts: FleetFacts::default(),
        };
        let text = o.render();
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?}\n{text}");
        }
        assert!(text.contains("HALTED"), "{text}");
        assert!(
            text.contains("node /acme/some/long/application/path: halted; 2 failed hosts, budget 1 (app01, app03)\n  halted "),
            "{text}"
        );
        assert!(text.starts_with("WARNING: /hosts is writable"), "{text}");
        // A long warning is wrapped, not cut.
        assert!(
            text.contains("\n  that is not ephemeral: it blocks the lock for ever (the end)\n"),
            "{text}"
        );
        assert!(text.contains("\nSEMAPHORE "), "{text}");
        assert!(text.contains(" 3/3 "), "{text}");
        assert!(text.contains("add --auth AUTH"), "{text}");
        assert!(text.contains("0123456789ab "), "{text}");
        assert!(
            text.contains("zkdeployment resume   (deploys the synced revision"),
            "{text}"
        );
        assert!(
            text.contains(&format!("zkdeployment resume --version '\"{rev}\"'")),
            "{text}"
        );
    }

    #[test]
    fn tables_keep_short_rows_as_they_are() {
        let rows = [["A".to_string(), "BB".into()], ["xyz".into(), "-".into()]];
        assert_eq!(table(&rows), "A    BB\nxyz  -\n");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(short_revision("r1"), "r1");
        assert_eq!(duration(59.6), "60s");
        assert_eq!(duration(3600.0), "60m");
    }

    #[test]
    fn node_rows_count_quarantined_hosts_by_their_budget() {
        let row = NodeRow::of(NodeState {
            path: "/a/\"b\"".into(),
            halt: None,
            pause: Some(json!({"user": "ann", "time": 0.0, "reason": "freeze"})),
            failed: vec![
                json!({"host": "h1", "name": "h1.x", "n": 0, "version": "r1", "error": "e",
                       "time": 1.0, "budget": 2}),
                json!({"host": "h2", "budget": 2}),
                json!({"host": "h3", "budget": 2}),
            ],
        });
        assert_eq!(row.state, "paused");
        assert_eq!(row.quarantined, 2);
        assert_eq!(row.budget, json!(2));
        assert_eq!(
            row.failed[0],
            json!({"host": "h1", "name": "h1.x", "n": 0, "version": "r1", "error": "e", "time": 1.0})
        );
        assert!(row
            .describe()
            .starts_with("/a/\"b\": paused; 3 failed hosts, budget 2 (h1, h2, h3); paused "));
        let text = node_metrics(&[row]);
        assert!(
            text.contains("zkdeployment_fleet_node_failed_hosts{path=\"/a/\\\"b\\\"\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("zkdeployment_fleet_node_quarantined_hosts{path=\"/a/\\\"b\\\"\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("zkdeployment_fleet_node_paused{path=\"/a/\\\"b\\\"\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("zkdeployment_fleet_node_halted{path=\"/a/\\\"b\\\"\"} 0\n"),
            "{text}"
        );
        assert_eq!(node_metrics(&[]).matches("# TYPE").count(), 4);
    }

    #[test]
    fn a_pause_record_reads_as_words() {
        let rec = crate::pause::record("ann", "ops1", 0.0, Some("holiday freeze"));
        let text = describe_pause(rec.as_object().unwrap());
        assert!(text.starts_with("paused "), "{text}");
        assert!(text.ends_with(" by ann on ops1: holiday freeze"), "{text}");
        let rec = crate::pause::record("bob", "", 0.0, None);
        assert!(describe_pause(rec.as_object().unwrap()).ends_with(" by bob"));
    }
}
