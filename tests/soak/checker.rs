//! The checker over what the scripts logged, what the lock oracle saw and what the operator
//! observed (the final ZooKeeper state is checked in `main.rs`). Each check only flags what
//! the program promises (README, "Reliability"); every violation is one line of text.
//!
//! - Locks: no run without its lock (the oracle's verdicts), and never more runs of one
//!   application node (hosts without a role) or of the role (hosts with it: the persistent
//!   role lock covers the controller's scripts and the deployments) at one instant than the
//!   lock allows ([`allowed`]: 1 today; parallel leases would return their size).
//! - Runs end: a run without an `end` line must have been killed with its agent.
//! - Halts: each has its record (host, name, version, error, time) and a cause the nemesis
//!   made (a failed run of the recording host, or, for an in-flight record, a host the
//!   nemesis killed or cut off, or a server fault); each failed run is followed by a halt
//!   (unless its agent was killed or lost its session before it could write it).
//! - Versions: an agent that records version V had no failed run at V that was not followed
//!   by a new pass (so it never records a version whose scripts did not all succeed).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::oracle::{Check, Verdict};
use super::tree::Tree;
use super::world::{Journal, AGENT_SESSION};

/// One run of a script.
#[derive(Debug, Clone)]
pub struct RunLog {
    /// `HOST:PID:RANDOM`.
    pub id: String,
    /// Host id.
    pub host: String,
    /// The agent's pid (the script's parent).
    pub agent: u64,
    /// `deploy`, `undeploy`, `starting-deployments`, `ending-deployments`.
    pub kind: String,
    /// Application path (or role path).
    pub path: String,
    /// Instance (`-` for controller scripts).
    pub n: String,
    /// `ZKDEPLOYMENT_VERSION`.
    pub version: String,
    /// Start time.
    pub start: f64,
    /// End time (the kill time for a run killed with its agent).
    pub end: Option<f64>,
    /// Exit status (None if killed).
    pub rc: Option<i32>,
}

/// Counts for the summary line.
#[derive(Debug, Default)]
pub struct Counts {
    /// Script runs.
    pub runs: usize,
    /// Runs whose lock the oracle could not check (ZooKeeper unreachable).
    pub unknown: usize,
    /// Why the first unchecked run could not be checked.
    pub unknown_example: Option<String>,
}

/// Reads the scripts' log.
pub fn read_runs(file: &Path) -> Result<Vec<RunLog>, String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut runs: Vec<RunLog> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match (f.first().copied(), f.len()) {
            (Some("start"), 9) => {
                index.insert(f[1].to_string(), runs.len());
                runs.push(RunLog {
                    id: f[1].into(),
                    host: f[2].into(),
                    agent: f[3].parse().unwrap_or(0),
                    kind: f[4].into(),
                    path: f[5].into(),
                    n: f[6].into(),
                    version: f[7].into(),
                    start: f[8].parse().map_err(|_| format!("bad time in {line:?}"))?,
                    end: None,
                    rc: None,
                });
            }
            (Some("end"), 9) => {
                let Some(&i) = index.get(f[1]) else {
                    return Err(format!("an end without a start: {line:?}"));
                };
                runs[i].end = f[7].parse().ok();
                runs[i].rc = f[8].parse().ok();
            }
            _ => return Err(format!("a malformed line in the scripts' log: {line:?}")),
        }
    }
    Ok(runs)
}

/// How many hosts may be inside one lock at once (`node` is an application path, or
/// `role:<role>`). Parallel leases (a later issue) would return the lease size here.
pub fn allowed(_lock: &str) -> usize {
    1
}

/// Runs every check; returns the violations.
pub fn check(
    runs: &mut [RunLog],
    verdicts: &[Verdict],
    journal: &Journal,
    counts: &mut Counts,
) -> Vec<String> {
    let mut out = Vec::new();
    counts.runs = runs.len();
    close_killed_runs(runs, journal, &mut out);
    check_verdicts(runs, verdicts, counts, &mut out);
    check_overlaps(runs, &mut out);
    check_halts(runs, journal, &mut out);
    check_versions(runs, journal, &mut out);
    out
}

