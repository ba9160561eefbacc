//! The fleet plan, pure: for every registered host, the plan its agent would make from the
//! candidate tree (the agent's own [`discover_in`] and [`plan`]), against what the host has
//! (its published inventory, or — without one — what the current tree wants there, as if it
//! had converged); then those plans grouped by what changes, each change with its hosts.
//!
//! Each deployment carries the rollout its agent would give it (`max-parallel`, `canary`,
//! health check: [`plan_rollouts`], the agent's own rule) from the candidate tree and the fleet
//! as read ([`fleet_facts`]); whether a package has a health check is known only on the host,
//! so it comes from the host's inventory, and is unknown without one.
//!
//! A step is a *change* unless it is the routine part of every pass: a deploy of an instance
//! the host already has, and the refresh of a git checkout already at its version. Hosts with
//! only routine steps are counted, not listed among the changes: [`FleetPlan::only_changes`]
//! keeps, in every list of hosts, the hosts that change (the counts stay whole); `plan
//! --per-host` skips it and shows every host.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;
use serde_json::Value;

use super::index::TargetIndex;
use crate::agent::discover::{discover_in, resolved_props, Discovered, TreeSource};
use crate::agent::inventory::{Inventory, UNKNOWN_VERSION};
use crate::agent::model::{is_git, Host, Installed, InstalledDeployment, Wanted};
use crate::agent::plan::{plan, Inputs, Plan, Rollout, Step};
use crate::agent::rollout::mixed_reason;
use crate::agent::rollout_rule::{plan_rollouts, FleetFacts};
use crate::tree::rollout::{self as settings, Parallel};
use crate::tree::{Node, Props};

/// A registered host, as read from its host node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Registered {
    /// Who it is (id, name, role).
    pub(crate) host: Host,
    /// Its published inventory: `None` if it has none or one that cannot be read (anyone may
    /// write under `/hosts`: a malformed inventory is no inventory).
    pub(crate) inventory: Option<Inventory>,
    /// True if its host node carries `agent` (written by this agent, not the original's).
    pub(crate) agent: bool,
}

impl Registered {
    /// Whether the host has a health check for `rpm`, as its inventory says (`None`: no
    /// inventory, or one from an agent that did not publish health checks).
    pub(crate) fn health_check(&self, rpm: &str) -> Option<bool> {
        match &self.inventory {
            Some(inv) => inv.health.as_ref().map(|h| h.iter().any(|p| p == rpm)),
            _ => None,
        }
    }
}

/// Why the fleet is mixed (the first registered host, by id, without `agent`), in the words
/// of the agent's [`crate::agent::rollout::mixed_fleet`].
pub(crate) fn mixed_fleet(hosts: &[Registered]) -> Option<String> {
    let mut originals: Vec<&Registered> = hosts.iter().filter(|r| !r.agent).collect();
    originals.sort_by(|a, b| a.host.id.cmp(&b.host.id));
    originals
        .first()
        .map(|r| mixed_reason(&r.host.id, &r.host.name))
}

/// What the rollout depends on beyond the tree, from the candidate and the hosts as read:
/// whether the fleet is mixed, and the deploy targets of each of `app_paths` (children of
/// `<node>/deploy` in the candidate, as the agent counts them in ZooKeeper once it is synced).
pub(crate) fn fleet_facts(
    candidate: &Node,
    app_paths: &BTreeSet<String>,
    hosts: &[Registered],
) -> FleetFacts {
    FleetFacts {
        mixed: mixed_fleet(hosts),
        targets: app_paths
            .iter()
            .map(|path| {
                let deploy = candidate.get(&format!("{path}/deploy"));
                (path.clone(), deploy.map_or(0, |d| d.children.len()))
            })
            .collect(),
    }
}

/// A tree and its index by target.
pub(crate) struct Indexed<'a, S> {
    /// The tree.
    pub(crate) tree: &'a S,
    /// Its deploy nodes by target.
    pub(crate) index: &'a TargetIndex,
}

impl<S: TreeSource> Indexed<'_, S> {
    fn discover(&self, host: &Host) -> Result<Discovered, String> {
        discover_in(self.tree, &self.index.deploy_nodes(host), host).map_err(|e| e.to_string())
    }
}

/// What the fleet plan needs of the current tree.
pub(crate) trait Current {
    /// What a host that converged on the current tree has (for hosts without an inventory).
    fn converged(&self, host: &Host) -> Result<Installed, String>;
    /// An application node's properties, links resolved (`None`: absent, or not resolvable).
    fn properties(&self, path: &str) -> Option<Props>;
}

/// A whole current tree held in memory.
impl<S: TreeSource> Current for Indexed<'_, S> {
    fn converged(&self, host: &Host) -> Result<Installed, String> {
        self.discover(host).map(|found| converged(&found))
    }

    fn properties(&self, path: &str) -> Option<Props> {
        self.tree.props_at(path)?;
        resolved_props(self.tree, path).ok()
    }
}

