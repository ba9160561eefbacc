//! The agent's vocabulary: who this host is ([`Host`]), what the tree wants on it
//! ([`Deployment`]), what the host has ([`Installed`]), and the naming rules shared by both sides — the application name of an
//! rpm ([`app_name`]), plain names ([`check_plain_name`]), and the marker file names of
//! `/etc/<app>` ([`marker_base`], [`parse_marker`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// Who this host is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Host id (its node under `/hosts`).
    pub id: String,
    /// Host name (FQDN by default).
    pub name: String,
    /// Role, if any: then the host is configured by its role alone.
    pub role: Option<String>,
}

impl Host {
    /// The deploy targets naming this host: its id, its name and its role.
    pub fn targets(&self) -> Vec<&str> {
        let mut t = vec![self.id.as_str(), self.name.as_str()];
        if let Some(r) = &self.role {
            t.push(r);
        }
        t
    }
}

/// The version the tree asks for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(untagged)]
pub(crate) enum Wanted {
    /// This exact version (an RPM version, or a VCS URL).
    Exact(String),
    /// Any version (a versioned package name such as `cache-1.2`, with no `version` property).
    Any,
}

impl fmt::Display for Wanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wanted::Exact(v) => f.write_str(v),
            Wanted::Any => f.write_str("*"),
        }
    }
}

/// One instance of an application node that the tree deploys to this host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deployment {
    /// The application node path (`/cust/app`).
    pub(crate) path: String,
    /// The instance number, `0..n`.
    pub(crate) n: u32,
    /// The package: the first word of the node type, the directory under `/opt`.
    pub(crate) rpm: String,
    /// The application name: the directory under `/etc` ([`app_name`] of `rpm`).
    pub(crate) app: String,
    /// The second word of the type, passed as `-r SUBTYPE`.
    pub(crate) subtype: Option<String>,
    /// The version wanted.
    pub(crate) version: Wanted,
}

/// A deployment found on disk (a `.deployed` marker).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstalledDeployment {
    /// Application name (`/etc/<app>`).
    pub app: String,
    /// The package whose deploy script it belongs to.
    pub rpm: String,
    /// Application node path.
    pub path: String,
    /// Instance number.
    pub n: u32,
}

/// What the host has, as observed before a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Installed {
    /// Deployments recorded by markers, sorted.
    pub deployments: Vec<InstalledDeployment>,
    /// Packages installed as applications (`/opt/<rpm>/bin/zookeeper-deploy` exists), sorted.
    pub packages: Vec<String>,
    /// Application directories under `/etc` that are ours: apps of installed packages, and
    /// directories holding `.deployed` or `.script` markers; sorted.
    pub app_dirs: Vec<String>,
    /// Installed version of each wanted package (`yum -q list installed`, or a checkout's
    /// recorded version), `None` if not installed.
    pub versions: BTreeMap<String, Option<String>>,
    /// The installed role controller and its version, if any.
    pub(crate) controller: Option<(String, Option<String>)>,
}

/// The value of the host node property `agent` ([`crate::zk::paths::AGENT_PROPERTY`]) on
/// host nodes this agent registers.
pub(crate) fn agent_id() -> String {
    format!("zkdeployment {}", env!("CARGO_PKG_VERSION"))
}

/// True if `version` is a git checkout version (`git:…`, see [`crate::packages::git`]).
pub(crate) fn is_git(version: Option<&str>) -> bool {
    version.is_some_and(|v| crate::packages::git::parse_version(v).is_some())
}

/// The application name of a package: the name without a trailing `-<digits>(.<digits>)*`
/// (`z4m-4.0.0` → `z4m`, `cache-1.2` → `cache`, `my-app` → `my-app`). One rule for discovery
/// and observation alike.
pub(crate) fn app_name(rpm: &str) -> &str {
    if let Some(at) = rpm.rfind('-') {
        let tail = &rpm[at + 1..];
        let numeric = !tail.is_empty()
            && tail
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if numeric && at > 0 {
            return &rpm[..at];
        }
    }
    rpm
}

/// True if `rpm` carries its version in its name (`cache-1.2`).
pub(crate) fn is_versioned_name(rpm: &str) -> bool {
    app_name(rpm) != rpm
}

/// Checks that a package, application or role name is a plain name: not empty, not `.` or
/// `..`, no `/`, no whitespace, no control characters, and not starting with `-` (it goes
/// into yum's argument vector, where it would be read as an option).
pub(crate) fn check_plain_name(what: &str, name: &str) -> Result<(), String> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.starts_with('-')
        || name.contains('/')
        || name.chars().any(|c| c.is_whitespace() || c.is_control());
    if bad {
        Err(format!(
            "invalid {what} name {}",
            crate::tree::literal::repr_str(name)
        ))
    } else {
        Ok(())
    }
}

/// The marker base name of an application path: without the leading `/`, `/` replaced by `,`,
/// and `%` and `,` inside names written `%25` and `%2C` (`/cust/a,b` → `cust,a%2Cb`); the key
/// of the node in ZooKeeper's per-node state too ([`crate::zk::paths::path_key`]).
pub(crate) fn marker_base(path: &str) -> String {
    crate::zk::paths::path_key(path)
}

/// The `.deployed` file name of an instance.
pub fn deployed_name(path: &str, n: u32) -> String {
    format!("{}.{n}.deployed", marker_base(path))
}

/// The `.script` file name of an instance.
pub fn script_name(path: &str, n: u32) -> String {
    format!("{}.{n}.script", marker_base(path))
}

/// Parses a marker file name (`cust,app.0.deployed`) back into (path, n), if it is one.
pub(crate) fn parse_marker(file: &str, suffix: &str) -> Option<(String, u32)> {
    let stem = file.strip_suffix(suffix)?;
    let (base, n) = stem.rsplit_once('.')?;
    let n: u32 = n.parse().ok()?;
    if base.is_empty() {
        return None;
    }
    crate::zk::paths::path_of_key(base).map(|path| (path, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names() {
        assert_eq!(app_name("z4m-4.0.0"), "z4m");
        assert_eq!(app_name("cache-1.2"), "cache");
        assert_eq!(app_name("my-app"), "my-app");
        assert_eq!(app_name("foo"), "foo");
        assert_eq!(app_name("foo-"), "foo-");
        assert_eq!(app_name("-1"), "-1");
        assert_eq!(app_name("a-1.x"), "a-1.x");
        assert_eq!(app_name("a-1..2"), "a-1..2");
    }

    #[test]
    fn markers_round_trip_with_escapes() {
        assert_eq!(
            deployed_name("/cust/someapp/cms", 0),
            "cust,someapp,cms.0.deployed"
        );
        assert_eq!(marker_base("/a,b/c%d"), "a%2Cb,c%25d");
        for path in ["/cust/someapp/cms", "/a,b/c%d", "/x.y/z", "/%2C"] {
            assert_eq!(
                parse_marker(&deployed_name(path, 3), ".deployed"),
                Some((path.to_string(), 3))
            );
        }
        assert_eq!(parse_marker("x.deployed", ".deployed"), None);
        assert_eq!(parse_marker("a.b.deployed", ".deployed"), None);
        assert_eq!(parse_marker("a%ZZ.1.deployed", ".deployed"), None);
        assert_eq!(parse_marker(".1.deployed", ".deployed"), None);
    }

    #[test]
    fn plain_names() {
        assert!(check_plain_name("package", "foo-1.2").is_ok());
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "a\tb",
            "a\u{0}b",
            "-y",
            "--installroot=x",
        ] {
            assert!(check_plain_name("package", bad).is_err(), "{bad:?}");
        }
    }
}
