//! Discovery: which deployments the tree wants on this host.
//!
//! The impure half ([`read_snapshot_with`]) finds the deploy nodes named after this host (id,
//! name or role) as `<app>/deploy/<target>`: from the deployment index
//! ([`crate::zk::index`]) when it certainly describes the tree at the version the pass acts
//! on, else by walking the tree with pipelined multi-reads, listing children only (no data),
//! skipping the infrastructure subtrees. Either way it then reads the data
//! of those nodes, their application nodes, and whatever their links lead to. The pure half
//! ([`discover`]) turns that [`Snapshot`] into [`Deployment`]s, detecting every error that can
//! be known before acting (bad or missing type, missing or non-string version, names that are
//! not plain, a host-based deployment on a host with a role, conflicting deployments, bad `n`,
//! bad links). Inconsistent versions are checked by the planner.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use zookeeper_client::MultiReadResult;

use super::model::{app_name, check_plain_name, is_versioned_name, Deployment, Host, Wanted};
use crate::tree::literal::{py_str, repr_str};
use crate::tree::{Props, PLINK_SUFFIX};
use crate::zk::index::{read_index, walk_deploy_nodes, Guess, IndexAnswer};
use crate::zk::links::{property, LinkError, NodeSource};
use crate::zk::multiread::{read_all, Want};
use crate::zk::paths::role_path;
use crate::zk::{decode, Client, ZkError};

/// What discovery read: the matching deploy nodes, and the properties of every node read
/// (deploy nodes, application nodes, link targets). Paths known not to exist are remembered so
/// that link resolution can tell "absent" from "not read yet".
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Deploy nodes `<app>/deploy/<target>` whose target is this host's id, name or role, in
    /// path order.
    pub deploy_nodes: Vec<String>,
    /// Properties of the nodes read.
    pub nodes: HashMap<String, Props>,
    /// Ephemeral nodes among those read.
    pub(crate) ephemeral: HashSet<String>,
    /// Paths read and found missing.
    pub(crate) absent: HashSet<String>,
    /// Nodes visited by the walk (0 when the index answered).
    pub walked: usize,
    /// Nodes whose data or children were read (index nodes included).
    pub reads: usize,
    /// Where the deploy nodes came from (`None` for a snapshot made by hand).
    pub source: Option<Source>,
    /// The index generation that named the deploy nodes, when the index did.
    pub generation: Option<String>,
    /// The cluster version the index described, when the index named the deploy nodes.
    pub version: Option<Value>,
}

impl Snapshot {
    /// Keeps what a read of `path` found (the node's properties, or that it is missing).
    fn keep(&mut self, path: String, result: MultiReadResult) {
        keep_read(
            &mut self.nodes,
            &mut self.ephemeral,
            &mut self.absent,
            path,
            result,
        );
    }

    /// What the next pass may read with the index's root ([`Guess`]): the entries of this
    /// snapshot's generation and of the one after it, and every node this snapshot read
    /// (found or missing).
    pub fn next_guess(&self) -> Guess {
        let mut nodes: Vec<String> = self.nodes.keys().chain(&self.absent).cloned().collect();
        nodes.sort();
        Guess::after(self.generation.as_deref(), nodes)
    }

    /// The `discovery` field of reports.
    pub(crate) fn report(&self) -> DiscoveryReport {
        DiscoveryReport {
            source: self.source.unwrap_or(Source::Walk),
            reads: self.reads,
        }
    }
}

/// The tree as discovery reads it: node properties by path (links may lead anywhere), and
/// which nodes are ephemeral (never deployments). A [`Snapshot`] read from ZooKeeper is one;
/// so is a whole tree held in memory (`crate::fleet` plans every host from one).
pub trait TreeSource: NodeSource {
    /// True if the node at `path` is ephemeral.
    fn is_ephemeral(&self, path: &str) -> bool;
}

/// A tree parsed from text has no ephemeral nodes.
impl TreeSource for crate::tree::Node {
    fn is_ephemeral(&self, _path: &str) -> bool {
        false
    }
}

/// A subtree read from ZooKeeper knows its ephemeral nodes.
impl TreeSource for crate::zk::snapshot::ZNode {
    fn is_ephemeral(&self, path: &str) -> bool {
        self.get(path).is_some_and(|n| n.is_ephemeral())
    }
}