/// The answers about the current tree, worked out beforehand (from the nodes read for them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Prefetched {
    /// By host id: what it has if converged on the current tree.
    pub(crate) converged: HashMap<String, Result<Installed, String>>,
    /// By application node: its resolved properties, if it exists.
    pub(crate) properties: HashMap<String, Props>,
}

impl Current for Prefetched {
    fn converged(&self, host: &Host) -> Result<Installed, String> {
        self.converged
            .get(&host.id)
            .cloned()
            .unwrap_or_else(|| Err("not read".into()))
    }

    fn properties(&self, path: &str) -> Option<Props> {
        self.properties.get(path).cloned()
    }
}

/// What one host would do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HostPlan {
    /// Host id.
    pub(crate) id: String,
    /// Host name.
    pub(crate) name: String,
    /// Role, if any.
    pub(crate) role: Option<String>,
    /// True if planned from its published inventory; false if planned as if it had converged
    /// on the current tree.
    pub(crate) inventory: bool,
    /// The steps of its next pass (empty if it fails).
    pub(crate) steps: Vec<Step>,
    /// The same steps as `deploy --dry-run` prints them (and `last-pass.json` names them).
    pub(crate) lines: Vec<String>,
    /// Why its pass would fail before changing anything, if it would.
    pub(crate) error: Option<String>,
    /// True if a step is more than the routine re-run.
    pub(crate) changes: bool,
}

/// One property of an application node that changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PropertyChange {
    /// Property name.
    pub(crate) key: String,
    /// Its value in the current tree (`null` if absent).
    pub(crate) old: Value,
    /// Its value in the candidate tree (`null` if absent).
    pub(crate) new: Value,
}

/// Hosts grouped under one change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Group<K> {
    /// What changes.
    #[serde(flatten)]
    pub(crate) what: K,
    /// How many hosts it concerns.
    pub(crate) count: usize,
    /// Ids of the hosts it concerns, sorted (only those that change, unless per host).
    pub(crate) hosts: Vec<String>,
}

impl<K> Group<K> {
    fn of(what: K, hosts: Vec<String>) -> Self {
        Group {
            what,
            count: hosts.len(),
            hosts,
        }
    }
}

/// How many hosts are in each class (whether or not they are listed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    /// Hosts with changes (or whose pass would fail).
    pub(crate) changed: usize,
    /// Hosts whose pass only re-runs what they have.
    pub(crate) routine: usize,
    /// Hosts with nothing to do at all.
    pub(crate) idle: usize,
    /// Hosts planned without an inventory.
    pub(crate) without_inventory: usize,
}

/// A package change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct PackageChange {
    /// `install`, `upgrade`, `downgrade`, `change` (versions not comparable) or `remove`.
    pub(crate) change: &'static str,
    /// The package.
    pub(crate) rpm: String,
    /// Version installed now (`null`: none, or unknown).
    pub(crate) from: Option<String>,
    /// Version wanted (`null`: any, or removed).
    pub(crate) to: Option<String>,
}

/// An instance added or removed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct InstanceChange {
    /// `add` or `remove`.
    pub(crate) change: &'static str,
    /// Application node.
    pub(crate) path: String,
    /// Instance.
    pub(crate) n: u32,
    /// Package whose deploy script runs.
    pub(crate) rpm: String,
}

/// An application node whose properties change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PropertiesChange {
    /// Application node.
    pub(crate) path: String,
    /// The properties that change (links resolved), by name.
    pub(crate) changes: Vec<PropertyChange>,
}

/// How an application node's deployments roll out across the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NodeRollout {
    /// Application node.
    pub(crate) path: String,
    /// `max-parallel` as the candidate sets it (`null`: not set): a count, or `'P%'`.
    pub(crate) max_parallel: Value,
    /// The deploy targets a percentage counts (`null` unless `max-parallel` or
    /// `max-failures` is one).
    pub(crate) targets: Option<usize>,
    /// The effective K: how many hosts may deploy the node at once.
    pub(crate) parallel: u32,
    /// How many hosts deploy a new version one at a time first.
    pub(crate) canary: u32,
    /// `health-deadline`, seconds.
    pub(crate) health_deadline: f64,
    /// Whether a health check runs after the deploy script: as the inventories of the hosts
    /// that deploy it say, or `null` when not known (a host without an inventory that says,
    /// a package whose version changes, or hosts that differ).
    pub(crate) health: Option<bool>,
    /// True if a deployment of it changes (an instance added, its package's version, or its
    /// properties): then it re-runs under this rollout.
    pub(crate) changes: bool,
    /// The effective `max-failures` F (`null` in a mixed fleet: every failure halts the
    /// cluster).
    pub(crate) max_failures: Option<u32>,
    /// `max-failures` as the candidate sets it (`null`: not set): a count, or `'P%'`.
    pub(crate) max_failures_in_tree: Value,
    /// The budget the candidate sets, parsed (the fleet may turn it off).
    #[serde(skip)]
    pub(crate) budget_in_tree: settings::Budget,
    /// `on-failure`: `halt-cluster` or `halt-node`.
    pub(crate) on_failure: &'static str,
}

