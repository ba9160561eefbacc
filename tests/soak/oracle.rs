//! The lock oracle: a TCP service in the test process that every soak script calls before it
//! starts work (`payload.rs`), so that "no deploy script runs without its lock" is checked
//! against ZooKeeper while the script runs, not guessed afterwards.
//!
//! Request (one line): `ID HOST AGENT-PID ROLE KIND PATH N VERSION`. After a `sync` (so a
//! lagging follower answers as the leader would) the oracle checks:
//! - a host without a role: the first contender of `/agent-locks/<name>` is the host's
//!   (identifier `... (HOST)`), made by the same session as its host node `/hosts/HOST`, and
//!   the lock node's in-flight record names this host, agent pid, path, instance and version;
//! - a host with a role: the first request of the persistent `/role-locks/ROLE` is the host's.
//!
//! - or, for a host without a role that does not hold the node lock: one of the leases of
//!   the semaphore `/agent-semaphores/<name>` is the host's (its data `... (HOST)`), made by
//!   the same session as its host node, and the in-flight record kept under that lease's name
//!   in `/agent-semaphores/<name>-__in-flight__/<lease>` names this host,
//!   agent pid, path, instance and version. That record is how a script proves it holds a
//!   lease, as the lock node's record does for the lock.
//!
//! Health checks (KIND `health`) ask too: they run while the deploy step's lock or lease is
//! held, with its in-flight record still in place.
//!
//! It records a [`Verdict`] per run (with what was held: `lock`, `lease` or `role`) and
//! answers `ok` (the answer is only a go signal). A check it could not make (ZooKeeper
//! unreachable) is recorded as unknown, never as a violation; so is one that took too long
//! (see `checker.rs`): a holder's session can only have expired behind its back if the
//! oracle looked seconds after the agent's last write.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use zkdeployment::zk::decode;

use super::zk::Zk;

/// What the oracle found for one script run.
#[derive(Debug, Clone)]
pub enum Check {
    /// The host held the lock it needs.
    Ok,
    /// It did not (why).
    Bad(String),
    /// ZooKeeper could not tell (why).
    Unknown(String),
}

/// One checked run.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The run's id (as in the scripts' log).
    pub id: String,
    /// What was found.
    pub check: Check,
    /// How long the check took, in seconds (from the script's connection to the verdict).
    pub elapsed: f64,
    /// When the verdict was known (Unix time, seconds): after its reads. A health check
    /// waits 1 s at most for the answer, so it may have ended before that, and its agent may
    /// hold the lock for its next step by then; such a check proves nothing (`checker.rs`).
    pub at: f64,
    /// What the run held when the check passed: `lock`, `lease`, `role` (empty otherwise).
    pub held: &'static str,
}

/// Serves until the listener is dropped with the task; verdicts go to `out`.
pub async fn serve(listener: TcpListener, zk: Arc<Zk>, out: Arc<Mutex<Vec<Verdict>>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (zk, out) = (zk.clone(), out.clone());
        let started = std::time::Instant::now();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            let mut reader = BufReader::new(read);
            let got = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                reader.read_line(&mut line),
            )
            .await;
            if !matches!(got, Ok(Ok(n)) if n > 0) {
                return;
            }
            let mut verdict = check(&zk, line.trim()).await;
            verdict.elapsed = started.elapsed().as_secs_f64();
            verdict.at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            out.lock().unwrap().push(verdict);
            let _ = write.write_all(b"ok\n").await;
        });
    }
}

async fn check(zk: &Zk, line: &str) -> Verdict {
    let f: Vec<&str> = line.split(' ').collect();
    let id = f.first().copied().unwrap_or("").to_string();
    let (check, held) = if f.len() != 8 {
        (Check::Bad(format!("malformed oracle request {line:?}")), "")
    } else if f[2] == "1" {
        // The script's parent is init: its agent was SIGKILLed as it started the script (the
        // nemesis kills an agent's children as it found them just before), so the run cannot
        // say which agent it belongs to.
        (
            Check::Unknown(format!("{}: its agent died as it started", f[0])),
            "",
        )
    } else if f[3] != "-" {
        (role_check(zk, f[1], f[3]).await, "role")
    } else {
        let run = Holder {
            host: f[1],
            pid: f[2],
            path: f[5],
            n: f[6],
            version: f[7],
        };
        match node_check(zk, &run).await {
            Check::Bad(lock_why) => match lease_check(zk, &run).await {
                Check::Bad(lease_why) => (
                    Check::Bad(format!(
                        "neither the lock ({lock_why}) nor a lease ({lease_why})"
                    )),
                    "",
                ),
                other => (other, "lease"),
            },
            other => (other, "lock"),
        }
    };
    let held = if matches!(check, Check::Ok) { held } else { "" };
    Verdict {
        id,
        check,
        elapsed: 0.0,
        at: 0.0,
        held,
    }
}