/// A [`NodeSource`] over a snapshot that records the paths it was asked for but has not read.
struct Recording<'a> {
    snap: &'a Snapshot,
    misses: RefCell<Vec<String>>,
}

impl NodeSource for Recording<'_> {
    fn props_at(&self, path: &str) -> Option<&Props> {
        let found = self.snap.nodes.get(path);
        if found.is_none() && !self.snap.absent.contains(path) {
            self.misses.borrow_mut().push(path.to_string());
        }
        found
    }
}

impl TreeSource for Recording<'_> {
    fn is_ephemeral(&self, path: &str) -> bool {
        self.snap.ephemeral.contains(path)
    }
}

/// What the tree wants on this host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovered {
    /// Deployments in path order, instances in order.
    pub deployments: Vec<Deployment>,
    /// The properties of each application node, property links resolved, as read for this
    /// pass (what the deploy script sees through `ZKDEPLOYMENT_PROPERTIES`).
    pub(crate) properties: BTreeMap<String, Props>,
    /// The role controller wanted (`/roles/<role>`: package and version), if the host has a
    /// role and the node exists.
    pub controller: Option<(String, String)>,
}

/// Why discovery failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DiscoverError {
    /// A problem in the tree, with the original's message where it had one.
    #[error("{0}")]
    Tree(String),
    /// Nodes that must be read before discovery can finish (internal to [`discover_with_mode`]).
    #[error("nodes not read: {}", .0.join(", "))]
    Unread(Vec<String>),
}

fn tree_err(message: impl Into<String>) -> DiscoverError {
    DiscoverError::Tree(message.into())
}

/// Pure discovery over a snapshot.
pub(crate) fn discover(snap: &Snapshot, host: &Host) -> Result<Discovered, DiscoverError> {
    let src = Recording {
        snap,
        misses: RefCell::new(Vec::new()),
    };
    let result = discover_in(&src, &snap.deploy_nodes, host);
    let misses = src.misses.into_inner();
    if !misses.is_empty() {
        return Err(DiscoverError::Unread(misses));
    }
    result
}

/// Pure discovery over any tree source, given the deploy nodes named after this host (its id,
/// name or role; in path order, as the walk or an index by target finds them).
pub fn discover_in<S: TreeSource>(
    src: &S,
    deploy_nodes: &[String],
    host: &Host,
) -> Result<Discovered, DiscoverError> {
    let mut out = Discovered::default();
    let mut seen_apps: HashMap<String, String> = HashMap::new();
    for deploy_path in deploy_nodes {
        if src.is_ephemeral(deploy_path) || src.props_at(deploy_path).is_none() {
            continue;
        }
        let (rest, target) = deploy_path.rsplit_once('/').expect("absolute path");
        let app_path = rest.strip_suffix("/deploy").expect("deploy node");
        if app_path.is_empty() {
            continue;
        }
        match &host.role {
            Some(role) if target == role => {}
            Some(role) => {
                return Err(tree_err(format!(
                "Found a host-based deployment at {deploy_path} but the host has a role, {role}."
            )))
            }
            None if target == host.id || target == host.name => {}
            None => continue,
        }
        if let Some(other) = seen_apps.insert(app_path.to_string(), target.to_string()) {
            let (a, b) = if other == host.id {
                (target.to_string(), other)
            } else {
                (other, target.to_string())
            };
            return Err(tree_err(format!(
                "Conflicting deployments for {app_path}. Can't deploy to {a} and {b}."
            )));
        }
        let count = instances(src, deploy_path)?;
        let (rpm, subtype, version) = package_of(src, app_path)?;
        let app = app_name(&rpm).to_string();
        check_plain_name("application", &app)
            .map_err(|e| tree_err(format!("{e} at {app_path}")))?;
        let props = resolved_props(src, app_path)?;
        crate::tree::rollout::parse(app_path, |k| props.get(k).cloned())
            .map_err(|e| tree_err(e.to_string()))?;
        out.properties.insert(app_path.to_string(), props);
        for n in 0..count {
            out.deployments.push(Deployment {
                path: app_path.to_string(),
                n,
                rpm: rpm.clone(),
                app: app.clone(),
                subtype: subtype.clone(),
                version: version.clone(),
            });
        }
    }
    out.controller = controller(src, host)?;
    Ok(out)
}

