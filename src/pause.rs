//! Pausing the cluster (`zkdeployment pause [--reason TEXT]`): sets `/hosts` `version` to
//! `false`, as the original's operators did by hand, and records who paused it, when and why
//! (`/hosts` `pause`: `{user, host, time, reason}`) in the same guarded write. While that record
//! stands, `sync` imports new revisions and records `synced` but leaves the version `false`;
//! `resume` ends the pause (and removes the record).
//!
//! `zkdeployment pause PATH...` pauses application nodes instead: a record under
//! `/node-pauses` per node ([`crate::zk::node_state`]); no host starts a new step of them
//! until `resume PATH`.

use serde_json::{json, Map, Value};

use crate::zk::halts::{read_halts, PAUSE};
use crate::zk::node_state::add_pause;
use crate::zk::paths::HOSTS;
use crate::zk::update::try_update_props;
use crate::zk::{call_retrying, join, Client, ZkError};

/// Why a pause was refused or failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PauseError {
    /// `/hosts` missing.
    #[error("{HOSTS} does not exist: the cluster is not initialised (or the chroot is wrong)")]
    NoHosts,
    /// The cluster is halted: a pause would hide the halt.
    #[error("the cluster is halted: nothing to pause (see `zkdeployment status`, end the halt with `zkdeployment resume`)")]
    Halted,
    /// A PATH that is not an absolute node path (a usage error).
    #[error("{0:?} is not a node path: give an application node's absolute path, e.g. /cust/app")]
    BadPath(String),
    /// A PATH that is not an application node of the tree.
    #[error("{path} is not an application node of the tree: {why}")]
    NotApplication {
        /// The path given.
        path: String,
        /// What it lacks.
        why: &'static str,
    },
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

/// Checks that `text` is an absolute node path (`/a/b`: no empty, `.` or `..` part, no
/// trailing `/`).
pub(crate) fn check_path(text: &str) -> Result<(), PauseError> {
    let bad = || PauseError::BadPath(text.to_string());
    let rest = text.strip_prefix('/').ok_or_else(bad)?;
    if rest
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(bad());
    }
    Ok(())
}

/// Checks that `path` is an application node of the tree: it exists, has a type and a
/// `deploy` child.
pub(crate) async fn check_application(client: &Client, path: &str) -> Result<(), PauseError> {
    let not = |why| PauseError::NotApplication {
        path: path.to_string(),
        why,
    };
    let props = match call_retrying("get", path, || client.get_data(path)).await {
        Ok((data, _)) => crate::zk::decode(&data),
        Err(e) if e.is_no_node() => return Err(not("no such node")),
        Err(e) => return Err(e.into()),
    };
    if !props.get("type").is_some_and(Value::is_string) {
        return Err(not("it has no type"));
    }
    let deploy = join(path, "deploy");
    match call_retrying("stat", &deploy, || client.check_stat(&deploy)).await? {
        Some(_) => Ok(()),
        None => Err(not("it has no deploy node")),
    }
}

/// Pauses the application node `path` with `record` (`{user, host, time, reason}`, the path
/// added); `root_acl` is the ACL `/node-pauses` gets if it must be made. Gives the pause
/// record it replaced, if the node was paused already.
pub(crate) async fn pause_node(
    client: &Client,
    path: &str,
    record: &Value,
    root_acl: &[zookeeper_client::Acl],
) -> Result<Option<Value>, PauseError> {
    check_application(client, path).await?;
    let mut props = record.as_object().cloned().unwrap_or_default();
    props.insert("path".into(), Value::String(path.to_string()));
    Ok(add_pause(client, path, &props, root_acl).await?)
}

/// Who pauses: the user (`SUDO_USER`, else `USER`, else the uid) and this machine's name.
pub(crate) fn operator() -> (String, String) {
    let user = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    (user, host)
}

/// The pause record written to `/hosts`.
pub(crate) fn record(user: &str, host: &str, time: f64, reason: Option<&str>) -> Value {
    json!({"user": user, "host": host, "time": time, "reason": reason})
}

/// Pauses the cluster with `record`; gives the pause record it replaced, if the cluster was
/// already paused by `pause`. A halted cluster is refused (its halt stays as it is).
pub(crate) async fn pause(client: &Client, record: &Value) -> Result<Option<Value>, PauseError> {
    if !read_halts(client).await?.is_empty() {
        return Err(PauseError::Halted);
    }
    let previous = std::sync::Mutex::new(None);
    let result = try_update_props(client, HOSTS, |p: &mut Map<String, Value>| {
        if p.get("version").is_none_or(Value::is_null) {
            return Err(PauseError::Halted);
        }
        *previous.lock().expect("previous pause") = p.get(PAUSE).cloned();
        p.insert("version".into(), Value::Bool(false));
        p.insert(PAUSE.into(), record.clone());
        Ok(())
    })
    .await;
    match result {
        Ok(_) => Ok(previous.into_inner().expect("previous pause")),
        Err(PauseError::Zk(e)) if e.is_no_node() => Err(PauseError::NoHosts),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_names_who_when_and_why() {
        let rec = record("ann", "ops1", 12.5, Some("freeze"));
        assert_eq!(
            rec,
            json!({"user": "ann", "host": "ops1", "time": 12.5, "reason": "freeze"})
        );
        assert_eq!(record("bob", "h", 1.0, None)["reason"], Value::Null);
        let (user, _) = operator();
        assert!(!user.is_empty());
    }

    #[test]
    fn node_paths_are_absolute() {
        for good in ["/a", "/cust/app", "/a b/c,d"] {
            assert!(check_path(good).is_ok(), "{good:?}");
        }
        for bad in [
            "", "/", "a/b", "/a/", "/a//b", "/a/./b", "/a/../b", "--force",
        ] {
            assert!(
                matches!(check_path(bad), Err(PauseError::BadPath(_))),
                "{bad:?}"
            );
        }
    }
}
