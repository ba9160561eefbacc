//! The plan of a pass: a pure function of what the tree wants and what the host has, giving
//! every action the pass takes, in the order it takes them. The executor walks this value
//! (`src/agent/execute.rs`), `deploy --dry-run` prints it, and `last-pass.json` records one
//! entry per step run. Order (docs/design.md, "A pass"):
//!
//! 1. the role controller brought to what `/roles/<role>` wants (removed, installed, changed);
//! 2. undeployment of instances no longer wanted;
//! 3. with a role controller: `starting-deployments`, entering the role lock first;
//! 4. package installs (and checkout updates);
//! 5. deployments, each under the lock it takes (its node lock, or the role lock);
//! 6. with a role controller: `ending-deployments`, leaving the role lock after;
//! 7. uninstall of packages no longer used, removal of `/etc/<app>` directories no longer used;
//! 8. recording the version on the host node and in `host_version`;
//! 9. the `after` hook, if configured.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use crate::tree::rollout::OnFailure;

use super::model::{is_git, Deployment, Installed, Wanted};
use crate::tree::literal::repr_str;
use crate::zk::paths::{node_lock_path, role_lock_path, ROLES};

/// One step of a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub(crate) enum Step {
    /// Bring the role controller to what `/roles/<role>` wants: remove another installed
    /// controller, install or change this one.
    RoleController {
        /// The controller package wanted (`null`: none).
        rpm: Option<String>,
        /// Its version.
        version: Option<String>,
        /// The installed version of `rpm`, if any.
        installed: Option<String>,
        /// An installed controller to remove first.
        remove: Option<String>,
    },
    /// Enter the role lock (`/role-locks/<role>`), then run the controller's
    /// `starting-deployments /roles/<role>`.
    StartingDeployments {
        /// The role controller package.
        rpm: String,
        /// The role.
        role: String,
    },
    /// Run `zookeeper-deploy -u PATH N` of `rpm` and remove the instance's markers.
    Undeploy {
        /// Package whose script undeploys.
        rpm: String,
        /// Application name.
        app: String,
        /// Application node path.
        path: String,
        /// Instance.
        n: u32,
    },
    /// Install (or change the version of) a package.
    Install {
        /// Package.
        rpm: String,
        /// Version wanted (`null` = any).
        version: Option<String>,
        /// Version installed now, if any.
        installed: Option<String>,
    },
    /// Run `zookeeper-deploy [-r SUBTYPE] PATH N` under the node lock.
    Deploy {
        /// Package.
        rpm: String,
        /// Application name.
        app: String,
        /// Application node path.
        path: String,
        /// Instance.
        n: u32,
        /// Version deployed (`null` = any).
        version: Option<String>,
        /// Subtype (`-r`).
        subtype: Option<String>,
        /// The lock the deployment runs under.
        lock: Lock,
        /// How the node rolls out across the fleet (`parallel`, `canary`, `health`), known
        /// once the fleet is read ([`Plan::apply_rollout`]).
        #[serde(flatten)]
        rollout: Rollout,
    },
    /// Run the controller's `ending-deployments /roles/<role>`, then leave the role lock.
    EndingDeployments {
        /// The role controller package.
        rpm: String,
        /// The role.
        role: String,
    },
    /// Remove a package no longer used.
    Uninstall {
        /// Package.
        rpm: String,
    },
    /// Remove `/etc/<app>` (stale markers included) of an application no longer used.
    RemoveEtc {
        /// Application name.
        app: String,
    },
    /// Record the cluster version as this host's (host node `version`, `host_version`).
    RecordVersion,
    /// Run the configured `after` hook.
    After {
        /// Its argument vector.
        command: Vec<String>,
    },
}

/// The lock a deployment runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Lock {
    /// The node lock (`/agent-locks/<name>`, kazoo's recipe), taken for this step alone; a
    /// busy node is passed over and taken later.
    Node(String),
    /// The role lock (`/role-locks/<role>`), held from `starting-deployments` to
    /// `ending-deployments`.
    Role(String),
}

