//! Pausing the cluster (`zkdeployment pause [--reason TEXT]`): sets `/hosts` `version` to
//! `false`, as the original's operators did by hand, and records who paused it, when and why
//! (`/hosts` `pause`: `{user, host, time, reason}`) in the same guarded write. While that record
//! stands, `sync` imports new revisions and records `synced` but leaves the version `false`;
//! `resume` ends the pause (and removes the record).

use serde_json::{json, Map, Value};

use crate::zk::halts::{read_halts, PAUSE};
use crate::zk::paths::HOSTS;
use crate::zk::update::try_update_props;
use crate::zk::{Client, ZkError};

/// Why a pause was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// `/hosts` missing.
    #[error("{HOSTS} does not exist: the cluster is not initialised (or the chroot is wrong)")]
    NoHosts,
    /// The cluster is halted: a pause would hide the halt.
    #[error("the cluster is halted: nothing to pause (see `zkdeployment status`, end the halt with `zkdeployment resume`)")]
    Halted,
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

/// Who pauses: the user (`SUDO_USER`, else `USER`, else the uid) and this machine's name.
pub fn operator() -> (String, String) {
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
pub fn record(user: &str, host: &str, time: f64, reason: Option<&str>) -> Value {
    json!({"user": user, "host": host, "time": time, "reason": reason})
}

/// Pauses the cluster with `record`; gives the pause record it replaced, if the cluster was
/// already paused by `pause`. A halted cluster is refused (its halt stays as it is).
pub async fn pause(client: &Client, record: &Value) -> Result<Option<Value>, PauseError> {
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
}
