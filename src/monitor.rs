//! The Nagios check: what the state of this host's deployments is, as one line
//! `ZKDEPLOYMENT <STATE> - <message> | age=<seconds>s;<warn>;<error>;0` (no `| age=…` when
//! the age is unknown) and the plugin exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
//! [`evaluate`] is pure: the checks of docs/operations.md, in order, over what [`gather`]
//! read (the status file, the host node, `/hosts`).
//! The original's one-word messages (`Host not registered`, `Cluster version is None`,
//! `Version mismatch (...)`, `Too long deploying ...`) appear verbatim inside the line.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::agent::status::{parse_status, version_token, StatusLine};
use crate::tree::literal::py_str;
use crate::tree::Props;
use crate::zk::paths::{host_path, HOSTS};
use crate::zk::{call, connect, decode, ConnectOptions};

/// A plugin state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// 0.
    Ok,
    /// 1.
    Warning,
    /// 2.
    Critical,
    /// 3.
    Unknown,
}

impl State {
    /// The plugin exit code.
    pub fn code(self) -> u8 {
        match self {
            State::Ok => 0,
            State::Warning => 1,
            State::Critical => 2,
            State::Unknown => 3,
        }
    }

    fn word(self) -> &'static str {
        match self {
            State::Ok => "OK",
            State::Warning => "WARNING",
            State::Critical => "CRITICAL",
            State::Unknown => "UNKNOWN",
        }
    }
}

/// The result of a check.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// The state.
    pub state: State,
    /// The message.
    pub message: String,
    /// Seconds since the status file was written, if known.
    pub age: Option<f64>,
}

impl Check {
    fn new(state: State, message: impl Into<String>, age: Option<f64>) -> Check {
        Check {
            state,
            message: message.into(),
            age,
        }
    }

    /// The plugin's output line. The performance data (`age`) is there only when the age is
    /// known: an UNKNOWN check has no number to give, and `age=s` would be a malformed value.
    pub fn line(&self, warn: u64, error: u64) -> String {
        let message = self.message.replace(['\n', '\r', '|'], " ");
        let state = self.state.word();
        match self.age {
            Some(age) => format!(
                "ZKDEPLOYMENT {state} - {message} | age={}s;{warn};{error};0",
                age.max(0.0).floor() as u64
            ),
            None => format!("ZKDEPLOYMENT {state} - {message}"),
        }
    }
}

/// An UNKNOWN check (internal problems).
pub fn unknown(message: impl Into<String>) -> Check {
    Check::new(State::Unknown, message, None)
}

/// What the check read.
#[derive(Debug, Clone)]
pub struct Observed {
    /// This host's id.
    pub host_id: String,
    /// The status file.
    pub status: StatusLine,
    /// The host node's properties, if registered.
    pub host: Option<Props>,
    /// `/hosts` properties.
    pub cluster: Props,
    /// Now (Unix seconds).
    pub now: f64,
}

/// The checks, in order (docs/operations.md).
pub fn evaluate(o: &Observed, warn: u64, error: u64) -> Check {
    let age = o.now - o.status.time;
    let with_age = |state, message: String| Check::new(state, message, Some(age));
    let Some(host) = &o.host else {
        return with_age(State::Critical, "Host not registered".into());
    };
    let status = o.status.status.as_str();
    if status == "error" {
        let err = host.get("error").map(py_str).unwrap_or_default();
        return with_age(
            State::Critical,
            format!("Error deploying {}: {err}", o.status.version),
        );
    }
    let cluster = o.cluster.get("version").cloned().unwrap_or(Value::Null);
    if cluster.is_null() {
        return match o.cluster.get("halt") {
            Some(Value::Object(h)) => {
                let by = h.get("host").map(py_str).unwrap_or_default();
                let name = h.get("name").map(py_str).unwrap_or_else(|| by.clone());
                let message = format!(
                    "Cluster halted by {name}: {}",
                    h.get("error").map(py_str).unwrap_or_default()
                );
                let state = if by == o.host_id {
                    State::Critical
                } else {
                    State::Warning
                };
                with_age(state, message)
            }
            _ => with_age(State::Warning, "Cluster version is None".into()),
        };
    }
    if cluster == Value::Bool(false) {
        return with_age(State::Ok, "Deployments paused".into());
    }
    if status == "done" {
        let c = version_token(&cluster);
        if o.status.version != c {
            return with_age(
                State::Critical,
                format!(
                    "Version mismatch (status: {}, cluster: {c})",
                    o.status.version
                ),
            );
        }
        let Some(hv) = host.get("version") else {
            return with_age(State::Critical, "No version information for host".into());
        };
        let h = version_token(hv);
        if h != o.status.version {
            return with_age(
                State::Critical,
                format!("Version mismatch (status: {}, zk: {h})", o.status.version),
            );
        }
        return with_age(State::Ok, o.status.version.clone());
    }
    let (state, threshold) = if age > error as f64 {
        (State::Critical, error)
    } else if age > warn as f64 {
        (State::Warning, warn)
    } else {
        return with_age(State::Ok, status.to_string());
    };
    let message = format!(
        "Too long deploying {} ({status}; {} > {threshold})",
        o.status.version,
        age.floor() as u64
    );
    with_age(state, message)
}

/// Reads the status file and ZooKeeper, within `budget` overall.
pub async fn gather(
    host_id: &str,
    run_dir: &Path,
    connect_opts: &ConnectOptions,
    budget: Duration,
) -> Result<Observed, Check> {
    let path = run_dir.join("status");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        unknown(format!(
            "cannot read the status file {}: {e}",
            path.display()
        ))
    })?;
    let status = parse_status(&text).map_err(|e| unknown(format!("{}: {e}", path.display())))?;
    let read = async {
        let client = connect(connect_opts)
            .await
            .map_err(|e| unknown(e.to_string()))?;
        let host_path = host_path(host_id);
        let mut cluster = match call("get", HOSTS, client.get_data(HOSTS)).await {
            Ok((data, _)) => decode(&data),
            Err(e) if e.is_no_node() => {
                return Err(unknown(format!("{HOSTS} does not exist in ZooKeeper")))
            }
            Err(e) => return Err(unknown(e.to_string())),
        };
        // A halt recorded under /hosts-halt (a protected cluster) is a halt like any other.
        let halts = crate::zk::halts::read_halts(&client)
            .await
            .map_err(|e| unknown(e.to_string()))?;
        crate::zk::halts::effective(&mut cluster, &halts);
        let host = match call("get", &host_path, client.get_data(&host_path)).await {
            Ok((data, _)) => Some(decode(&data)),
            Err(e) if e.is_no_node() => None,
            Err(e) => return Err(unknown(e.to_string())),
        };
        Ok((cluster, host))
    };
    let (cluster, host) = tokio::time::timeout(budget, read).await.map_err(|_| {
        unknown(format!(
            "ZooKeeper at {} did not answer within {} s",
            connect_opts.connection,
            budget.as_secs()
        ))
    })??;
    Ok(Observed {
        host_id: host_id.to_string(),
        status,
        host,
        cluster,
        now: crate::files::now(),
    })
}