/// How a deployment rolls out across the fleet (see `agent::rollout`): with `parallel` K > 1
/// and a node lock, the deployment takes a lease of the node's semaphore
/// (`/agent-semaphores/<name>`) instead of the node lock, except while fewer than `canary`
/// hosts have deployed the node's version (those go one at a time under the node lock); with
/// `health`, the package's health check runs after the deploy script, the lock or lease still
/// held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Rollout {
    /// The effective K: how many hosts may deploy the node at once.
    pub(crate) parallel: u32,
    /// How many hosts deploy a new version one at a time before the others start.
    pub(crate) canary: u32,
    /// Whether the package has a health check (as installed when the plan was made; the
    /// executor looks again after installing).
    pub(crate) health: bool,
    /// `health-deadline`, milliseconds.
    #[serde(skip)]
    pub(crate) health_deadline_ms: u64,
    /// The effective `max-failures` F (CONTRACT 15); `None` in a mixed fleet, where every
    /// failure halts the cluster.
    #[serde(rename = "max-failures")]
    pub(crate) max_failures: Option<u32>,
    /// `on-failure`: what a failure beyond the budget stops.
    #[serde(rename = "on-failure", serialize_with = "on_failure_text")]
    pub(crate) on_failure: OnFailure,
}

fn on_failure_text<S: serde::Serializer>(v: &OnFailure, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v.as_str())
}

impl Default for Rollout {
    fn default() -> Rollout {
        Rollout {
            parallel: 1,
            canary: 0,
            health: false,
            health_deadline_ms: (crate::tree::rollout::DEFAULT_HEALTH_DEADLINE * 1000.0) as u64,
            max_failures: Some(0),
            on_failure: OnFailure::HaltCluster,
        }
    }
}

impl Rollout {
    /// `[max-parallel K, canary C, health check]`, as `deploy --dry-run` prints it.
    pub(crate) fn describe(&self) -> String {
        let mut how = format!("max-parallel {}", self.parallel);
        if self.canary > 0 {
            how.push_str(&format!(", canary {}", self.canary));
        }
        if self.health {
            how.push_str(", health check");
        }
        if self.budgeted() {
            let f = self.max_failures.unwrap_or(0);
            how.push_str(&format!(
                ", max-failures {f}, on-failure {}",
                self.on_failure.as_str()
            ));
        }
        how
    }

    /// Whether a failure of the node goes through its budget (CONTRACT 15): `max-failures`
    /// above 0 or `on-failure = 'halt-node'`, outside a mixed fleet. Otherwise a failure
    /// halts the cluster, as the original's.
    pub(crate) fn budgeted(&self) -> bool {
        match self.max_failures {
            None => false,
            Some(f) => f > 0 || self.on_failure == OnFailure::HaltNode,
        }
    }

    /// The health check's deadline.
    pub(crate) fn health_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.health_deadline_ms)
    }
}

impl Step {
    /// The step's action name (`deploy`, `install`, …): its `action` key in the JSON of
    /// `deploy --dry-run --json` and `last-pass.json`, taken from the serde tag so the two
    /// can never disagree.
    pub(crate) fn action(&self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m
                .get("action")
                .and_then(|a| a.as_str())
                .unwrap_or_default()
                .to_string(),
            _ => String::new(),
        }
    }

    /// True for the steps that change the host's software or deployments (the others run the
    /// role controller's scripts, record the version, run the after hook). A plan without
    /// any is "nothing to do" for `deploy --dry-run`; the metrics count these steps.
    pub(crate) fn changes_host(&self) -> bool {
        !matches!(
            self,
            Step::StartingDeployments { .. }
                | Step::EndingDeployments { .. }
                | Step::RecordVersion
                | Step::After { .. }
        )
    }

    /// True for a deployment under its node lock (the executor runs a run of these together,
    /// passing over busy nodes).
    pub(crate) fn takes_node_lock(&self) -> bool {
        matches!(
            self,
            Step::Deploy {
                lock: Lock::Node(_),
                ..
            }
        )
    }

    /// What the status file says while the step runs (`None`: left as it is).
    pub(crate) fn status_text(&self) -> Option<String> {
        match self {
            Step::StartingDeployments { .. } => Some("role start script".into()),
            Step::EndingDeployments { .. } => Some("role end script".into()),
            Step::RecordVersion | Step::After { .. } => None,
            _ => Some(self.to_string()),
        }
    }

    /// True for the steps before which the executor checks that it may go on (a stop
    /// request, a halted or paused cluster). The role controller's scripts open and close the
    /// role lock's critical section and run whenever what they bracket does; recording the
    /// version and the after hook end a pass whose work is done: none of them is stopped
    /// before it starts.
    pub(crate) fn checkpointed(&self) -> bool {
        self.changes_host()
    }
}