/// The package of the application node at `app_path`: from its `type` (`RPM` or
/// `RPM SUBTYPE`) and `version` (optional for a versioned package name).
fn package_of<S: TreeSource>(
    src: &S,
    app_path: &str,
) -> Result<(String, Option<String>, Wanted), DiscoverError> {
    let link = |e: LinkError| tree_err(format!("{app_path}: {e}"));
    let kind = match property(src, app_path, "type").map_err(link)? {
        Some(Value::String(t)) => t,
        Some(other) => {
            return Err(tree_err(format!(
                "Invalid node type at {app_path}: {}",
                repr_bad(&other)
            )))
        }
        None => return Err(tree_err(format!("No type for {app_path}"))),
    };
    let words: Vec<&str> = kind.split_whitespace().collect();
    let (rpm, subtype) = match words.as_slice() {
        [rpm] => (rpm.to_string(), None),
        [rpm, sub] => (rpm.to_string(), Some(sub.to_string())),
        _ => return Err(tree_err(format!("Invalid node type: {}", repr_str(&kind)))),
    };
    check_plain_name("package", &rpm).map_err(|e| tree_err(format!("{e} at {app_path}")))?;
    let version = match property(src, app_path, "version").map_err(link)? {
        Some(Value::String(v)) if !v.trim().is_empty() && !v.chars().any(char::is_control) => {
            Wanted::Exact(v)
        }
        Some(Value::String(v)) => {
            return Err(tree_err(format!(
                "Invalid version for {app_path}: {}",
                repr_str(&v)
            )))
        }
        Some(other) => {
            return Err(tree_err(format!(
                "Version of {app_path} is not a string: {}",
                repr_bad(&other)
            )))
        }
        None if is_versioned_name(&rpm) => Wanted::Any,
        None => return Err(tree_err(format!("No version found for {app_path}"))),
    };
    Ok((rpm, subtype, version))
}

fn repr_bad(v: &Value) -> String {
    crate::tree::literal::repr(v)
}

/// The role controller of the host's role: `/roles/<role>` type (the whole type: the
/// package) and `version`.
fn controller<S: TreeSource>(
    src: &S,
    host: &Host,
) -> Result<Option<(String, String)>, DiscoverError> {
    let Some(role) = &host.role else {
        return Ok(None);
    };
    let path = role_path(role);
    if src.props_at(&path).is_none() {
        return Ok(None);
    }
    let link = |e: LinkError| tree_err(format!("{path}: {e}"));
    let rpm = match property(src, &path, "type").map_err(link)? {
        Some(Value::String(t)) => t.trim().to_string(),
        Some(other) => {
            return Err(tree_err(format!(
                "Invalid node type at {path}: {}",
                repr_bad(&other)
            )))
        }
        None => return Err(tree_err(format!("No type for {path}"))),
    };
    check_plain_name("role controller package", &rpm)
        .map_err(|e| tree_err(format!("{e} at {path}")))?;
    match property(src, &path, "version").map_err(link)? {
        Some(Value::String(v)) if !v.trim().is_empty() => Ok(Some((rpm, v))),
        Some(other) => Err(tree_err(format!(
            "Invalid version for {path}: {}",
            repr_bad(&other)
        ))),
        None => Err(tree_err(format!("No version for {path}"))),
    }
}

/// The number of instances of a deploy node (`n`, default 1).
fn instances<S: TreeSource>(src: &S, deploy_path: &str) -> Result<u32, DiscoverError> {
    let n = property(src, deploy_path, "n").map_err(|e| tree_err(format!("{deploy_path}: {e}")))?;
    match n {
        None => Ok(1),
        Some(v) => instance_count(&v)
            .ok_or_else(|| tree_err(format!("Invalid n for {deploy_path}: {}", py_str(&v)))),
    }
}

/// A valid `n`: an integer from 0 to 10000 (not a boolean, string, fraction or null); the
/// agent and the tree lint (`tree check`, `sync`) share this rule.
pub(crate) fn instance_count(v: &Value) -> Option<u32> {
    match v {
        Value::Number(num) => num.as_u64().filter(|v| *v <= 10_000).map(|v| v as u32),
        _ => None,
    }
}

