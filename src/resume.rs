//! Ending a halt or a pause (`zkdeployment resume [--version V]`): sets `/hosts` `version` to V,
//! or to the last synced revision, and clears the halt and pause records, in one guarded write; on a protected
//! cluster it first deletes the halt records hosts created under `/hosts-halt` (which takes
//! the syncer's identity: `resume --auth`).
//!
//! `zkdeployment resume PATH...` ([`resume_nodes`]) ends the halt or pause of application
//! nodes and clears their failure records instead, then writes `/hosts` as it is so that the
//! agents wake and run those nodes again.

use serde_json::Value;

use crate::zk::halts::{clear_halts, PAUSE};
use crate::zk::node_state::{clear_node, parse_record, read_node, state_key, Cleared};
use crate::zk::paths::HOSTS;
use crate::zk::paths::NODE_STATE;
use crate::zk::update::update_props;
use crate::zk::{call, decode, Client, ZkError};

/// Why resume refused or failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    /// Nothing to resume to.
    #[error("no synced revision on {HOSTS} and no --version given: nothing to resume to")]
    NoVersion,
    /// `--version null`: that would leave the cluster halted (and drop the halt record).
    #[error("--version null would leave the cluster halted: give the version to deploy")]
    NullVersion,
    /// `--version ''` (or only blanks, as text or as a JSON string): no version to deploy.
    #[error("--version is empty: give the version to deploy")]
    BlankVersion,
    /// `/hosts` missing.
    #[error("{HOSTS} does not exist")]
    NoHosts,
    /// A PATH that is neither an application node nor a node with a halt, pause or failures.
    #[error("{0}")]
    Node(String),
    /// ZooKeeper failed.
    #[error(transparent)]
    Zk(#[from] ZkError),
}

/// The version a `--version` argument means: JSON if it parses as JSON (`124`, `"x"`), else
/// the text itself.
pub(crate) fn parse_version(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Refuses a `--version` no host can deploy: `null` (the cluster would stay halted) and an
/// empty or blank string.
pub(crate) fn check_version(version: &Value) -> Result<(), ResumeError> {
    match version {
        Value::Null => Err(ResumeError::NullVersion),
        Value::String(s) if s.trim().is_empty() => Err(ResumeError::BlankVersion),
        _ => Ok(()),
    }
}

/// What a resume did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resumed {
    /// The cluster version set.
    pub(crate) version: Value,
    /// The halt records it cleared (`{host, name, version, error, time}`): the one on
    /// `/hosts` first, then those under `/hosts-halt`, oldest first. A halt recorded after
    /// the operator looked is cleared too; this says so.
    pub(crate) cleared: Vec<Value>,
    /// The pause record (`zkdeployment pause`) it ended, if the cluster was paused so.
    pub(crate) pause: Option<Value>,
}