/// A run without an `end` ends when its agent was killed (the kill takes the scripts too).
fn close_killed_runs(runs: &mut [RunLog], journal: &Journal, out: &mut Vec<String>) {
    for run in runs.iter_mut().filter(|r| r.end.is_none()) {
        let killed = journal
            .kills
            .iter()
            .filter(|(h, t)| *h == run.host && *t >= run.start)
            .map(|(_, t)| *t)
            .fold(f64::INFINITY, f64::min);
        if killed.is_finite() {
            run.end = Some(killed);
        } else {
            out.push(format!(
                "a run never ended and its agent was not killed: {run:?}"
            ));
        }
    }
}

/// True if a fault that can cost `host` its session overlapped `[from, to]`.
fn session_fault(journal: &Journal, host: &str, from: f64, to: f64) -> bool {
    let grace = AGENT_SESSION + 2.0;
    journal
        .cuts
        .iter()
        .any(|(h, a, b)| h == host && *a <= to && *b + grace >= from)
        || journal
            .ensemble
            .iter()
            .any(|(a, b)| *a <= to && *b + grace >= from)
}

/// The longest check that still proves anything, in seconds: the agent wrote the in-flight
/// record (a write proves its session alive) just before it started the script, and a
/// session lives at least its timeout ([`AGENT_SESSION`]) after its last contact, so a check
/// done well within that sees the lock as the script got it. A slower check (the oracle's
/// own requests waited for a server) proves nothing and is counted as unchecked.
pub const PROMPT: f64 = AGENT_SESSION / 2.0;

fn check_verdicts(
    runs: &[RunLog],
    verdicts: &[Verdict],
    counts: &mut Counts,
    out: &mut Vec<String>,
) {
    let by_id: BTreeMap<&str, &Verdict> = verdicts.iter().map(|v| (v.id.as_str(), v)).collect();
    for run in runs.iter().filter(|r| r.kind != "undeploy") {
        let Some(verdict) = by_id.get(run.id.as_str()) else {
            counts.unknown += 1;
            counts
                .unknown_example
                .get_or_insert_with(|| format!("no answer for {}", run.id));
            continue;
        };
        match &verdict.check {
            _ if verdict.elapsed > PROMPT => {
                counts.unknown += 1;
                counts
                    .unknown_example
                    .get_or_insert_with(|| format!("a check took {:.1} s", verdict.elapsed));
            }
            Check::Ok => {}
            Check::Unknown(why) => {
                counts.unknown += 1;
                counts.unknown_example.get_or_insert_with(|| why.clone());
            }
            Check::Bad(why) => out.push(format!("a run without its lock: {why}: {run:?}")),
        }
    }
}

