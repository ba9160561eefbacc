//! The plan of a pass: a pure function of what the tree wants and what the host has, giving
//! the ordered steps the executor runs (and `deploy --dry-run` prints). Order: role controller,
//! removal of deployments no longer wanted, package installs, deployments, uninstall of
//! packages no longer used, removal of `/etc/<app>` directories no longer used.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;

use super::model::{Deployment, Installed, Wanted};
use crate::tree::literal::repr_str;

/// One step of a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Step {
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
        }
    }
}

/// A plan that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// True if `installed` satisfies `wanted`.
pub fn satisfies(wanted: &Wanted, installed: Option<&str>) -> bool {
    match (wanted, installed) {
        (Wanted::Any, Some(_)) => true,
        (Wanted::Exact(v), Some(i)) => v == i,
        (_, None) => false,
    }
}

/// One version per package, from deployments in discovery (path) order.
pub fn package_versions(wanted: &[Deployment]) -> Result<BTreeMap<String, Wanted>, PlanError> {
    let mut versions: BTreeMap<String, Wanted> = BTreeMap::new();
    for d in wanted {
        match versions.get(&d.rpm) {
            Some(first) if *first != d.version => {
                let show = |w: &Wanted| match w {
                    Wanted::Exact(s) => repr_str(s),
                    Wanted::Any => "<any>".to_string(),
                };
                return Err(PlanError(format!(
                    "Inconsistent versions for {}. {} != {}",
                    d.rpm,
                    show(&d.version),
                    show(first)
                )));
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
            let checkout = super::software::is_git(Some(version));
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

/// The steps of a pass, in order. `controller` is the role controller `/roles/<role>` wants.
pub fn plan(
    wanted: &[Deployment],
    controller: Option<&(String, String)>,
    installed: &Installed,
) -> Result<Vec<Step>, PlanError> {
    let versions = package_versions(wanted)?;
    let mut steps = Vec::new();
    steps.extend(controller_step(controller, installed));
    let wanted_instances: BTreeSet<(&str, &str, u32)> = wanted
        .iter()
        .map(|d| (d.app.as_str(), d.path.as_str(), d.n))
        .collect();
    let mut old = installed.deployments.clone();
    old.sort();
    for d in &old {
        if !wanted_instances.contains(&(d.app.as_str(), d.path.as_str(), d.n)) {
            steps.push(Step::Undeploy {
                rpm: d.rpm.clone(),
                app: d.app.clone(),
                path: d.path.clone(),
                n: d.n,
            });
        }
    }
    for (rpm, version) in &versions {
        let have = installed.versions.get(rpm).cloned().flatten();
        // A checkout is brought up to date every pass: its branch may have moved.
        let checkout = matches!(version, Wanted::Exact(v) if super::software::is_git(Some(v)));
        if checkout || !satisfies(version, have.as_deref()) {
            steps.push(Step::Install {
                rpm: rpm.clone(),
                version: opt(version),
                installed: have,
            });
        }
    }
    let mut deploys: Vec<&Deployment> = wanted.iter().collect();
    deploys.sort_by(|a, b| (&a.path, a.n).cmp(&(&b.path, b.n)));
    for d in deploys {
        steps.push(Step::Deploy {
            rpm: d.rpm.clone(),
            app: d.app.clone(),
            path: d.path.clone(),
            n: d.n,
            version: opt(&d.version),
            subtype: d.subtype.clone(),
        });
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
    Ok(steps)
}