/// Who a run says it is.
struct Holder<'a> {
    host: &'a str,
    pid: &'a str,
    path: &'a str,
    n: &'a str,
    version: &'a str,
}

impl Holder<'_> {
    /// Checks an in-flight record against the run; `place` names where it was found.
    fn matches(&self, record: &Value, place: &str) -> Check {
        let text = |k: &str| match record.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        let want = [
            ("host", self.host),
            ("pid", self.pid),
            ("path", self.path),
            ("n", self.n),
            ("version", self.version),
        ];
        for (k, v) in want {
            if text(k) != v {
                return Check::Bad(format!(
                    "the in-flight record in {place} says {k} = {:?}, the run {v:?}: {record}",
                    text(k)
                ));
            }
        }
        Check::Ok
    }

    /// The session of the host's node (`Err`: the check to give).
    async fn session(&self, zk: &Zk, holding: &str) -> Result<i64, Check> {
        let hp = format!("/hosts/{}", self.host);
        let h2 = hp.clone();
        match zk.call(|c| async move { c.check_stat(&h2).await }).await {
            Ok(Some(s)) => Ok(s.ephemeral_owner),
            Ok(None) => Err(Check::Bad(format!(
                "{hp} is missing while {} holds {holding}",
                self.host
            ))),
            Err(e) => Err(Check::Unknown(format!("stat {hp}: {e}"))),
        }
    }
}

/// The semaphore of an application path (docs/design.md, "Exclusion").
pub fn semaphore_node(path: &str) -> String {
    format!(
        "/agent-semaphores/{}",
        path.trim_start_matches('/').replace('/', ",")
    )
}

/// The run holds a lease of its node's semaphore, with its in-flight record beside it.
async fn lease_check(zk: &Zk, run: &Holder<'_>) -> Check {
    let sem = semaphore_node(run.path);
    let s = sem.clone();
    if let Err(e) = zk.call(|c| async move { c.sync(&s).await }).await {
        return Check::Unknown(format!("sync {sem}: {e}"));
    }
    let s = sem.clone();
    let leases = match zk
        .call_opt(|c| async move { c.list_children(&s).await })
        .await
    {
        Ok(Some(l)) => l,
        Ok(None) => return Check::Bad(format!("{sem} does not exist")),
        Err(e) => return Check::Unknown(format!("list {sem}: {e}")),
    };
    let mut ours = Vec::new();
    for lease in &leases {
        let node = format!("{sem}/{lease}");
        let n2 = node.clone();
        match zk.call_opt(|c| async move { c.get_data(&n2).await }).await {
            Ok(Some((data, stat))) => {
                if String::from_utf8_lossy(&data).ends_with(&format!("({})", run.host)) {
                    ours.push((lease.clone(), stat.ephemeral_owner));
                }
            }
            Ok(None) => {}
            Err(e) => return Check::Unknown(format!("get {node}: {e}")),
        }
    }
    if ours.is_empty() {
        return Check::Bad(format!(
            "no lease of {sem} is {}'s ({} leases)",
            run.host,
            leases.len()
        ));
    }
    let session = match run.session(zk, &sem).await {
        Ok(s) => s,
        Err(check) => return check,
    };
    let records = format!("{sem}-__in-flight__");
    let mut why = Vec::new();
    for (lease, owner) in ours {
        if owner != session {
            why.push(format!(
                "lease {lease} belongs to session {owner:#x}, /hosts/{} to {session:#x}",
                run.host
            ));
            continue;
        }
        let node = format!("{records}/{lease}");
        let n2 = node.clone();
        let record = match zk.call_opt(|c| async move { c.get_data(&n2).await }).await {
            Ok(Some((data, _))) => serde_json::from_slice(&data).unwrap_or(Value::Null),
            Ok(None) => Value::Null,
            Err(e) => return Check::Unknown(format!("get {node}: {e}")),
        };
        match run.matches(&record, &node) {
            Check::Ok => return Check::Ok,
            Check::Bad(w) | Check::Unknown(w) => why.push(w),
        }
    }
    Check::Bad(why.join("; "))
}

