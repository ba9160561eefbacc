//! The host's inventory: what it has after a pass (installed packages with their versions,
//! deployed instances, its `/etc/<app>` directories, its role controller), published in its
//! host node as the property `inventory` so that `zkdeployment plan` can plan every host of
//! the fleet without asking it. Kept compact (1,000s of hosts are read at once):
//!
//! ```text
//! {"packages": {"foo": "1.0", "cache-1.2": null},        package → version (null: unknown)
//!  "deployed": {"foo": {"/acme/app": [0, 1]}},           package → application node → instances
//!  "etc": ["foo"],                                       our /etc/<app> directories
//!  "controller": ["rc", "2.0"],                          role controller and version, if any
//!  "health": ["foo"],                                     installed packages with a health check
//!  "version": "<cluster version of the pass>", "time": 1764000000.0}
//! ```
//!
//! Pure conversions ([`Inventory::from_installed`], [`Inventory::installed`]) and the version
//! bookkeeping of a pass ([`versions_after`]): the agent knows every wanted package's version
//! before the pass (it asked yum) and what each install step set, so publishing costs no extra
//! yum call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{app_name, Installed, InstalledDeployment};
use super::plan::Step;

/// The host node property holding the inventory.
pub(crate) use crate::zk::paths::INVENTORY as PROPERTY;
/// The run-directory file keeping the last inventory (published again after a restart).
pub(crate) const FILE: &str = "inventory.json";
/// How an installed version that is not known is shown in plans.
pub(crate) const UNKNOWN_VERSION: &str = "?";

/// What a host has, as published.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Installed packages (applications and the role controller) and their versions
    /// (`None`: installed, version not known).
    #[serde(default)]
    pub(crate) packages: BTreeMap<String, Option<String>>,
    /// Deployed instances: package → application node path → instance numbers.
    #[serde(default)]
    pub(crate) deployed: BTreeMap<String, BTreeMap<String, Vec<u32>>>,
    /// The `/etc/<app>` directories that are the agent's.
    #[serde(default)]
    pub(crate) etc: Vec<String>,
    /// The role controller package and its version, if one is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) controller: Option<(String, Option<String>)>,
    /// The installed packages that have a health check (`/opt/<rpm>/bin/zookeeper-health`);
    /// `None` in inventories published before agents said (then it is not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) health: Option<Vec<String>>,
    /// The cluster version of the pass that published it.
    #[serde(default)]
    pub(crate) version: Value,
    /// Unix time it was taken.
    #[serde(default)]
    pub(crate) time: f64,
}

/// Why a published inventory cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad inventory: {0}")]
pub(crate) struct InventoryError(pub(crate) String);

impl Inventory {
    /// The inventory of what was observed, with the versions known for each package.
    pub fn from_installed(
        installed: &Installed,
        versions: &BTreeMap<String, Option<String>>,
        version: &Value,
        time: f64,
    ) -> Inventory {
        let known = |rpm: &str| versions.get(rpm).cloned().flatten();
        let mut deployed: BTreeMap<String, BTreeMap<String, Vec<u32>>> = BTreeMap::new();
        for d in &installed.deployments {
            deployed
                .entry(d.rpm.clone())
                .or_default()
                .entry(d.path.clone())
                .or_default()
                .push(d.n);
        }
        Inventory {
            packages: installed
                .packages
                .iter()
                .map(|rpm| (rpm.clone(), known(rpm)))
                .collect(),
            deployed,
            etc: installed.app_dirs.clone(),
            controller: installed
                .controller
                .as_ref()
                .map(|(rpm, v)| (rpm.clone(), v.clone().or_else(|| known(rpm)))),
            health: None,
            version: version.clone(),
            time,
        }
    }

    /// What the planner compares the tree with: the host as the agent would observe it
    /// (an unknown version reads as [`UNKNOWN_VERSION`]: installed, matching any version).
    pub(crate) fn installed(&self) -> Installed {
        let show = |v: &Option<String>| Some(v.clone().unwrap_or_else(|| UNKNOWN_VERSION.into()));
        let mut deployments = Vec::new();
        for (rpm, paths) in &self.deployed {
            for (path, ns) in paths {
                for n in ns {
                    deployments.push(InstalledDeployment {
                        app: app_name(rpm).to_string(),
                        rpm: rpm.clone(),
                        path: path.clone(),
                        n: *n,
                    });
                }
            }
        }
        deployments.sort();
        deployments.dedup();
        Installed {
            deployments,
            packages: self.packages.keys().cloned().collect(),
            app_dirs: self.etc.clone(),
            versions: self
                .packages
                .iter()
                .map(|(rpm, v)| (rpm.clone(), show(v)))
                .collect(),
            controller: self.controller.clone().map(|(rc, v)| (rc, show(&v))),
        }
    }