impl NodeRollout {
    /// True if anything about it differs from a plain node (one host at a time, no canary,
    /// no known health check).
    pub(crate) fn is_default(&self) -> bool {
        self.parallel == 1
            && self.canary == 0
            && self.max_parallel.is_null()
            && self.health != Some(true)
            && !self.budget().budgeted()
            && !self.sets_budget()
    }

    /// True if the candidate sets a failure budget for the node (`max-failures` above 0, or
    /// `on-failure = 'halt-node'`), whether or not the fleet lets it apply.
    pub(crate) fn sets_budget(&self) -> bool {
        !matches!(
            self.budget_in_tree,
            settings::Budget::Count(0) | settings::Budget::Percent(0)
        ) || self.on_failure == settings::OnFailure::HaltNode.as_str()
    }

    /// The budget part of the agent's rollout.
    fn budget(&self) -> Rollout {
        Rollout {
            max_failures: self.max_failures,
            on_failure: match self.on_failure {
                "halt-node" => settings::OnFailure::HaltNode,
                _ => settings::OnFailure::HaltCluster,
            },
            ..Rollout::default()
        }
    }

    /// `max-parallel K, canary C, health check`, as `deploy --dry-run` says it, with the
    /// health check `unknown` when it is not known.
    pub(crate) fn describe(&self) -> String {
        let mut how = Rollout {
            parallel: self.parallel,
            canary: self.canary,
            health: self.health == Some(true),
            ..self.budget()
        }
        .describe();
        if self.health.is_none() {
            how.push_str(", health check unknown");
        }
        how
    }
}

/// Any other step that changes a host (role controllers, `/etc` removals), by its text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct OtherChange {
    /// The step, as `deploy --dry-run` prints it.
    pub(crate) step: String,
}

/// A failure shared by hosts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct FailureGroup {
    /// The error.
    pub(crate) error: String,
}

/// The whole fleet plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct FleetPlan {
    /// Registered hosts planned.
    pub(crate) registered: usize,
    /// Package installs, upgrades, downgrades and removals.
    pub(crate) packages: Vec<Group<PackageChange>>,
    /// Instances added and removed.
    pub(crate) instances: Vec<Group<InstanceChange>>,
    /// Application nodes whose properties change, with the hosts that deploy them (and so
    /// re-run them with the new settings).
    pub(crate) properties: Vec<Group<PropertiesChange>>,
    /// Role controller changes and `/etc/<app>` removals.
    pub(crate) other: Vec<Group<OtherChange>>,
    /// Hosts whose pass would fail before changing anything, by error.
    pub(crate) failures: Vec<Group<FailureGroup>>,
    /// Why every node uses the node lock with K = 1 (a registered host without `agent`), if
    /// it does.
    pub(crate) mixed_fleet: Option<String>,
    /// The rollout of every application node deployed, with the hosts that deploy it.
    pub(crate) rollouts: Vec<Group<NodeRollout>>,
    /// How many hosts change, only re-run, have nothing to do, have no inventory.
    pub(crate) counts: Counts,
    /// Hosts with changes.
    pub(crate) changed: Vec<String>,
    /// Hosts whose pass only re-runs what they have (empty unless per host).
    pub(crate) routine: Vec<String>,
    /// Hosts with nothing to do at all (empty unless per host).
    pub(crate) idle: Vec<String>,
    /// Hosts planned without an inventory (as if converged on the current tree): those that
    /// change, unless per host.
    pub(crate) without_inventory: Vec<String>,
    /// The hosts' plans, by id: those that change, unless per host.
    pub(crate) hosts: Vec<HostPlan>,
}

impl FleetPlan {
    /// True if anything changes anywhere (the exit code 10).
    pub(crate) fn has_changes(&self) -> bool {
        !self.changed.is_empty() || !self.properties.is_empty()
    }

    /// True if some host's pass would fail (the exit code 1).
    pub(crate) fn has_failures(&self) -> bool {
        !self.failures.is_empty()
    }

    /// Keeps, in every list of hosts, only the hosts that change (CONTRACT 12: hosts with
    /// nothing but the routine re-run are counted, not listed); counts are left whole.
    pub(crate) fn only_changes(&mut self) {
        let changed: BTreeSet<&String> = self.changed.iter().collect();
        self.hosts.retain(|h| changed.contains(&h.id));
        self.without_inventory.retain(|id| changed.contains(id));
        for group in &mut self.rollouts {
            group.hosts.retain(|id| changed.contains(id));
        }
        self.routine = Vec::new();
        self.idle = Vec::new();
    }
}