/// The lock node of an application path (docs/tree-format.md).
pub fn lock_node(path: &str) -> String {
    format!(
        "/agent-locks/{}",
        path.trim_start_matches('/').replace('/', ",")
    )
}

fn seq(name: &str) -> &str {
    name.rsplit_once("__lock__")
        .map(|(_, s)| s)
        .or_else(|| name.strip_prefix("lr-"))
        .unwrap_or(name)
}

async fn node_check(zk: &Zk, run: &Holder<'_>) -> Check {
    let host = run.host;
    let lock = lock_node(run.path);
    let l = lock.clone();
    if let Err(e) = zk.call(|c| async move { c.sync(&l).await }).await {
        return Check::Unknown(format!("sync {lock}: {e}"));
    }
    let l = lock.clone();
    let mut contenders = match zk
        .call_opt(|c| async move { c.list_children(&l).await })
        .await
    {
        Ok(Some(c)) => c,
        Ok(None) => return Check::Bad(format!("{lock} does not exist")),
        Err(e) => return Check::Unknown(format!("list {lock}: {e}")),
    };
    contenders.retain(|c| c.contains("__lock__"));
    contenders.sort_by(|a, b| seq(a).cmp(seq(b)));
    let Some(first) = contenders.first() else {
        return Check::Bad(format!("{lock} has no contender"));
    };
    let node = format!("{lock}/{first}");
    let n2 = node.clone();
    let (data, stat) = match zk.call_opt(|c| async move { c.get_data(&n2).await }).await {
        Ok(Some(d)) => d,
        Ok(None) => return Check::Bad(format!("{node} went away while {host} ran")),
        Err(e) => return Check::Unknown(format!("get {node}: {e}")),
    };
    let identifier = String::from_utf8_lossy(&data).into_owned();
    if !identifier.ends_with(&format!("({host})")) {
        return Check::Bad(format!("{lock} is held by {identifier:?}, not by {host}"));
    }
    let owner = match run.session(zk, &lock).await {
        Ok(s) => s,
        Err(check) => return check,
    };
    if owner != stat.ephemeral_owner {
        return Check::Bad(format!(
            "{node} belongs to session {:#x}, /hosts/{host} to session {owner:#x}",
            stat.ephemeral_owner
        ));
    }
    let l = lock.clone();
    let props = match zk.call(|c| async move { c.get_data(&l).await }).await {
        Ok((data, _)) => decode(&data),
        Err(e) => return Check::Unknown(format!("get {lock}: {e}")),
    };
    let record = props.get("in-flight").cloned().unwrap_or(Value::Null);
    run.matches(&record, &lock)
}

async fn role_check(zk: &Zk, host: &str, role: &str) -> Check {
    let lock = format!("/role-locks/{role}");
    let l = lock.clone();
    if let Err(e) = zk.call(|c| async move { c.sync(&l).await }).await {
        return Check::Unknown(format!("sync {lock}: {e}"));
    }
    let l = lock.clone();
    let mut requests = match zk.call(|c| async move { c.list_children(&l).await }).await {
        Ok(r) => r,
        Err(e) => return Check::Unknown(format!("list {lock}: {e}")),
    };
    requests.retain(|r| r.starts_with("lr-"));
    requests.sort_by(|a, b| seq(a).cmp(seq(b)));
    let Some(first) = requests.first() else {
        return Check::Bad(format!("{lock} has no request while {host} runs"));
    };
    let node = format!("{lock}/{first}");
    let n2 = node.clone();
    match zk.call(|c| async move { c.get_data(&n2).await }).await {
        Ok((data, _)) => {
            let who = decode(&data)
                .get("requestor")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if who == host {
                Check::Ok
            } else {
                Check::Bad(format!("{node} (the holder) is {who:?}'s, not {host}'s"))
            }
        }
        Err(e) => Check::Unknown(format!("get {node}: {e}")),
    }
}