fn check_overlaps(runs: &[RunLog], out: &mut Vec<String>) {
    let mut by_lock: BTreeMap<String, Vec<&RunLog>> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.kind != "undeploy") {
        let lock = if run.path.starts_with("/acme/") {
            run.path.clone()
        } else {
            "role:web".to_string()
        };
        by_lock.entry(lock).or_default().push(run);
    }
    for (lock, mut list) in by_lock {
        list.sort_by(|a, b| a.start.total_cmp(&b.start));
        for (i, run) in list.iter().enumerate() {
            let inside: Vec<&&RunLog> = list[..i]
                .iter()
                .filter(|r| r.end.unwrap_or(f64::INFINITY) > run.start)
                .collect();
            // Runs of one host inside the role lock (controller, deployments) are one holder.
            let holders: BTreeSet<&str> = inside
                .iter()
                .map(|r| r.host.as_str())
                .chain([run.host.as_str()])
                .collect();
            let count = if lock.starts_with("role:") {
                holders.len()
            } else {
                inside.len() + 1
            };
            if count > allowed(&lock) {
                out.push(format!(
                    "{count} runs inside {lock} at {:.3} (allowed {}): {run:?} while {inside:?}",
                    run.start,
                    allowed(&lock)
                ));
            }
        }
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

fn check_halts(runs: &[RunLog], journal: &Journal, out: &mut Vec<String>) {
    let mut halt_times = Vec::new();
    for (seen, props) in &journal.halts {
        let Some(Value::Object(halt)) = props.get("halt") else {
            out.push(format!("a halt at {seen:.3} without its record: {props:?}"));
            continue;
        };
        let missing: Vec<&str> = ["host", "name", "version", "error", "time"]
            .into_iter()
            .filter(|k| !halt.contains_key(*k))
            .collect();
        if !missing.is_empty() {
            out.push(format!("a halt record without {missing:?}: {halt:?}"));
            continue;
        }
        let time = halt["time"].as_f64().unwrap_or(*seen);
        halt_times.push(time);
        let host = text(halt.get("host"));
        let error = text(halt.get("error"));
        let explained = if error.contains(") died deploying") {
            // "NAME (HOST) died deploying ...": the dead holder.
            let dead = error
                .split(") died deploying")
                .next()
                .and_then(|s| s.rsplit_once('('))
                .map(|(_, h)| h.to_string())
                .unwrap_or_default();
            journal.kills.iter().any(|(h, t)| *h == dead && *t <= time)
                || journal
                    .cuts
                    .iter()
                    .any(|(h, a, _)| *h == dead && *a <= time)
                || journal.ensemble.iter().any(|(a, _)| *a <= time)
        } else {
            runs.iter()
                .any(|r| r.host == host && r.rc.is_some_and(|rc| rc != 0) && r.start <= time + 1.0)
        };
        if !explained {
            out.push(format!("a halt no fault explains: {halt:?}"));
        }
    }
    for run in runs.iter().filter(|r| r.rc.is_some_and(|rc| rc != 0)) {
        if halt_times.iter().any(|t| *t >= run.start - 1.0) {
            continue;
        }
        // The halt is written after the script ends: an agent killed, or whose session was
        // lost, in between abandons the pass instead (and runs it again).
        let end = run.end.unwrap_or(run.start);
        let lost = journal
            .kills
            .iter()
            .any(|(h, t)| *h == run.host && *t >= run.start && *t <= end + 30.0)
            || session_fault(journal, &run.host, run.start, end + 1.0);
        if !lost {
            out.push(format!("a failed run halted nothing: {run:?}"));
        }
    }
}

fn check_versions(runs: &[RunLog], journal: &Journal, out: &mut Vec<String>) {
    let mut flagged = BTreeSet::new();
    for (host, version, pid, seen) in &journal.samples {
        // The runs of this agent process at this version, before the sample.
        let agent = |r: &&RunLog| {
            r.host == *host && r.version == *version && r.start < *seen && r.agent == *pid
        };
        let failed = runs
            .iter()
            .filter(agent)
            .filter(|r| r.rc != Some(0))
            .map(|r| r.end.unwrap_or(r.start))
            .fold(f64::NEG_INFINITY, f64::max);
        if failed.is_finite()
            && !runs.iter().filter(agent).any(|r| r.start > failed)
            && flagged.insert((host.clone(), version.clone(), *pid))
        {
            out.push(format!(
                "{host} (agent {pid}) recorded version {version} after a run at that version \
                 failed at {failed:.3}, with no pass since"
            ));
        }
    }
}

/// After convergence on `version` (the last commit, `tree`): every host ran every
/// deployment the tree gives it, and (role hosts) both controller scripts, successfully at
/// that version.
pub fn check_converged_runs(
    runs: &[RunLog],
    version: &str,
    tree: &Tree,
    hosts: &[(String, bool)],
) -> Vec<String> {
    let mut out = Vec::new();
    for (host, role) in hosts {
        let ok = |kind: &str, path: &str, n: &str| {
            runs.iter().any(|r| {
                r.host == *host
                    && r.version == version
                    && r.kind == kind
                    && r.path == path
                    && r.n == n
                    && r.rc == Some(0)
            })
        };
        for (path, n) in tree.wanted(host, *role) {
            if !ok("deploy", &path, &n.to_string()) {
                out.push(format!(
                    "{host} is at {version} without a successful run of {path} {n}"
                ));
            }
        }
        if *role {
            for kind in ["starting-deployments", "ending-deployments"] {
                let path = format!("/roles/{}", super::tree::ROLE);
                if !ok(kind, &path, "-") {
                    out.push(format!(
                        "{host} is at {version} without a successful {kind}"
                    ));
                }
            }
        }
    }
    out
}
