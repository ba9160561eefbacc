//! The Nagios check: what the state of this host's deployments is, as one line
//! `ZKDEPLOYMENT <STATE> - <message> | age=<seconds>s;<warn>;<error>;0` (no `| age=…` when
//! the age is unknown) and the plugin exit codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
//! [`evaluate`] is pure: the checks of docs/operations.md, in order, over what [`gather`]
//! read (the status file, the host node, `/hosts`, and the halts and pauses of the nodes a
//! `blocked` status names).
//! [`evaluate_syncer`] is the check of the syncer (`monitor --syncer`): its tombstone and the
//! age of its last successful run ([`crate::sync::local::Tombstone`]).
//! The original's one-word messages (`Host not registered`, `Cluster version is None`,
//! `Version mismatch (...)`, `Too long deploying ...`) appear verbatim inside the line.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::agent::status::{parse_status, version_token, StatusLine};
use crate::sync::local::{Tombstone, RUNNING_MARK, SUCCESS_SUFFIX};
use crate::tree::literal::py_str;
use crate::tree::Props;
use crate::zk::node_state::NodeState;
use crate::zk::paths::{host_path, HOSTS};
use crate::zk::tls::ClientCert;
use crate::zk::{call, connect, decode, ConnectOptions};

/// A plugin state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
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
    pub(crate) fn code(self) -> u8 {
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
pub(crate) struct Check {
    /// The state.
    pub(crate) state: State,
    /// The message.
    pub(crate) message: String,
    /// Seconds since the status file was written, if known.
    pub(crate) age: Option<f64>,
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
    pub(crate) fn line(&self, warn: u64, error: u64) -> String {
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
pub(crate) fn unknown(message: impl Into<String>) -> Check {
    Check::new(State::Unknown, message, None)
}

/// What the check read.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// This host's id.
    pub(crate) host_id: String,
    /// The status file.
    pub(crate) status: StatusLine,
    /// The host node's properties, if registered.
    pub(crate) host: Option<Props>,
    /// `/hosts` properties.
    pub(crate) cluster: Props,
    /// The halts and pauses of the application nodes a `blocked` status names.
    pub(crate) nodes: Vec<NodeState>,
    /// Now (Unix seconds).
    pub(crate) now: f64,
}

/// The checks, in order (docs/operations.md).
pub(crate) fn evaluate(o: &Observed, warn: u64, error: u64) -> Check {
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
    if let Some((state, message)) = blocked_check(&o.nodes) {
        return with_age(state, message);
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

/// The check of a `blocked` status: WARNING `Deployment of PATH halted by HOST: ERROR` for
/// the first named node that is halted, else OK `Deployment of PATH paused` for the first
/// paused; `None` when none is (resumed since: the status is then judged by its age).
fn blocked_check(nodes: &[NodeState]) -> Option<(State, String)> {
    if let Some((path, h)) = nodes
        .iter()
        .find_map(|n| Some((&n.path, n.halt.as_ref()?.as_object()?)))
    {
        let by = h.get("host").map(py_str).unwrap_or_default();
        let name = h.get("name").map(py_str).unwrap_or(by);
        let error = h.get("error").map(py_str).unwrap_or_default();
        return Some((
            State::Warning,
            format!("Deployment of {path} halted by {name}: {error}"),
        ));
    }
    nodes
        .iter()
        .find(|n| n.pause.is_some())
        .map(|n| (State::Ok, format!("Deployment of {} paused", n.path)))
}

/// How long before the TLS client certificate's expiry the check warns.
pub(crate) const CERT_WARN_SECS: i64 = 14 * 86_400;

/// `check` with the TLS client certificate's expiry: CRITICAL once it has expired (whatever
/// else was found: the agent cannot connect with it), WARNING (at least) within
/// [`CERT_WARN_SECS`] of its expiry.
pub(crate) fn with_cert_expiry(check: Check, cert: &ClientCert, now: i64) -> Check {
    let file = cert.path.display();
    let when = crate::zk::tls::utc(cert.not_after);
    if cert.not_after <= now {
        let message = format!("TLS client certificate {file} expired at {when}");
        return Check::new(State::Critical, message, check.age);
    }
    if cert.not_after - now > CERT_WARN_SECS {
        return check;
    }
    let days = (cert.not_after - now + 43_200) / 86_400;
    let note = format!("TLS client certificate {file} expires at {when} (in {days} days)");
    match check.state {
        State::Ok => Check::new(State::Warning, note, check.age),
        _ => Check::new(check.state, format!("{}; {note}", check.message), check.age),
    }
}

/// Reads the status file and ZooKeeper, within `budget` overall.
pub(crate) async fn gather(
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
        let mut nodes = Vec::new();
        for path in status.blocked().unwrap_or_default() {
            let state = crate::zk::node_state::read_holds(&client, &path)
                .await
                .map_err(|e| unknown(e.to_string()))?;
            nodes.push(state);
        }
        Ok((cluster, host, nodes))
    };
    let (cluster, host, nodes) = tokio::time::timeout(budget, read).await.map_err(|_| {
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
        nodes,
        now: crate::files::now(),
    })
}

/// What the syncer check read.
#[derive(Debug, Clone)]
pub(crate) struct SyncerObserved {
    /// The tombstone's path (for messages).
    pub(crate) tombstone_path: String,
    /// The tombstone's content, if there is one.
    pub(crate) tombstone: Option<String>,
    /// Whether the tombstone is a run in progress (its pid alive).
    pub(crate) running: bool,
    /// When the last run ended well (Unix seconds), per the success stamp.
    pub(crate) last_success: Option<f64>,
    /// Now (Unix seconds).
    pub(crate) now: f64,
}

/// The syncer check: the age of the last successful sync against `warn` / `error` seconds;
/// a tombstone left by a failed or refused run is at least WARNING, and names the reason.
pub(crate) fn evaluate_syncer(o: &SyncerObserved, warn: u64, error: u64) -> Check {
    let age = o.last_success.map(|t| (o.now - t).max(0.0));
    let failed = o.tombstone.as_ref().filter(|_| !o.running);
    let by_age = match age {
        Some(a) if a > error as f64 => State::Critical,
        Some(a) if a > warn as f64 => State::Warning,
        Some(_) => State::Ok,
        None => State::Critical,
    };
    let since = match age {
        Some(a) => format!("last successful sync {} s ago", a.floor() as u64),
        None => "no successful sync recorded".to_string(),
    };
    let (state, message) = match (failed, age) {
        (None, None) => (
            State::Unknown,
            format!(
                "no sync has succeeded yet (no {}{})",
                o.tombstone_path, SUCCESS_SUFFIX
            ),
        ),
        (None, Some(_)) if by_age == State::Ok => (State::Ok, since),
        (None, Some(a)) => (
            by_age,
            format!(
                "{since} (> {})",
                if a > error as f64 { error } else { warn }
            ),
        ),
        (Some(reason), _) => (
            if by_age == State::Ok {
                State::Warning
            } else {
                by_age
            },
            format!("last sync did not succeed: {reason}; {since}"),
        ),
    };
    Check::new(state, message, age)
}

/// Reads the syncer's tombstone and success stamp (local files only).
pub(crate) fn gather_syncer(tombstone: &Path) -> Result<SyncerObserved, Check> {
    let stone = Tombstone::new(tombstone);
    let shown = tombstone.display().to_string();
    let content = stone
        .read()
        .map_err(|e| unknown(format!("cannot read the tombstone {shown}: {e}")))?;
    let last_success = stone.last_success().map_err(|e| {
        unknown(format!(
            "cannot read {}: {e}",
            stone.success_path().display()
        ))
    })?;
    // `<pid> acquired lock`: a run in progress, if that process lives.
    let running = content.as_deref().is_some_and(|text| {
        text.strip_suffix(RUNNING_MARK)
            .and_then(|pid| pid.trim().parse::<i64>().ok())
            .is_some_and(crate::command::pid_alive)
    });
    Ok(SyncerObserved {
        tombstone_path: shown,
        tombstone: content,
        running,
        last_success,
        now: crate::files::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(not_after: i64) -> ClientCert {
        ClientCert {
            path: "/tls/h1.crt".into(),
            subject: "CN=h1".into(),
            not_after,
        }
    }

    #[test]
    fn certificate_expiry_warns_within_14_days_and_is_critical_once_expired() {
        let now = 1_700_000_000;
        let ok = Check::new(State::Ok, "v1", Some(3.0));
        assert_eq!(
            with_cert_expiry(ok.clone(), &cert(now + 15 * 86_400), now),
            ok
        );
        let warned = with_cert_expiry(ok.clone(), &cert(now + 5 * 86_400 - 10), now);
        assert_eq!(warned.state, State::Warning);
        assert!(warned.message.contains("/tls/h1.crt") && warned.message.contains("(in 5 days)"));
        assert_eq!(warned.age, Some(3.0));
        let critical = Check::new(State::Critical, "Version mismatch", Some(3.0));
        let both = with_cert_expiry(critical, &cert(now + 86_400), now);
        assert_eq!(both.state, State::Critical);
        assert!(both
            .message
            .starts_with("Version mismatch; TLS client certificate"));
        let expired = with_cert_expiry(ok, &cert(now - 1), now);
        assert_eq!(expired.state, State::Critical);
        assert!(
            expired
                .message
                .contains("expired at 2023-11-14 22:13:19 UTC"),
            "{expired:?}"
        );
    }
}