/// An application node's properties with property links replaced by their values (what the
/// deploy script sees through `ZKDEPLOYMENT_PROPERTIES`).
pub(crate) fn resolved_props<S: TreeSource>(src: &S, path: &str) -> Result<Props, DiscoverError> {
    let props = src.props_at(path).cloned().unwrap_or_default();
    let mut out = Props::new();
    for (key, value) in &props {
        match key.strip_suffix(PLINK_SUFFIX) {
            Some(name) if !props.contains_key(name) => {
                let v = property(src, path, name).map_err(|e| tree_err(format!("{path}: {e}")))?;
                out.insert(name.to_string(), v.unwrap_or(Value::Null));
            }
            Some(_) => {}
            None => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(out)
}

/// Walks the tree for deploy nodes named after this host.
pub(crate) async fn find_deploy_nodes(
    client: &Client,
    host: &Host,
) -> Result<(Vec<String>, usize), ZkError> {
    let targets: HashSet<String> = host.targets().into_iter().map(String::from).collect();
    walk_deploy_nodes(client, &|name| targets.contains(name)).await
}

/// Keeps what a read of `path` found: its properties in `nodes` (and its path in `ephemeral`
/// if it is one), or its path in `absent`.
pub(crate) fn keep_read(
    nodes: &mut HashMap<String, Props>,
    ephemeral: &mut HashSet<String>,
    absent: &mut HashSet<String>,
    path: String,
    result: MultiReadResult,
) {
    match result {
        MultiReadResult::Data { data, stat } => {
            if stat.ephemeral_owner != 0 {
                ephemeral.insert(path.clone());
            }
            nodes.insert(path, decode(&data));
        }
        _ => {
            absent.insert(path);
        }
    }
}

/// Reads the data of `paths` into the snapshot.
async fn read_nodes(
    client: &Client,
    snap: &mut Snapshot,
    paths: Vec<String>,
) -> Result<(), ZkError> {
    let queue: Vec<Want> = paths
        .into_iter()
        .filter(|p| !snap.nodes.contains_key(p) && !snap.absent.contains(p))
        .map(Want::Data)
        .collect();
    snap.reads += queue.len();
    read_all(client, queue, |want, result, _| {
        let Want::Data(path) = want else { return };
        snap.keep(path, result);
    })
    .await
}

/// Where discovery found the deploy nodes, and how many nodes it read (data or children).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DiscoveryReport {
    /// `index` or `walk`.
    pub(crate) source: Source,
    /// Nodes whose data or children were read.
    pub(crate) reads: usize,
}

/// How the deploy nodes were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// From `/deployment-index`.
    Index,
    /// By walking the tree.
    Walk,
}

/// How to find the deploy nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode<'a> {
    /// Use the index when it certainly describes the tree at this cluster version (the
    /// version the pass acts on), else walk.
    Index(&'a Value),
    /// Always walk (`deploy --walk`).
    Walk,
}

/// Reads what discovery needs: the deploy nodes (from the index or the walk, as `mode` says),
/// then the data of the deploy and application nodes.
pub async fn read_snapshot_with(
    client: &Client,
    host: &Host,
    mode: Mode<'_>,
) -> Result<Snapshot, ZkError> {
    read_snapshot_guessing(client, host, mode, &Guess::default()).await
}

/// [`read_snapshot_with`], reading with the index's root what `guess` names (a snapshot's
/// [`Snapshot::next_guess`]). The nodes read ahead are used when they are every node the
/// index's answer needs read: then the whole snapshot is the one multi-read's, taken at the
/// point where the index was proven to describe the version; else they are read again.
pub async fn read_snapshot_guessing(
    client: &Client,
    host: &Host,
    mode: Mode<'_>,
    guess: &Guess,
) -> Result<Snapshot, ZkError> {
    let index = match mode {
        Mode::Index(version) => Some(Some(version)),
        Mode::Walk => None,
    };
    let snap = read_snapshot_from(client, host, index, true, guess).await?;
    Ok(snap.expect("a snapshot that may walk"))
}