/// Resumes; returns the version set and the halt records cleared. `Some(null)` is refused
/// ([`ResumeError::NullVersion`]), and so is a blank string ([`ResumeError::BlankVersion`]).
pub(crate) async fn resume(
    client: &Client,
    version: Option<Value>,
) -> Result<Resumed, ResumeError> {
    if let Some(v) = &version {
        check_version(v)?;
    }
    let props = match call("get", HOSTS, client.get_data(HOSTS)).await {
        Ok((data, _)) => decode(&data),
        Err(e) if e.is_no_node() => return Err(ResumeError::NoHosts),
        Err(e) => return Err(e.into()),
    };
    let target = match version {
        Some(v) => v,
        None => match props.get("synced") {
            Some(v) if !v.is_null() => v.clone(),
            _ => return Err(ResumeError::NoVersion),
        },
    };
    // Halt records of a protected cluster go first (only the syncer's identity may delete
    // them), then `/hosts`, whose change wakes the agents.
    let records = clear_halts(client).await?;
    let set = target.clone();
    let mark = crate::zk::paths::version_set(&target);
    // The halt record the write that went through removed (the last change tried).
    let on_hosts = std::sync::Mutex::new(None);
    // The pause record (`zkdeployment pause`) the write that went through removed.
    let paused = std::sync::Mutex::new(None);
    let changed = update_props(client, HOSTS, |p| {
        p.insert("version".into(), set.clone());
        *on_hosts.lock().expect("halt on /hosts") = p.remove("halt");
        *paused.lock().expect("pause on /hosts") = p.remove(PAUSE);
        // Resuming the version that was rolling out continues its roll-out.
        let same = p
            .get(crate::zk::paths::VERSION_SET)
            .and_then(|m| m.get("version"))
            == Some(&set);
        if !same {
            p.insert(crate::zk::paths::VERSION_SET.into(), mark.clone());
        }
    })
    .await?;
    if !records.is_empty() && !changed {
        // Nothing to change on /hosts, but the agents watch it.
        wake_agents(client).await?;
    }
    // Failure records of other versions quarantine nobody at the version set.
    crate::zk::node_state::prune_failures(client, &target).await?;
    let on_hosts = on_hosts.into_inner().expect("halt on /hosts");
    let cleared = on_hosts
        .filter(|halt| !halt.is_null())
        .into_iter()
        .chain(records)
        .collect();
    Ok(Resumed {
        version: target,
        cleared,
        pause: paused
            .into_inner()
            .expect("pause on /hosts")
            .filter(Value::is_object),
    })
}

/// Writes `/hosts` as it is: every agent watches it, and passes again. A write by someone
/// else meanwhile (the version guard fails) wakes them as well.
pub(crate) async fn wake_agents(client: &Client) -> Result<(), ZkError> {
    let (data, stat) = call("get", HOSTS, client.get_data(HOSTS)).await?;
    match call(
        "set",
        HOSTS,
        client.set_data(HOSTS, &data, Some(stat.version)),
    )
    .await
    {
        Err(ZkError::Op {
            source: zookeeper_client::Error::BadVersion,
            ..
        }) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// True when `path` has failure records at any cluster version.
async fn has_failures(client: &Client, path: &str) -> Result<bool, ZkError> {
    let key = state_key(path);
    Ok(crate::zk::list_or_empty(client, NODE_STATE)
        .await?
        .iter()
        .any(|n| parse_record(n).is_some_and(|r| r.key == key)))
}

/// What `resume PATH` did to one node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeResumed {
    /// The application node.
    pub(crate) path: String,
    /// Its halt, pause and failure records removed.
    pub(crate) cleared: Cleared,
}

/// Ends the halt or pause of each node of `paths` and deletes its failure records (at every
/// cluster version: only the current one's matter), then wakes the agents. A path is
/// accepted when it is an application node of the tree or has something recorded.
pub(crate) async fn resume_nodes(
    client: &Client,
    paths: &[String],
) -> Result<Vec<NodeResumed>, ResumeError> {
    if call("stat", HOSTS, client.check_stat(HOSTS))
        .await?
        .is_none()
    {
        return Err(ResumeError::NoHosts);
    }
    for path in paths {
        let known = !read_node(client, path, &Value::Null).await?.is_empty()
            || has_failures(client, path).await?;
        if !known {
            crate::pause::check_application(client, path)
                .await
                .map_err(|e| ResumeError::Node(e.to_string()))?;
        }
    }
    let mut out = Vec::new();
    for path in paths {
        out.push(NodeResumed {
            path: path.clone(),
            cleared: clear_node(client, path).await?,
        });
    }
    wake_agents(client).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_null_versions_are_refused() {
        for text in ["", " ", "\t\n", "\"\"", "\" \"", "null"] {
            assert!(
                check_version(&parse_version(text)).is_err(),
                "{text:?} accepted"
            );
        }
        for text in ["r42", "124", "\"124\"", "0"] {
            assert!(
                check_version(&parse_version(text)).is_ok(),
                "{text:?} refused"
            );
        }
    }
}