/// What a host that converged on the tree has: every wanted instance, package (at the wanted
/// version; "any version" reads as unknown), `/etc/<app>` directory and role controller.
pub fn converged(found: &Discovered) -> Installed {
    let mut installed = Installed::default();
    for d in &found.deployments {
        installed.deployments.push(InstalledDeployment {
            app: d.app.clone(),
            rpm: d.rpm.clone(),
            path: d.path.clone(),
            n: d.n,
        });
        let version = match &d.version {
            Wanted::Exact(v) => v.clone(),
            Wanted::Any => UNKNOWN_VERSION.to_string(),
        };
        installed.versions.insert(d.rpm.clone(), Some(version));
    }
    installed.deployments.sort();
    installed.deployments.dedup();
    installed.packages = installed.versions.keys().cloned().collect();
    let apps: BTreeSet<String> = found.deployments.iter().map(|d| d.app.clone()).collect();
    installed.app_dirs = apps.into_iter().collect();
    installed.controller = found
        .controller
        .as_ref()
        .map(|(rc, v)| (rc.clone(), Some(v.clone())));
    installed
}

/// Plans one host: what it has (inventory, or converged on `current`), what `candidate`
/// wants, and the steps between.
pub(crate) fn plan_host<N: TreeSource>(
    current: &dyn Current,
    candidate: &Indexed<'_, N>,
    registered: &Registered,
    facts: &FleetFacts,
) -> (HostPlan, Installed) {
    let host = &registered.host;
    let mut out = HostPlan {
        id: host.id.clone(),
        name: host.name.clone(),
        role: host.role.clone(),
        inventory: false,
        steps: Vec::new(),
        lines: Vec::new(),
        error: None,
        changes: false,
    };
    let installed = match &registered.inventory {
        Some(inv) => {
            out.inventory = true;
            Ok(inv.installed())
        }
        None => current
            .converged(host)
            .map_err(|e| format!("no inventory, and the current tree fails for it: {e}")),
    };
    let installed = match installed {
        Ok(i) => i,
        Err(e) => {
            out.error = Some(e);
            return (out, Installed::default());
        }
    };
    let steps = candidate.discover(host).and_then(|found| {
        // The `after` hook is the host's configuration, which the tree does not hold.
        plan(Inputs {
            wanted: &found.deployments,
            controller: found.controller.as_ref(),
            role: host.role.as_deref(),
            installed: &installed,
            after: None,
        })
        .map(|mut p| {
            // The agent's rollout rule, a health check as the inventory says (else none).
            let rollout = plan_rollouts(&found, &p.steps, facts, |rpm| {
                registered.health_check(rpm) == Some(true)
            });
            p.apply_rollout(&rollout.nodes, rollout.mixed);
            let Plan { steps, .. } = p;
            steps
        })
        .map_err(|e| e.to_string())
    });
    match steps {
        Ok(steps) => {
            out.changes = steps.iter().any(|s| !routine(s, &installed));
            out.lines = steps.iter().map(ToString::to_string).collect();
            out.steps = steps;
        }
        Err(e) => out.error = Some(e),
    }
    (out, installed)
}

/// True for the routine part of a pass: re-running a deployment the host has, refreshing a
/// checkout already at its version, the role controller's scripts around the deployments,
/// recording the version.
fn routine(step: &Step, installed: &Installed) -> bool {
    match step {
        Step::StartingDeployments { .. }
        | Step::EndingDeployments { .. }
        | Step::RecordVersion
        | Step::After { .. } => true,
        Step::Deploy { app, path, n, .. } => installed
            .deployments
            .iter()
            .any(|d| d.app == *app && d.path == *path && d.n == *n),
        Step::Install {
            version, installed, ..
        } => is_git(version.as_deref()) && installed == version,
        _ => false,
    }
}

/// A node's rollout as the first host that deploys it has it (every host has the same: the
/// settings are the candidate's, the facts the fleet's), with `max-parallel` as written.
fn node_rollout<N: TreeSource>(
    tree: &N,
    path: &str,
    rollout: &Rollout,
    health: Option<bool>,
    facts: &FleetFacts,
) -> NodeRollout {
    let props = resolved_props(tree, path).unwrap_or_default();
    let as_written = |name: &str| props.get(name).cloned().unwrap_or(Value::Null);
    let written = settings::parse(path, |k| props.get(k).cloned()).unwrap_or_default();
    let percent = matches!(written.max_parallel, Parallel::Percent(_))
        || matches!(written.max_failures, settings::Budget::Percent(_));
    NodeRollout {
        path: path.to_string(),
        max_parallel: as_written(settings::MAX_PARALLEL),
        max_failures_in_tree: as_written(settings::MAX_FAILURES),
        budget_in_tree: written.max_failures,
        targets: percent.then(|| facts.targets.get(path).copied().unwrap_or(0)),
        parallel: rollout.parallel,
        canary: rollout.canary,
        health_deadline: rollout.health_deadline_ms as f64 / 1000.0,
        health,
        changes: false,
        max_failures: rollout.max_failures,
        on_failure: rollout.on_failure.as_str(),
    }
}