/// [`read_snapshot_guessing`]: from the index when `index` is given (`Some(None)`: at the
/// version `/hosts` holds when the index is read, which the snapshot records); when the
/// index cannot answer, by the walk if `walk`, else `None`.
async fn read_snapshot_from(
    client: &Client,
    host: &Host,
    index: Option<Option<&Value>>,
    walk: bool,
    guess: &Guess,
) -> Result<Option<Snapshot>, ZkError> {
    let mut from_index = None;
    let mut reads = 0;
    let mut generation = None;
    let mut version = None;
    let mut ahead = Vec::new();
    if let Some(acting_on) = index {
        let read = read_index(client, &host.targets(), acting_on, guess).await?;
        reads += read.reads;
        match read.answer {
            IndexAnswer::Paths(paths) => {
                from_index = Some(paths);
                generation = read.generation;
                version = read.version;
                ahead = read.ahead;
            }
            IndexAnswer::Unusable(why) if walk => tracing::info!("walking the tree: {why}"),
            IndexAnswer::Unusable(_) => return Ok(None),
        }
    }
    let source = if from_index.is_some() {
        Source::Index
    } else {
        Source::Walk
    };
    let (deploy_nodes, walked) = match from_index {
        Some(paths) => (paths, 0),
        None => find_deploy_nodes(client, host).await?,
    };
    let mut snap = Snapshot {
        walked,
        reads: reads + walked,
        source: Some(source),
        generation,
        version,
        ..Snapshot::default()
    };
    // The root too: resolving a link climbs to it, so reading it now saves a round.
    let mut wanted: Vec<String> = vec!["/".to_string()];
    for d in &deploy_nodes {
        wanted.push(d.clone());
        let app = d.rsplit_once('/').map(|(a, _)| a).unwrap_or("/");
        let app = app.strip_suffix("/deploy").unwrap_or(app);
        if !app.is_empty() {
            wanted.push(app.to_string());
        }
    }
    if let Some(role) = &host.role {
        wanted.push(role_path(role));
    }
    snap.deploy_nodes = deploy_nodes;
    if wanted.iter().all(|w| ahead.iter().any(|(p, _)| p == w)) {
        for (path, result) in ahead {
            snap.keep(path, result);
        }
    }
    read_nodes(client, &mut snap, wanted).await?;
    Ok(Some(snap))
}

/// Most rounds of link-target reads before giving up (a chain of links longer than this is
/// treated as an error).
const MAX_ROUNDS: usize = 64;

/// Reads the snapshot and discovers, reading link targets as they are needed, finding the
/// deploy nodes as `mode` says.
pub async fn discover_with_mode(
    client: &Client,
    host: &Host,
    mode: Mode<'_>,
) -> Result<(Discovered, Snapshot), DiscoverFailure> {
    discover_guessing(client, host, mode, &Guess::default()).await
}

/// [`discover_with_mode`], reading ahead what `guess` names ([`read_snapshot_guessing`]).
pub async fn discover_guessing(
    client: &Client,
    host: &Host,
    mode: Mode<'_>,
    guess: &Guess,
) -> Result<(Discovered, Snapshot), DiscoverFailure> {
    let snap = read_snapshot_guessing(client, host, mode, guess).await?;
    discover_reading(client, host, snap).await
}

/// Discovery ahead of a pass, from the index at the version `/hosts` holds when it is read
/// (the snapshot's [`Snapshot::version`]), with what `guess` names: `None` when the index
/// cannot answer (the pass then discovers as always). A daemon woken by a change of `/hosts`
/// sends it with its read of the cluster version, in the same round trip; the pass uses it
/// when it acts on the version the snapshot describes.
pub async fn discover_ahead(
    client: &Client,
    host: &Host,
    guess: &Guess,
) -> Result<Option<(Discovered, Snapshot)>, DiscoverFailure> {
    match read_snapshot_from(client, host, Some(None), false, guess).await? {
        Some(snap) => discover_reading(client, host, snap).await.map(Some),
        None => Ok(None),
    }
}

/// Discovers on `snap`, reading link targets as they are needed.
async fn discover_reading(
    client: &Client,
    host: &Host,
    mut snap: Snapshot,
) -> Result<(Discovered, Snapshot), DiscoverFailure> {
    let mut last = Vec::new();
    for _ in 0..MAX_ROUNDS {
        match discover(&snap, host) {
            Err(DiscoverError::Unread(paths)) => {
                last.clone_from(&paths);
                read_nodes(client, &mut snap, paths).await?
            }
            Ok(found) => return Ok((found, snap)),
            Err(e) => return Err(DiscoverFailure::Tree(e.to_string())),
        }
    }
    Err(DiscoverFailure::Tree(format!(
        "links lead too far (more than {MAX_ROUNDS} hops of reads); the last links read led to {}",
        last.join(", ")
    )))
}