/// Every action of one pass, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Plan {
    /// The steps.
    pub(crate) steps: Vec<Step>,
    /// Why every node falls back to the node lock with K = 1 (a mixed fleet), if it does.
    #[serde(skip)]
    pub(crate) mixed: Option<String>,
}

impl Plan {
    /// Sets each deployment's rollout from what the fleet says now (`nodes` by application
    /// node path; a node not in it keeps the defaults), and the mixed-fleet note.
    pub(crate) fn apply_rollout(
        &mut self,
        nodes: &BTreeMap<String, Rollout>,
        mixed: Option<String>,
    ) {
        for step in &mut self.steps {
            if let Step::Deploy { path, rollout, .. } = step {
                if let Some(r) = nodes.get(path.as_str()) {
                    *rollout = r.clone();
                }
            }
        }
        self.mixed = mixed;
    }

    /// The role lock the pass takes, if it has a role controller (a pass run by a role
    /// controller is not abandoned on a halt).
    pub(crate) fn role_lock(&self) -> Option<(&str, &str)> {
        self.steps.iter().find_map(|s| match s {
            Step::StartingDeployments { rpm, role } => Some((rpm.as_str(), role.as_str())),
            _ => None,
        })
    }

    /// True if the pass would change the host's software or deployments (see
    /// [`Step::changes_host`]).
    pub(crate) fn changes_host(&self) -> bool {
        self.steps.iter().any(Step::changes_host)
    }
}

fn opt(v: &Wanted) -> Option<String> {
    match v {
        Wanted::Exact(s) => Some(s.clone()),
        Wanted::Any => None,
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = |v: &Option<String>| v.clone().unwrap_or_else(|| "*".into());
        match self {
            Step::RoleController {
                rpm,
                version,
                remove,
                ..
            } => {
                f.write_str("role controller")?;
                if let Some(old) = remove {
                    write!(f, " remove {old}")?;
                }
                match rpm {
                    Some(rpm) => write!(f, " install {rpm} {}", v(version)),
                    None => Ok(()),
                }
            }
            Step::StartingDeployments { rpm, role } => {
                write!(f, "starting-deployments {ROLES}/{role} ({rpm})")
            }
            Step::EndingDeployments { rpm, role } => {
                write!(f, "ending-deployments {ROLES}/{role} ({rpm})")
            }
            Step::Undeploy { rpm, path, n, .. } => write!(f, "undeploy {path} {n} ({rpm})"),
            Step::Install {
                rpm,
                version,
                installed,
            } => {
                write!(
                    f,
                    "install {rpm} {} (installed: {})",
                    v(version),
                    installed.as_deref().unwrap_or("none")
                )
            }
            Step::Deploy {
                rpm,
                path,
                n,
                version,
                subtype,
                ..
            } => {
                write!(f, "deploy {path} {n} ({rpm} {}", v(version))?;
                if let Some(s) = subtype {
                    write!(f, ", subtype {s}")?;
                }
                f.write_str(")")
            }
            Step::Uninstall { rpm } => write!(f, "uninstall {rpm}"),
            Step::RemoveEtc { app } => write!(f, "remove /etc/{app}"),
            Step::RecordVersion => f.write_str("record the version"),
            Step::After { .. } => f.write_str("after hook"),
        }
    }
}

/// A plan that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Two deployments of one package want different versions.
    #[error("Inconsistent versions for {rpm}. {this} != {first}")]
    InconsistentVersions {
        /// The package.
        rpm: String,
        /// The version wanted by a later deployment (Python `repr`, or `<any>`).
        this: String,
        /// The version wanted first.
        first: String,
    },
}

/// True if `installed` satisfies `wanted`.
pub(crate) fn satisfies(wanted: &Wanted, installed: Option<&str>) -> bool {
    match (wanted, installed) {
        (Wanted::Any, Some(_)) => true,
        (Wanted::Exact(v), Some(i)) => v == i,
        (_, None) => false,
    }
}