    /// The JSON value published.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("serialisable")
    }

    /// Reads a published value.
    pub(crate) fn from_value(value: &Value) -> Result<Inventory, InventoryError> {
        serde_json::from_value(value.clone()).map_err(|e| InventoryError(e.to_string()))
    }
}

/// The versions of the packages after the steps of a pass ran (all of them when `complete`):
/// `before` holds what yum said before the pass; an install sets the version it asked for (an
/// install of "any version" leaves it unknown unless it was known); an uninstall forgets it.
/// When the pass did not complete, packages an install step touched are unknown.
pub(crate) fn versions_after(
    before: &BTreeMap<String, Option<String>>,
    steps: &[Step],
    complete: bool,
) -> BTreeMap<String, Option<String>> {
    let mut versions = before.clone();
    for step in steps {
        match step {
            Step::Install { rpm, version, .. } => {
                let now = if complete {
                    version
                        .clone()
                        .or_else(|| before.get(rpm).cloned().flatten())
                } else {
                    None
                };
                versions.insert(rpm.clone(), now);
            }
            Step::RoleController {
                rpm: Some(rpm),
                version,
                ..
            } => {
                versions.insert(rpm.clone(), version.clone().filter(|_| complete));
            }
            Step::Uninstall { rpm } if complete => {
                versions.remove(rpm);
            }
            _ => {}
        }
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn installed() -> Installed {
        Installed {
            deployments: vec![
                InstalledDeployment {
                    app: "foo".into(),
                    rpm: "foo".into(),
                    path: "/acme/a".into(),
                    n: 0,
                },
                InstalledDeployment {
                    app: "foo".into(),
                    rpm: "foo".into(),
                    path: "/acme/a".into(),
                    n: 1,
                },
                InstalledDeployment {
                    app: "cache".into(),
                    rpm: "cache-1.2".into(),
                    path: "/acme/c".into(),
                    n: 0,
                },
            ],
            packages: vec!["cache-1.2".into(), "foo".into()],
            app_dirs: vec!["cache".into(), "foo".into()],
            versions: BTreeMap::new(),
            controller: Some(("rc".into(), Some("2.0".into()))),
        }
    }

    #[test]
    fn round_trips_through_the_published_form() {
        let versions = BTreeMap::from([("foo".to_string(), Some("1.0".to_string()))]);
        let inv = Inventory::from_installed(&installed(), &versions, &json!("r1"), 5.0);
        let text = serde_json::to_string(&inv.to_value()).unwrap();
        assert_eq!(
            text,
            r#"{"controller":["rc","2.0"],"deployed":{"cache-1.2":{"/acme/c":[0]},"foo":{"/acme/a":[0,1]}},"etc":["cache","foo"],"packages":{"cache-1.2":null,"foo":"1.0"},"time":5.0,"version":"r1"}"#
        );
        let back = Inventory::from_value(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, inv);
        let seen = back.installed();
        let mut want = installed();
        want.deployments.sort();
        want.versions = BTreeMap::from([
            ("cache-1.2".to_string(), Some(UNKNOWN_VERSION.to_string())),
            ("foo".to_string(), Some("1.0".to_string())),
        ]);
        assert_eq!(seen, want);
        // Which packages have a health check: published by agents that know it, `None`
        // (not known) in an inventory without it.
        assert_eq!(back.health, None);
        let mut with = inv.clone();
        with.health = Some(vec!["foo".into()]);
        let value = with.to_value();
        assert_eq!(value["health"], json!(["foo"]));
        assert_eq!(Inventory::from_value(&value).unwrap(), with);
        assert!(Inventory::from_value(&json!({"packages": 3})).is_err());
        assert_eq!(
            Inventory::from_value(&json!({})).unwrap(),
            Inventory::default()
        );
    }

    #[test]
    fn versions_follow_the_steps() {
        let before = BTreeMap::from([
            ("a".to_string(), Some("1".to_string())),
            ("b".to_string(), None),
            ("old".to_string(), Some("3".to_string())),
        ]);
        let steps = vec![
            Step::Install {
                rpm: "a".into(),
                version: Some("2".into()),
                installed: Some("1".into()),
            },
            Step::Install {
                rpm: "b".into(),
                version: None,
                installed: None,
            },
            Step::Uninstall { rpm: "old".into() },
        ];
        let done = versions_after(&before, &steps, true);
        assert_eq!(
            done,
            BTreeMap::from([
                ("a".to_string(), Some("2".to_string())),
                ("b".to_string(), None)
            ])
        );
        let failed = versions_after(&before, &steps, false);
        assert_eq!(failed.get("a"), Some(&None));
        assert_eq!(failed.get("old"), Some(&Some("3".to_string())));
    }
}