/// Discovery failed: the tree is wrong, or ZooKeeper failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverFailure {
    /// The tree is wrong (the pass fails before changing anything).
    #[error("{0}")]
    Tree(String),
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Discovery on `tree` (zc.zk text) for host `h1` (`web1.example.com`, role `role`) over
    /// `deploy_nodes`: its deployments as `path n rpm version`, or its error.
    fn found(tree: &str, role: Option<&str>, deploy_nodes: &[&str]) -> Result<Vec<String>, String> {
        let tree = crate::tree::parse::parse(tree).unwrap();
        let host = Host {
            id: "h1".into(),
            name: "web1.example.com".into(),
            role: role.map(Into::into),
        };
        let nodes: Vec<String> = deploy_nodes.iter().map(|s| s.to_string()).collect();
        match discover_in(&tree, &nodes, &host) {
            Ok(found) => Ok(found
                .deployments
                .iter()
                .map(|d| format!("{} {} {} {}", d.path, d.n, d.rpm, d.version))
                .collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// (tree, role, deploy nodes, deployments or the error)
    type Case<'a> = (
        String,
        Option<&'a str>,
        &'a [&'a str],
        Result<Vec<&'a str>, &'a str>,
    );

    #[test]
    fn deployments_follow_the_deploy_nodes_named_after_the_host() {
        let app = |props: &str| format!("/acme\n  /a : foo\n{props}    /deploy\n      /h1\n");
        // (tree, role, deploy nodes, deployments or the error)
        let cases: Vec<Case> = vec![
            (app("    version = '1.0'\n"), None, &["/acme/a/deploy/h1"], Ok(vec!["/acme/a 0 foo 1.0"])),
            (
                "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n        n = 2\n".into(),
                None,
                &["/acme/a/deploy/h1"],
                Ok(vec!["/acme/a 0 foo 1.0", "/acme/a 1 foo 1.0"]),
            ),
            (
                "/acme\n  /a : foo-1.2\n    /deploy\n      /web1.example.com\n".into(),
                None,
                &["/acme/a/deploy/web1.example.com"],
                Ok(vec!["/acme/a 0 foo-1.2 *"]),
            ),
            // A deploy node named after another host is not this host's.
            (app("    version = '1.0'\n"), None, &["/acme/a/deploy/h2"], Ok(vec![])),
            (app(""), None, &["/acme/a/deploy/h1"], Err("No version found for /acme/a")),
            (
                app("    version = 1\n"),
                None,
                &["/acme/a/deploy/h1"],
                Err("Version of /acme/a is not a string: 1"),
            ),
            (
                "/acme\n  /a\n    version = '1.0'\n    /deploy\n      /h1\n".into(),
                None,
                &["/acme/a/deploy/h1"],
                Err("No type for /acme/a"),
            ),
            (
                app("    version = '1.0'\n"),
                Some("web"),
                &["/acme/a/deploy/h1"],
                Err("Found a host-based deployment at /acme/a/deploy/h1 but the host has a role, web."),
            ),
            (
                "/acme\n  /a : foo\n    version = '1.0'\n    /deploy\n      /h1\n      /web1.example.com\n".into(),
                None,
                &["/acme/a/deploy/h1", "/acme/a/deploy/web1.example.com"],
                Err("Conflicting deployments for /acme/a. Can't deploy to web1.example.com and h1."),
            ),
        ];
        for (tree, role, nodes, wanted) in cases {
            let got = found(&tree, role, nodes);
            let wanted = wanted
                .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .map_err(str::to_string);
            assert_eq!(got, wanted, "{tree}");
        }
    }

    #[test]
    fn a_bad_rollout_property_is_an_error_known_before_acting() {
        for bad in [
            "max-parallel = 0",
            "max-parallel = 'abc'",
            "max-parallel = '150%'",
        ] {
            let tree = format!(
                "/acme\n  /a : foo\n    version = '1.0'\n    {bad}\n    /deploy\n      /h1\n"
            );
            let got = found(&tree, None, &["/acme/a/deploy/h1"]);
            assert!(got.is_err(), "{bad}: {got:?}");
        }
    }
}