/// One version per package, from deployments in discovery (path) order.
pub(crate) fn package_versions(
    wanted: &[Deployment],
) -> Result<BTreeMap<String, Wanted>, PlanError> {
    let mut versions: BTreeMap<String, Wanted> = BTreeMap::new();
    for d in wanted {
        match versions.get(&d.rpm) {
            Some(first) if *first != d.version => {
                let show = |w: &Wanted| match w {
                    Wanted::Exact(s) => repr_str(s),
                    Wanted::Any => "<any>".to_string(),
                };
                return Err(PlanError::InconsistentVersions {
                    rpm: d.rpm.clone(),
                    this: show(&d.version),
                    first: show(first),
                });
            }
            Some(_) => {}
            None => {
                versions.insert(d.rpm.clone(), d.version.clone());
            }
        }
    }
    Ok(versions)
}

/// The role controller step, if the installed controller is not the wanted one.
fn controller_step(wanted: Option<&(String, String)>, installed: &Installed) -> Option<Step> {
    let have = installed.controller.as_ref();
    match (wanted, have) {
        (None, None) => None,
        (None, Some((old, _))) => Some(Step::RoleController {
            rpm: None,
            version: None,
            installed: None,
            remove: Some(old.clone()),
        }),
        (Some((rpm, version)), have) => {
            let same = have.is_some_and(|(old, _)| old == rpm);
            let current = have.filter(|_| same).and_then(|(_, v)| v.clone());
            let checkout = is_git(Some(version));
            if same && !checkout && current.as_deref() == Some(version.as_str()) {
                return None;
            }
            Some(Step::RoleController {
                rpm: Some(rpm.clone()),
                version: Some(version.clone()),
                installed: current,
                remove: have.filter(|_| !same).map(|(old, _)| old.clone()),
            })
        }
    }
}

/// What a pass is planned from.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The deployments the tree wants on this host, in discovery order.
    pub wanted: &'a [Deployment],
    /// The role controller `/roles/<role>` wants (package, version), if any.
    pub controller: Option<&'a (String, String)>,
    /// The host's role.
    pub role: Option<&'a str>,
    /// What the host has.
    pub installed: &'a Installed,
    /// The configured `after` hook.
    pub after: Option<&'a [String]>,
}

/// Undeploy steps for the installed instances the tree no longer wants, in order.
fn undeploy_steps(wanted: &[Deployment], installed: &Installed) -> Vec<Step> {
    let wanted_instances: BTreeSet<(&str, &str, u32)> = wanted
        .iter()
        .map(|d| (d.app.as_str(), d.path.as_str(), d.n))
        .collect();
    let mut old = installed.deployments.clone();
    old.sort();
    old.iter()
        .filter(|d| !wanted_instances.contains(&(d.app.as_str(), d.path.as_str(), d.n)))
        .map(|d| Step::Undeploy {
            rpm: d.rpm.clone(),
            app: d.app.clone(),
            path: d.path.clone(),
            n: d.n,
        })
        .collect()
}

/// Deploy steps for every wanted instance, by path and number; under the role lock of
/// `role` when a role controller runs the deployments, else each under its node lock.
fn deploy_steps(wanted: &[Deployment], role: Option<&str>) -> Vec<Step> {
    let mut deploys: Vec<&Deployment> = wanted.iter().collect();
    deploys.sort_by(|a, b| (&a.path, a.n).cmp(&(&b.path, b.n)));
    deploys
        .into_iter()
        .map(|d| Step::Deploy {
            rpm: d.rpm.clone(),
            app: d.app.clone(),
            path: d.path.clone(),
            n: d.n,
            version: opt(&d.version),
            subtype: d.subtype.clone(),
            lock: match role {
                Some(role) => Lock::Role(role_lock_path(role)),
                None => Lock::Node(node_lock_path(&d.path)),
            },
            rollout: Rollout::default(),
        })
        .collect()
}