/// Compares two RPM versions the way `rpmvercmp` does: runs of digits numerically, runs of
/// letters alphabetically, a digit run newer than a letter run, more segments newer.
pub(crate) fn compare_versions(a: &str, b: &str) -> Ordering {
    fn segments(s: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut start = None;
        let mut digit = false;
        for (i, c) in s.char_indices() {
            let alnum = c.is_ascii_alphanumeric();
            match start {
                Some(st) if alnum && c.is_ascii_digit() == digit => {
                    let _ = st;
                }
                Some(st) => {
                    out.push(&s[st..i]);
                    start = alnum.then_some(i);
                    digit = c.is_ascii_digit();
                }
                None if alnum => {
                    start = Some(i);
                    digit = c.is_ascii_digit();
                }
                None => {}
            }
        }
        if let Some(st) = start {
            out.push(&s[st..]);
        }
        out
    }
    let (sa, sb) = (segments(a), segments(b));
    for (x, y) in sa.iter().zip(&sb) {
        let xd = x.as_bytes()[0].is_ascii_digit();
        let yd = y.as_bytes()[0].is_ascii_digit();
        let ord = match (xd, yd) {
            (true, true) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    sa.len().cmp(&sb.len())
}

fn package_change(rpm: &str, from: Option<&String>, to: Option<&String>) -> PackageChange {
    let change = match (from, to) {
        (None, _) => "install",
        (Some(f), Some(t)) if f != UNKNOWN_VERSION && !is_git(Some(f)) && !is_git(Some(t)) => {
            match compare_versions(t, f) {
                Ordering::Greater => "upgrade",
                Ordering::Less => "downgrade",
                Ordering::Equal => "change",
            }
        }
        _ => "change",
    };
    PackageChange {
        change,
        rpm: rpm.to_string(),
        from: from.cloned(),
        to: to.cloned(),
    }
}

/// The properties that differ between two resolved property maps.
pub(crate) fn property_changes(old: &Props, new: &Props) -> Vec<PropertyChange> {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| PropertyChange {
            key: k.clone(),
            old: old.get(k).cloned().unwrap_or(Value::Null),
            new: new.get(k).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

fn groups<K: Ord>(map: BTreeMap<K, BTreeSet<String>>) -> Vec<Group<K>> {
    map.into_iter()
        .map(|(what, hosts)| Group::of(what, hosts.into_iter().collect()))
        .collect()
}

/// The changes of the hosts planned so far, each with the hosts it concerns.
#[derive(Default)]
struct Changes {
    packages: BTreeMap<PackageChange, BTreeSet<String>>,
    instances: BTreeMap<InstanceChange, BTreeSet<String>>,
    other: BTreeMap<OtherChange, BTreeSet<String>>,
    failures: BTreeMap<FailureGroup, BTreeSet<String>>,
    /// Application node → the hosts deploying it.
    deployers: BTreeMap<String, BTreeSet<String>>,
    rollouts: BTreeMap<String, NodeRollout>,
}

impl Changes {
    /// Adds the changes of one host's plan.
    fn add_host<N: TreeSource>(
        &mut self,
        hp: &HostPlan,
        installed: &Installed,
        registered: &Registered,
        candidate: &Indexed<'_, N>,
        facts: &FleetFacts,
    ) {
        if let Some(e) = &hp.error {
            self.failures
                .entry(FailureGroup { error: e.clone() })
                .or_default()
                .insert(hp.id.clone());
        }
        // Packages whose version changes: whether they have a health check is not known yet.
        let reinstalled: BTreeSet<&str> = hp
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Install { rpm, .. } if !routine(s, installed) => Some(rpm.as_str()),
                _ => None,
            })
            .collect();
        for step in &hp.steps {
            let id = hp.id.clone();
            match step {
                Step::Install {
                    rpm,
                    version,
                    installed: have,
                } if !routine(step, installed) => {
                    let change = package_change(rpm, have.as_ref(), version.as_ref());
                    self.packages.entry(change).or_default().insert(id);
                }
                Step::Uninstall { rpm } => {
                    let change = PackageChange {
                        change: "remove",
                        rpm: rpm.clone(),
                        from: installed.versions.get(rpm).cloned().flatten(),
                        to: None,
                    };
                    self.packages.entry(change).or_default().insert(id);
                }
                Step::Deploy { rpm, .. } => {
                    let reinstalled = reinstalled.contains(rpm.as_str());
                    let health = registered.health_check(rpm).filter(|_| !reinstalled);
                    self.add_deploy(step, id, installed, reinstalled, health, candidate, facts);
                }
                Step::Undeploy { rpm, path, n, .. } => {
                    let change = InstanceChange {
                        change: "remove",
                        path: path.clone(),
                        n: *n,
                        rpm: rpm.clone(),
                    };
                    self.instances.entry(change).or_default().insert(id);
                }
                _ if !routine(step, installed) => {
                    let change = OtherChange {
                        step: step.to_string(),
                    };
                    self.other.entry(change).or_default().insert(id);
                }
                _ => {}
            }
        }
    }

    /// Adds a host's deploy step (`step`, a [`Step::Deploy`]): the node's deployers, its
    /// rollout (its health check kept only while every host has the same), and an added
    /// instance unless the step is routine.
    #[allow(clippy::too_many_arguments)]
    fn add_deploy<N: TreeSource>(
        &mut self,
        step: &Step,
        id: String,
        installed: &Installed,
        reinstalled: bool,
        health: Option<bool>,
        candidate: &Indexed<'_, N>,
        facts: &FleetFacts,
    ) {
        let Step::Deploy {
            rpm,
            path,
            n,
            rollout,
            ..
        } = step
        else {
            return;
        };
        self.deployers
            .entry(path.clone())
            .or_default()
            .insert(id.clone());
        let node = self
            .rollouts
            .entry(path.clone())
            .or_insert_with(|| node_rollout(candidate.tree, path, rollout, health, facts));
        if node.health != health {
            node.health = None;
        }
        node.changes |= reinstalled || !routine(step, installed);
        if !routine(step, installed) {
            let change = InstanceChange {
                change: "add",
                path: path.clone(),
                n: *n,
                rpm: rpm.clone(),
            };
            self.instances.entry(change).or_default().insert(id);
        }
    }
}

/// Properties: each application node deployed in the candidate that exists in the current
/// tree, compared once (links resolved on each side), with the hosts deploying it.
fn property_groups<N: TreeSource>(
    current: &dyn Current,
    candidate: &Indexed<'_, N>,
    deployers: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Group<PropertiesChange>> {
    let mut out = Vec::new();
    for (path, hosts) in deployers {
        let changes = match (
            current.properties(path),
            resolved_props(candidate.tree, path),
        ) {
            (Some(old), Ok(new)) => property_changes(&old, &new),
            _ => Vec::new(),
        };
        if !changes.is_empty() {
            let what = PropertiesChange {
                path: path.clone(),
                changes,
            };
            out.push(Group::of(what, hosts.iter().cloned().collect()));
        }
    }
    out
}

/// Sorts the planned hosts into changed, routine and idle, and counts them.
fn sort_hosts(out: &mut FleetPlan) {
    // A host re-running a deployment with new settings has changes too.
    let resettled: BTreeSet<&String> = out.properties.iter().flat_map(|g| &g.hosts).collect();
    for hp in &mut out.hosts {
        if !hp.changes && resettled.contains(&hp.id) {
            hp.changes = true;
        }
        if hp.error.is_some() || hp.changes {
            out.changed.push(hp.id.clone());
        } else if hp.steps.is_empty() {
            out.idle.push(hp.id.clone());
        } else {
            out.routine.push(hp.id.clone());
        }
    }
    out.counts = Counts {
        changed: out.changed.len(),
        routine: out.routine.len(),
        idle: out.idle.len(),
        without_inventory: out.without_inventory.len(),
    };
}

/// Plans every registered host and groups the changes.
pub(crate) fn plan_fleet<N: TreeSource>(
    current: &dyn Current,
    candidate: &Indexed<'_, N>,
    hosts: &[Registered],
    facts: &FleetFacts,
) -> FleetPlan {
    let mut changes = Changes::default();
    let mut out = FleetPlan {
        registered: hosts.len(),
        packages: Vec::new(),
        instances: Vec::new(),
        properties: Vec::new(),
        other: Vec::new(),
        failures: Vec::new(),
        mixed_fleet: facts.mixed.clone(),
        rollouts: Vec::new(),
        counts: Counts::default(),
        changed: Vec::new(),
        routine: Vec::new(),
        idle: Vec::new(),
        without_inventory: Vec::new(),
        hosts: Vec::new(),
    };
    for registered in hosts {
        let (hp, installed) = plan_host(current, candidate, registered, facts);
        if !hp.inventory {
            out.without_inventory.push(hp.id.clone());
        }
        changes.add_host(&hp, &installed, registered, candidate, facts);
        out.hosts.push(hp);
    }
    out.properties = property_groups(current, candidate, &changes.deployers);
    for group in &out.properties {
        if let Some(node) = changes.rollouts.get_mut(&group.what.path) {
            node.changes = true;
        }
    }
    let deployers = &changes.deployers;
    out.rollouts = changes
        .rollouts
        .into_iter()
        .map(|(path, what)| {
            let hosts = deployers.get(&path);
            Group::of(
                what,
                hosts
                    .map(|h| h.iter().cloned().collect())
                    .unwrap_or_default(),
            )
        })
        .collect();
    sort_hosts(&mut out);
    out.packages = groups(changes.packages);
    let rank = |c: &str| {
        ["install", "upgrade", "downgrade", "change", "remove"]
            .iter()
            .position(|k| *k == c)
            .unwrap_or(usize::MAX)
    };
    out.packages
        .sort_by(|a, b| (rank(a.what.change), &a.what).cmp(&(rank(b.what.change), &b.what)));
    out.instances = groups(changes.instances);
    out.other = groups(changes.other);
    out.failures = groups(changes.failures);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_versions_like_rpm() {
        use Ordering::*;
        assert_eq!(compare_versions("1.10", "1.9"), Greater);
        assert_eq!(compare_versions("1.0", "1.0"), Equal);
        assert_eq!(compare_versions("1.0", "1.0.1"), Less);
        assert_eq!(compare_versions("2.0-3", "2.0-12"), Less);
        assert_eq!(compare_versions("1.0a", "1.0"), Greater);
        assert_eq!(compare_versions("1.01", "1.1"), Equal);
        assert_eq!(compare_versions("1.b", "1.1"), Less);
    }

    fn tree(text: &str) -> Node {
        crate::tree::parse::parse(text).unwrap()
    }

    fn registered(id: &str, agent: bool) -> Registered {
        Registered {
            host: Host {
                id: id.into(),
                name: format!("{id}.example.com"),
                role: None,
            },
            inventory: None,
            agent,
        }
    }

    /// `/acme/a` (foo) on h1–h5 with `settings`, `/acme/b` (bar) on h1.
    fn fleet_tree(settings: &str) -> Node {
        tree(&fleet_text(settings))
    }

    fn fleet_text(settings: &str) -> String {
        format!(
            "/acme\n  /a : foo\n    version = '1.0'\n{settings}    /deploy\n      /h1\n      /h2\n      /h3\n      /h4\n      /h5\n  /b : bar\n    version = '1.0'\n    /deploy\n      /h1\n"
        )
    }

    #[test]
    fn the_rollout_core_is_the_agents_rule() {
        let tree =
            &fleet_tree("    max-parallel = '30%'\n    canary = 1\n    health-deadline = 60\n");
        let host = Host {
            id: "h1".into(),
            name: "h1".into(),
            role: None,
        };
        let index = TargetIndex::build(tree);
        let found = discover_in(tree, &index.deploy_nodes(&host), &host).unwrap();
        let steps = plan(Inputs {
            wanted: &found.deployments,
            controller: None,
            role: None,
            installed: &Installed::default(),
            after: None,
        })
        .unwrap()
        .steps;
        let facts = FleetFacts {
            mixed: None,
            targets: BTreeMap::from([("/acme/a".to_string(), 5)]),
        };
        let health = |rpm: &str| rpm == "foo";
        let got = plan_rollouts(&found, &steps, &facts, health);
        assert_eq!(got.mixed, None);
        let a = &got.nodes["/acme/a"];
        // 30 % of 5 is 1.5: rounded up, 2.
        assert_eq!((a.parallel, a.canary, a.health), (2, 1, true));
        assert_eq!(a.health_deadline_ms, 60_000);
        assert_eq!(got.nodes["/acme/b"], Rollout::default());
        // A percentage of nothing counted is still at least 1.
        let none = plan_rollouts(&found, &steps, &FleetFacts::default(), health);
        assert_eq!(none.nodes["/acme/a"].parallel, 1);
        // A mixed fleet: K = 1 everywhere (the canary setting is kept, and unused at K = 1).
        let mixed = FleetFacts {
            mixed: Some("why".into()),
            ..facts.clone()
        };
        let got = plan_rollouts(&found, &steps, &mixed, health);
        assert_eq!(got.mixed.as_deref(), Some("why"));
        assert!(got.nodes.values().all(|r| r.parallel == 1), "{got:?}");
        // No node wants K > 1: the mixed fleet does not matter (the agent does not look).
        let plain: Vec<Step> = steps
            .iter()
            .filter(|s| !matches!(s, Step::Deploy { path, .. } if path == "/acme/a"))
            .cloned()
            .collect();
        assert_eq!(plan_rollouts(&found, &plain, &mixed, health).mixed, None);
    }

    #[test]
    fn the_fleet_plan_carries_each_nodes_rollout() {
        let current = fleet_tree("");
        let candidate = fleet_tree("    max-parallel = '30%'\n    canary = 1\n");
        let (ci, ni) = (TargetIndex::build(&current), TargetIndex::build(&candidate));
        let current = Indexed {
            tree: &current,
            index: &ci,
        };
        let candidate_idx = Indexed {
            tree: &candidate,
            index: &ni,
        };
        let mut hosts: Vec<Registered> = (1..=5)
            .map(|i| registered(&format!("h{i}"), true))
            .collect();
        let paths: BTreeSet<String> = ["/acme/a".to_string(), "/acme/b".to_string()].into();
        let facts = fleet_facts(&candidate, &paths, &hosts);
        assert_eq!(facts.targets["/acme/a"], 5);
        assert_eq!(facts.mixed, None);
        let out = plan_fleet(&current, &candidate_idx, &hosts, &facts);
        let a = &out.rollouts[0];
        assert_eq!(a.hosts.len(), 5);
        assert_eq!(
            (
                a.what.path.as_str(),
                a.what.parallel,
                a.what.canary,
                a.what.targets
            ),
            ("/acme/a", 2, 1, Some(5))
        );
        assert_eq!(a.what.max_parallel, Value::from("30%"));
        // No inventory: whether a health check runs is not known.
        assert_eq!(a.what.health, None);
        assert!(a.what.changes);
        let b = &out.rollouts[1].what;
        assert!(b.is_default() && !b.changes, "{b:?}");
        let deploys: Vec<u32> = out.hosts[0]
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Deploy { rollout, .. } => Some(rollout.parallel),
                _ => None,
            })
            .collect();
        assert_eq!(deploys, [2, 1]);
        let text = super::super::render::render(&out, "files", &Value::from("r1"), false);
        assert!(
            text.contains("/acme/a [max-parallel 2, canary 1, health check unknown]"),
            "{text}"
        );
        assert!(
            text.contains("max-parallel '30%' of 5 deploy targets"),
            "{text}"
        );
        assert!(!text.contains("/acme/b ["), "{text}");
        assert!(!text.contains("mixed fleet"), "{text}");

        // The original's agent registered a host: every node K = 1, and the plan says why.
        hosts.push(registered("h0", false));
        let facts = fleet_facts(&candidate, &paths, &hosts);
        let out = plan_fleet(&current, &candidate_idx, &hosts, &facts);
        let why = "host h0 (h0.example.com) has no 'agent' property (the original's agent): every node uses the node lock, max-parallel 1";
        assert_eq!(out.mixed_fleet.as_deref(), Some(why));
        assert!(out.rollouts.iter().all(|g| g.what.parallel == 1));
        let text = super::super::render::render(&out, "files", &Value::from("r1"), false);
        assert!(text.contains(&format!("mixed fleet: {why}")), "{text}");
        assert!(
            text.contains("max-parallel '30%' in the tree: 1 while the fleet is mixed"),
            "{text}"
        );
    }

    #[test]
    fn hosts_that_do_not_change_are_counted_not_listed() {
        // /acme/b (on h1 only) gets a new version; h2–h5 only re-run /acme/a; h6 deploys
        // nothing (and only records the version).
        let current = fleet_tree("");
        let candidate =
            tree(&fleet_text("").replace("bar\n    version = '1.0'", "bar\n    version = '2.0'"));
        let (ci, ni) = (TargetIndex::build(&current), TargetIndex::build(&candidate));
        let cur = Indexed {
            tree: &current,
            index: &ci,
        };
        let cand = Indexed {
            tree: &candidate,
            index: &ni,
        };
        let hosts: Vec<Registered> = (1..=6)
            .map(|i| registered(&format!("h{i}"), true))
            .collect();
        let paths: BTreeSet<String> = ["/acme/a".to_string(), "/acme/b".to_string()].into();
        let facts = fleet_facts(&candidate, &paths, &hosts);
        let full = plan_fleet(&cur, &cand, &hosts, &facts);
        let counts = Counts {
            changed: 1,
            routine: 5,
            idle: 0,
            without_inventory: 6,
        };
        assert_eq!(full.counts, counts);
        assert_eq!(full.hosts.len(), 6);
        assert_eq!(full.routine, ["h2", "h3", "h4", "h5", "h6"]);
        let mut plan = full.clone();
        plan.only_changes();
        assert_eq!(plan.counts, counts);
        assert_eq!(plan.changed, ["h1"]);
        assert!(plan.routine.is_empty() && plan.idle.is_empty(), "{plan:?}");
        assert_eq!(plan.without_inventory, ["h1"]);
        let ids: Vec<&str> = plan.hosts.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["h1"]);
        let a = &plan.rollouts[0];
        assert_eq!((a.what.path.as_str(), a.count), ("/acme/a", 5));
        assert_eq!(a.hosts, ["h1"]);
        assert_eq!(plan.packages[0].count, 1);
        assert_eq!(plan.packages[0].hosts, ["h1"]);
        // Text: counted, the unchanged hosts never named.
        let text = super::super::render::render(&plan, "files", &Value::from("r1"), false);
        assert!(
            text.contains(
                "hosts that change: 1; that only re-run what they have: 5; with nothing to do: 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "planned as if converged on the current tree: 6 hosts, 1 that change: h1"
            ),
            "{text}"
        );
        assert!(!text.contains("h2"), "{text}");
        // Per host: every host and its steps.
        let text = super::super::render::render(&full, "files", &Value::from("r1"), true);
        assert!(
            text.contains("\n  h2 (re-runs what it has)\n      deploy /acme/a 0 (foo 1.0)\n"),
            "{text}"
        );
        assert!(text.contains("\n  h6 (re-runs what it has)\n"), "{text}");
        assert!(text.contains("\n  h1 (changes)\n"), "{text}");
    }

    #[test]
    fn package_changes_are_named() {
        let s = |v: &str| Some(v.to_string());
        let c = |f: Option<String>, t: Option<String>| {
            package_change("p", f.as_ref(), t.as_ref()).change
        };
        assert_eq!(c(None, s("1")), "install");
        assert_eq!(c(s("1"), s("2")), "upgrade");
        assert_eq!(c(s("2"), s("1")), "downgrade");
        assert_eq!(c(s("?"), s("1")), "change");
        assert_eq!(c(s("1"), None), "change");
    }
}