/// Every step of a pass, in order (see the module documentation).
pub fn plan(inputs: Inputs<'_>) -> Result<Plan, PlanError> {
    let Inputs {
        wanted,
        controller,
        role,
        installed,
        after,
    } = inputs;
    let versions = package_versions(wanted)?;
    let mut steps = Vec::new();
    steps.extend(controller_step(controller, installed));
    steps.extend(undeploy_steps(wanted, installed));
    // With a role controller, the role lock covers installs and deployments, between the
    // controller's two scripts; node locks are not used.
    let role_run = match (controller, role) {
        (Some((rpm, _)), Some(role)) => Some((rpm.clone(), role.to_string())),
        _ => None,
    };
    if let Some((rpm, role)) = &role_run {
        steps.push(Step::StartingDeployments {
            rpm: rpm.clone(),
            role: role.clone(),
        });
    }
    for (rpm, version) in &versions {
        let have = installed.versions.get(rpm).cloned().flatten();
        // A checkout is brought up to date every pass: its branch may have moved.
        let checkout = matches!(version, Wanted::Exact(v) if is_git(Some(v)));
        if checkout || !satisfies(version, have.as_deref()) {
            steps.push(Step::Install {
                rpm: rpm.clone(),
                version: opt(version),
                installed: have,
            });
        }
    }
    steps.extend(deploy_steps(
        wanted,
        role_run.as_ref().map(|(_, role)| role.as_str()),
    ));
    if let Some((rpm, role)) = role_run {
        steps.push(Step::EndingDeployments { rpm, role });
    }
    for rpm in &installed.packages {
        if !versions.contains_key(rpm) {
            steps.push(Step::Uninstall { rpm: rpm.clone() });
        }
    }
    let apps: BTreeSet<&str> = wanted.iter().map(|d| d.app.as_str()).collect();
    for app in &installed.app_dirs {
        if !apps.contains(app.as_str()) {
            steps.push(Step::RemoveEtc { app: app.clone() });
        }
    }
    steps.push(Step::RecordVersion);
    if let Some(command) = after {
        steps.push(Step::After {
            command: command.to_vec(),
        });
    }
    Ok(Plan { steps, mixed: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::model::{Deployment, Installed, InstalledDeployment, Wanted};

    /// `path n rpm version` (version `*` = any).
    fn wanted(spec: &str) -> Deployment {
        let w: Vec<&str> = spec.split(' ').collect();
        Deployment {
            path: w[0].into(),
            n: w[1].parse().unwrap(),
            rpm: w[2].into(),
            app: crate::agent::model::app_name(w[2]).into(),
            subtype: None,
            version: match w[3] {
                "*" => Wanted::Any,
                v => Wanted::Exact(v.into()),
            },
        }
    }

    /// A host with `packages` installed (`rpm=version`) and `deployed` (`path n rpm`).
    fn host(packages: &[&str], deployed: &[&str]) -> Installed {
        let mut installed = Installed::default();
        for p in packages {
            let (rpm, version) = p.split_once('=').unwrap();
            installed.packages.push(rpm.into());
            installed
                .app_dirs
                .push(crate::agent::model::app_name(rpm).into());
            installed.versions.insert(rpm.into(), Some(version.into()));
        }
        for d in deployed {
            let w: Vec<&str> = d.split(' ').collect();
            installed.deployments.push(InstalledDeployment {
                app: crate::agent::model::app_name(w[2]).into(),
                rpm: w[2].into(),
                path: w[0].into(),
                n: w[1].parse().unwrap(),
            });
        }
        installed
    }

    fn steps(wanted: &[Deployment], installed: &Installed) -> Vec<String> {
        let inputs = Inputs {
            wanted,
            controller: None,
            role: None,
            installed,
            after: None,
        };
        let planned = plan(inputs).unwrap();
        planned.steps.iter().map(ToString::to_string).collect()
    }

    /// (wanted, installed packages, deployed instances, steps wanted but the last)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], &'a [&'a str]);

    #[test]
    fn the_plan_walks_from_what_the_host_has_to_what_the_tree_wants() {
        let git = "git:example.org/repo#main";
        // (wanted, installed packages, deployed instances, steps wanted but the last)
        let cases: &[Case] = &[
            (&[], &[], &[], &[]),
            (
                &["/a 0 foo 1.0"],
                &[],
                &[],
                &["install foo 1.0 (installed: none)", "deploy /a 0 (foo 1.0)"],
            ),
            (
                &["/a 0 foo 1.0"],
                &["foo=1.0"],
                &["/a 0 foo"],
                &["deploy /a 0 (foo 1.0)"],
            ),
            (
                &["/a 0 foo 2.0"],
                &["foo=1.0"],
                &["/a 0 foo"],
                &["install foo 2.0 (installed: 1.0)", "deploy /a 0 (foo 2.0)"],
            ),
            (&["/a 0 foo *"], &["foo=1.0"], &[], &["deploy /a 0 (foo *)"]),
            (
                &["/b 1 foo 1.0", "/b 0 foo 1.0", "/a 0 foo 1.0"],
                &["foo=1.0"],
                &[],
                &[
                    "deploy /a 0 (foo 1.0)",
                    "deploy /b 0 (foo 1.0)",
                    "deploy /b 1 (foo 1.0)",
                ],
            ),
            (
                &[],
                &["foo=1.0"],
                &["/a 0 foo", "/a 1 foo"],
                &[
                    "undeploy /a 0 (foo)",
                    "undeploy /a 1 (foo)",
                    "uninstall foo",
                    "remove /etc/foo",
                ],
            ),
            (
                &["/a 0 bar 1.0"],
                &["foo=1.0", "bar=1.0"],
                &["/a 0 foo"],
                &[
                    "undeploy /a 0 (foo)",
                    "deploy /a 0 (bar 1.0)",
                    "uninstall foo",
                    "remove /etc/foo",
                ],
            ),
        ];
        for &(want, packages, deployed, expected) in cases {
            let want: Vec<Deployment> = want.iter().map(|s| wanted(s)).collect();
            let got = steps(&want, &host(packages, deployed));
            let (last, rest) = got.split_last().unwrap();
            assert_eq!(last, "record the version", "{got:?}");
            assert_eq!(
                rest, expected,
                "wanted {want:?} on {packages:?} {deployed:?}"
            );
        }
        // A checkout is brought up to date every pass.
        let checkout = [wanted(&format!("/a 0 foo {git}"))];
        let got = steps(&checkout, &host(&[&format!("foo={git}")], &["/a 0 foo"]));
        assert_eq!(got[0], format!("install foo {git} (installed: {git})"));
    }

    #[test]
    fn deployments_run_under_node_locks_or_the_role_lock() {
        let want = [wanted("/acme/a 0 foo 1.0")];
        let installed = host(&["foo=1.0"], &[]);
        let controller = ("ctl".to_string(), "2.0".to_string());
        // (controller and role, the lock, the steps)
        let cases: &[(bool, Lock, &[&str])] = &[
            (
                false,
                Lock::Node("/agent-locks/acme,a".into()),
                &["deploy /acme/a 0 (foo 1.0)", "record the version"],
            ),
            (
                true,
                Lock::Role("/role-locks/web".into()),
                &[
                    "role controller install ctl 2.0",
                    "starting-deployments /roles/web (ctl)",
                    "deploy /acme/a 0 (foo 1.0)",
                    "ending-deployments /roles/web (ctl)",
                    "record the version",
                ],
            ),
        ];
        for (role, lock, expected) in cases {
            let inputs = Inputs {
                wanted: &want,
                controller: role.then_some(&controller),
                role: role.then_some("web"),
                installed: &installed,
                after: Some(&["true".to_string()]),
            };
            let planned = plan(inputs).unwrap();
            let shown: Vec<String> = planned.steps.iter().map(ToString::to_string).collect();
            assert_eq!(shown[..shown.len() - 1], **expected, "role {role}");
            assert_eq!(shown.last().map(String::as_str), Some("after hook"));
            let locks: Vec<&Lock> = planned
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Deploy { lock, .. } => Some(lock),
                    _ => None,
                })
                .collect();
            assert_eq!(locks, [lock], "role {role}");
            assert_eq!(planned.role_lock().is_some(), *role);
        }
    }

    #[test]
    fn one_package_wants_one_version() {
        // (versions wanted of foo in discovery order, the error, if any)
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["1.0", "1.0"], None),
            (&["*", "*"], None),
            (
                &["1.0", "2.0"],
                Some("Inconsistent versions for foo. '2.0' != '1.0'"),
            ),
            (
                &["1.0", "*"],
                Some("Inconsistent versions for foo. <any> != '1.0'"),
            ),
        ];
        for &(versions, error) in cases {
            let want: Vec<Deployment> = versions
                .iter()
                .enumerate()
                .map(|(i, v)| wanted(&format!("/a{i} 0 foo {v}")))
                .collect();
            let got = package_versions(&want).err().map(|e| e.to_string());
            assert_eq!(got.as_deref(), error, "{versions:?}");
        }
    }

    #[test]
    fn satisfies_follows_the_wanted_version() {
        let cases = [
            (Wanted::Any, Some("1"), true),
            (Wanted::Any, None, false),
            (Wanted::Exact("1".into()), Some("1"), true),
            (Wanted::Exact("1".into()), Some("2"), false),
            (Wanted::Exact("1".into()), None, false),
        ];
        for (wanted, installed, ok) in cases {
            assert_eq!(satisfies(&wanted, installed), ok, "{wanted} {installed:?}");
        }
    }
}
