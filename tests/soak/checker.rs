//! The checker over what the scripts logged, what the lock oracle saw and what the operator
//! observed (the final ZooKeeper state is checked in `main.rs`). Each check only flags what
//! the program promises (docs/design.md, "Crash safety"); every violation is one line of text.
//!
//! - Locks and leases: no run (deploy script, controller script or health check) without its
//!   lock or lease (the oracle's verdicts); never more runs of the role (hosts with it: the
//!   persistent role lock covers the controller's scripts and the deployments) at one instant
//!   than one host's.
//! - Application nodes (hosts without a role), by deploy *step*: a deploy run and the health
//!   checks after it, held under one lock or lease from the script's start to the last
//!   check's end ([`steps`]). When a step starts, the steps inside its node (any version) and
//!   itself are at most K, the effective max-parallel of the version being deployed
//!   ([`Rollout`]: from the trees the agent may have read for that version, see
//!   [`candidates`]); node-lock steps never overlap; a lease is taken only where K > 1, the
//!   node lock only where K = 1 or for a canary; and no lease step starts a package version
//!   before `canary` hosts have deployed it (health check included) under the node lock.
//!   A step whose holder a halt declared dead (`... (HOST) died deploying PATH N (version
//!   V)`: its session was lost while its script ran on) no longer counts once the halt was
//!   resumed. The node lock and the semaphore's leases exclude each other (across a change
//!   of K, and canaries): a step that starts while a step under the other kind of place is
//!   inside is a violation (`cross`).
//! - Mixed fleets (the nemesis's `mixed-fleet` windows, while a host node of the original's
//!   agent is registered): a pass begun inside a window (from [`MIXED_SEEN`] after the node
//!   was created) uses the node lock with K = 1 for every node, so none of its steps that
//!   start before the node is removed holds a lease ([`check_mixed`]); with the node lock's
//!   own exclusion and `cross`, at most one host is inside a node then.
//! - Health checks: each follows a successful deploy run of its instance by the same agent,
//!   and a step whose last check did not pass halts the cluster with `Health check failed for
//!   PATH N: ...` (or, on a node with a failure budget, is settled by it: a quarantine or a
//!   node halt, `budget_check.rs`).
//! - Runs end: a run without an `end` line must have been killed with its agent.
//! - Halts: each has its record (host, name, version, error, time) and a cause the nemesis
//!   made (a failed run of the recording host, or, for an in-flight record, a host the
//!   nemesis killed or cut off, or a server fault); each failed run is followed by a halt, or
//!   on a node with a failure budget by a quarantine or a node halt (unless its agent was
//!   killed or lost its session before it could write it). A holder the
//!   nemesis killed mid-step is named by a halt (an agent's `halting the cluster: ... (HOST)
//!   died deploying PATH N`), or on a node with a failure budget by the host that counted it
//!   there (`... (HOST) died deploying PATH N ... (failed host P of PATH, ...)`), unless
//!   nobody deploys its node any more.
//! - Versions: an agent that records version V had no failed step at V (a failed script, a
//!   health check that never passed, or none run where the package has one) that was not
//!   followed by a new pass (so it never records a version whose steps did not all succeed).
//! - Failure budgets, node halts and pauses: `budget_check.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::budget_check::{settled, BudgetCounts};
use super::oracle::{Check, Verdict};
use super::tree::{has_health, Tree};
use super::world::{Journal, MixedWindow, AGENT_SESSION};

/// Every commit: (id, time made, tree), oldest first.
pub type Commits = [(String, f64, Tree)];

/// One run of a script.
#[derive(Debug, Clone)]
pub struct RunLog {
    /// `HOST:PID:RANDOM`.
    pub id: String,
    /// Host id.
    pub host: String,
    /// The agent's pid (the script's parent).
    pub agent: u64,
    /// `deploy`, `undeploy`, `starting-deployments`, `ending-deployments`, `health`, and
    /// `health-retry` for a health check another one of its step followed (its failure is
    /// no step's failure).
    pub kind: String,
    /// Application path (or role path).
    pub path: String,
    /// Instance (`-` for controller scripts).
    pub n: String,
    /// `ZKDEPLOYMENT_VERSION`.
    pub version: String,
    /// Its package's version.
    pub pkg: String,
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
    /// Deploy steps of hosts without a role under a lease, under the node lock, and canary
    /// steps (the node lock where K > 1).
    pub lease_steps: usize,
    /// See `lease_steps`.
    pub lock_steps: usize,
    /// See `lease_steps`.
    pub canary_steps: usize,
    /// The most steps seen inside one node at once.
    pub most_inside: usize,
    /// Health check runs; steps whose checks passed; steps whose checks failed.
    pub health_runs: usize,
    /// See `health_runs`.
    pub healthy: usize,
    /// See `health_runs`.
    pub unhealthy: usize,
    /// Holders killed mid-step (under a lease, a lock) and how many halts named them.
    pub killed_leases: usize,
    /// See `killed_leases`.
    pub killed_locks: usize,
    /// See `killed_leases`.
    pub named: usize,
    /// Killed holders no halt named, on nodes the last commit no longer deploys.
    pub unnamed: usize,
    /// Steps that started while a step under the node's other kind of place (the node lock
    /// against the semaphore's leases) was inside: each a violation.
    pub cross: usize,
    /// Steps on application nodes of passes begun inside a mixed-fleet window (see
    /// [`check_mixed`]), and how many of them were on a node whose version asked K > 1.
    pub mixed_steps: usize,
    /// See `mixed_steps`.
    pub mixed_parallel: usize,
    /// Steps still inside their node (by the scripts' log) when another started, after a
    /// halt had declared their holder dead and an operator had resumed.
    pub after_resume: usize,
    /// Runs whose lock the oracle could not check (ZooKeeper unreachable).
    pub unknown: usize,
    /// Why the first unchecked run could not be checked.
    pub unknown_example: Option<String>,
    /// Failure budgets, node halts and pauses (`budget_check.rs`).
    pub budget: BudgetCounts,
}

/// Reads the scripts' log.
pub fn read_runs(file: &Path) -> Result<Vec<RunLog>, String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut runs: Vec<RunLog> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match (f.first().copied(), f.len()) {
            (Some("start"), 10) => {
                index.insert(f[1].to_string(), runs.len());
                runs.push(RunLog {
                    id: f[1].into(),
                    host: f[2].into(),
                    agent: f[3].parse().unwrap_or(0),
                    kind: f[4].into(),
                    path: f[5].into(),
                    n: f[6].into(),
                    version: f[7].into(),
                    pkg: f[9].into(),
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

/// What a run's node asked for, as one commit's tree says: (K, canary count), or None if
/// that tree does not have the node.
pub fn rollout(tree: &Tree, path: &str) -> Option<(usize, usize)> {
    let name = path.strip_prefix("/acme/")?;
    tree.acme.get(name).map(|node| (node.k(), node.c()))
}

/// The trees an agent deploying `version` may have read its node's properties from before
/// `at`: that version's commit and every later commit made by then (a sync writes the tree
/// before it bumps the version, and a killed sync leaves a newer tree half written). All
/// commits up to `at` if the version is unknown.
pub fn candidates<'c>(commits: &'c Commits, version: &str, at: f64) -> Vec<&'c Tree> {
    let from = commits
        .iter()
        .position(|(id, _, _)| id == version)
        .unwrap_or(0);
    commits[from..]
        .iter()
        .enumerate()
        .filter(|(i, (_, t, _))| *i == 0 || *t <= at)
        .map(|(_, (_, _, tree))| tree)
        .collect()
}

/// Runs every check; returns the violations.
pub fn check(
    runs: &mut [RunLog],
    verdicts: &[Verdict],
    journal: &Journal,
    commits: &Commits,
    halt_lines: &[String],
    counts: &mut Counts,
) -> Vec<String> {
    let mut out = Vec::new();
    counts.runs = runs.len();
    close_killed_runs(runs, journal, &mut out);
    let steps = steps(runs, &mut out);
    counts.health_runs = runs.iter().filter(|r| r.kind.starts_with("health")).count();
    check_verdicts(runs, verdicts, counts, &mut out);
    check_role_overlaps(runs, &mut out);
    let seen = Seen {
        verdicts,
        journal,
        commits,
        halt_lines,
    };
    check_nodes(runs, &steps, &seen, counts, &mut out);
    check_halts(runs, journal, commits, &mut out);
    check_health_halts(runs, &steps, &seen, counts, &mut out);
    check_holder_kills(journal, verdicts, halt_lines, commits, counts, &mut out);
    check_mixed(runs, &steps, &seen, counts, &mut out);
    check_versions(runs, &steps, journal, commits, &mut out);
    super::budget_check::check(runs, journal, commits, &mut counts.budget, &mut out);
    out
}

/// One deploy step: a deploy run and the health checks of its instance after it (same host,
/// agent, version), held under one lock or lease.
#[derive(Debug, Clone)]
pub struct Step {
    /// The deploy run (index into the runs).
    pub deploy: usize,
    /// Its health check runs, in order.
    pub health: Vec<usize>,
    /// From the deploy run's start...
    pub start: f64,
    /// ... to the end of its last run.
    pub end: f64,
}

impl Step {
    /// True if the deploy run and, when there were any, the last health check passed.
    pub fn ok(&self, runs: &[RunLog]) -> bool {
        let last = self.health.last().copied().unwrap_or(self.deploy);
        runs[self.deploy].rc == Some(0) && runs[last].rc == Some(0)
    }
}

/// Groups the deploy runs with their health checks; marks every check but the last of a
/// step `health-retry`. A check without a successful deploy run of its instance before it is
/// a violation.
pub fn steps(runs: &mut [RunLog], out: &mut Vec<String>) -> Vec<Step> {
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| runs[*a].start.total_cmp(&runs[*b].start));
    let mut steps: Vec<Step> = Vec::new();
    let mut open: BTreeMap<(String, u64, String, String), usize> = BTreeMap::new();
    for i in order {
        let r = &runs[i];
        let key = (r.host.clone(), r.agent, r.path.clone(), r.n.clone());
        match r.kind.as_str() {
            "deploy" => {
                open.insert(key, steps.len());
                steps.push(Step {
                    deploy: i,
                    health: Vec::new(),
                    start: r.start,
                    end: r.end.unwrap_or(r.start),
                });
            }
            "health" => {
                let step = open.get(&key).copied().filter(|s| {
                    let d = &runs[steps[*s].deploy];
                    d.version == r.version && d.rc == Some(0) && d.end.is_some_and(|e| e <= r.start)
                });
                match step {
                    Some(s) => {
                        steps[s].health.push(i);
                        steps[s].end = steps[s].end.max(r.end.unwrap_or(r.start));
                    }
                    // Its parent is init: its agent was SIGKILLed as it started the check,
                    // so it cannot name its agent (nor its deploy run).
                    None if r.agent == 1 => {}
                    None => out.push(format!(
                        "a health check without a successful deploy run of its instance before it: {r:?}"
                    )),
                }
            }
            _ => {}
        }
    }
    for step in &steps {
        if let Some((_, retries)) = step.health.split_last() {
            for &i in retries {
                runs[i].kind = "health-retry".into();
            }
        }
    }
    steps
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
pub fn session_fault(journal: &Journal, host: &str, from: f64, to: f64) -> bool {
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
            // The run (a health check, which waits 1 s at most for its answer) ended before
            // the oracle's reads did: what they saw may be its agent's next step.
            _ if run.end.is_some_and(|end| verdict.at > end) => {
                counts.unknown += 1;
                counts.unknown_example.get_or_insert_with(|| {
                    format!(
                        "{} was checked {:.2} s after it ended",
                        run.id,
                        verdict.at - run.end.unwrap_or(0.0)
                    )
                });
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

/// A run that failed a step (a health check another one followed is a retry, not a failure).
pub fn failed(r: &RunLog) -> bool {
    r.rc.is_some_and(|rc| rc != 0) && r.kind != "health-retry"
}

/// The role lock: never two role hosts' runs at once.
fn check_role_overlaps(runs: &[RunLog], out: &mut Vec<String>) {
    let mut list: Vec<&RunLog> = runs
        .iter()
        .filter(|r| r.kind != "undeploy" && !r.path.starts_with("/acme/"))
        .collect();
    list.sort_by(|a, b| a.start.total_cmp(&b.start));
    for (i, run) in list.iter().enumerate() {
        let inside: Vec<&&RunLog> = list[..i]
            .iter()
            .filter(|r| r.end.unwrap_or(f64::INFINITY) > run.start && r.host != run.host)
            .collect();
        if !inside.is_empty() {
            out.push(format!(
                "{} hosts inside the role lock at {:.3}: {run:?} while {inside:?}",
                inside.len() + 1,
                run.start
            ));
        }
    }
}

/// What the checks of the nodes' exclusion read besides the runs.
struct Seen<'a> {
    verdicts: &'a [Verdict],
    journal: &'a Journal,
    commits: &'a Commits,
    halt_lines: &'a [String],
}

/// The application nodes' exclusion, by step: K, the lock or lease each took, canaries.
fn check_nodes(
    runs: &[RunLog],
    steps: &[Step],
    seen: &Seen,
    counts: &mut Counts,
    out: &mut Vec<String>,
) {
    let Seen {
        verdicts,
        journal,
        commits,
        halt_lines,
    } = *seen;
    let held: BTreeMap<&str, &str> = verdicts.iter().map(|v| (v.id.as_str(), v.held)).collect();
    let mut by_node: BTreeMap<&str, Vec<&Step>> = BTreeMap::new();
    for step in steps {
        let d = &runs[step.deploy];
        if d.path.starts_with("/acme/") {
            by_node.entry(&d.path).or_default().push(step);
        }
    }
    for (path, list) in by_node {
        for (i, step) in list.iter().enumerate() {
            let d = &runs[step.deploy];
            let how = held.get(d.id.as_str()).copied().unwrap_or("");
            let asked: Vec<(usize, usize)> = candidates(commits, &d.version, d.start)
                .into_iter()
                .filter_map(|t| rollout(t, path))
                .collect();
            let k = asked.iter().map(|(k, _)| *k).max().unwrap_or(1);
            // A holder a halt declared dead (its session was lost while its script ran on,
            // and another host found its in-flight record) no longer counts once an
            // operator has resumed: that is what the halt asks the operator to check.
            let declared_dead = |s: &Step| {
                let r = &runs[s.deploy];
                let named = format!(
                    "({}) died deploying {} {} (version {})",
                    r.host, r.path, r.n, r.version
                );
                halt_lines.iter().any(|l| l.contains(&named))
            };
            let (inside, dead): (Vec<&&Step>, Vec<&&Step>) = list[..i]
                .iter()
                .filter(|s| s.end > step.start)
                .partition(|s| !declared_dead(s));
            counts.after_resume += dead.len();
            counts.most_inside = counts.most_inside.max(inside.len() + 1);
            let name = |s: &Step| {
                let r = &runs[s.deploy];
                format!(
                    "{} {} {} ({})",
                    r.host,
                    r.n,
                    r.version,
                    held.get(r.id.as_str()).copied().unwrap_or("?")
                )
            };
            // Leases of the semaphore exclude each other beyond K, the node lock excludes
            // everyone, and the two kinds of place exclude each other (the older goes first;
            // K changed between 1 and more, or a canary): a step under one kind that starts
            // while a step under the other is inside is a violation (`cross`).
            //
            // No tolerance is needed for a hand-off: both times are `date +%s.%N` of one
            // clock, and a step's logged span nests strictly inside its hold (its start is
            // logged after the place was taken and the oracle answered; its last end just
            // before the script exits, and the place goes only after the agent reaped it and
            // cleared its record), so a holder that let go before the next one entered logs
            // an end before the next one's start. The ends logged otherwise are later than the
            // script's death, but not the place's release: a run killed with its agent ends
            // at the kill time, and its place (ephemeral) outlives the kill by its session
            // (4 s); a health check killed at its deadline is ended by its watcher up to a
            // poll (20 ms) late, and its step failed, so its agent halted the cluster before
            // letting go, and the next holder does not start before a resume.
            let same = inside
                .iter()
                .filter(|s| held.get(runs[s.deploy].id.as_str()).copied() == Some(how))
                .count();
            let other: Vec<&&&Step> = inside
                .iter()
                .filter(|s| {
                    let h = held.get(runs[s.deploy].id.as_str()).copied().unwrap_or("");
                    !h.is_empty() && h != how
                })
                .collect();
            let report = || {
                format!(
                    "{} hosts inside {path} at {:.3} (max-parallel {k} for {}): {} while {}",
                    inside.len() + 1,
                    step.start,
                    d.version,
                    name(step),
                    inside
                        .iter()
                        .map(|s| name(s))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            if same + 1 > k && !how.is_empty() {
                out.push(report());
            }
            if !other.is_empty() && !how.is_empty() {
                counts.cross += 1;
                out.push(format!(
                    "a step under the {how} of {path} started at {:.3} while another was inside \
                     under the other kind of place: {} while {}",
                    step.start,
                    name(step),
                    other.iter().map(|s| name(s)).collect::<Vec<_>>().join(", ")
                ));
            }
            match how {
                "lease" => {
                    counts.lease_steps += 1;
                    if !asked.iter().any(|(k, _)| *k > 1) {
                        out.push(format!(
                            "a lease of {path} where max-parallel is 1 ({asked:?}): {d:?}"
                        ));
                    }
                    check_canaries(runs, &list[..i], step, &asked, &held, out);
                }
                "lock" => {
                    let canary = asked.iter().any(|(k, c)| *k > 1 && *c > 0);
                    if canary && !asked.iter().any(|(k, _)| *k == 1) {
                        counts.canary_steps += 1;
                    } else {
                        counts.lock_steps += 1;
                    }
                    if !canary && !asked.iter().any(|(k, _)| *k == 1) && !maybe_mixed(journal, d) {
                        out.push(format!(
                            "the node lock of {path} where max-parallel is above 1 and no canary is due ({asked:?}): {d:?}"
                        ));
                    }
                    let locked: Vec<&&&Step> = inside
                        .iter()
                        .filter(|s| held.get(runs[s.deploy].id.as_str()) == Some(&"lock"))
                        .collect();
                    if !locked.is_empty() {
                        out.push(format!(
                            "two holders of the node lock of {path} at {:.3}: {} while {}",
                            step.start,
                            name(step),
                            locked
                                .iter()
                                .map(|s| name(s))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
                _ => {}
            }
        }
    }
}

/// A lease step of a package version needs `canary` hosts done with that version (deploy
/// and health check) under the node lock before it starts (counted leniently: every
/// successful node-lock step of that package version before it, and every one the oracle
/// could not check).
fn check_canaries(
    runs: &[RunLog],
    before: &[&Step],
    step: &Step,
    asked: &[(usize, usize)],
    held: &BTreeMap<&str, &str>,
    out: &mut Vec<String>,
) {
    if asked.is_empty() || asked.iter().any(|(k, c)| *k <= 1 || *c == 0) {
        return;
    }
    let need = asked.iter().map(|(_, c)| *c).min().unwrap_or(0);
    let d = &runs[step.deploy];
    let canaries: BTreeSet<&str> = before
        .iter()
        .filter(|s| {
            let r = &runs[s.deploy];
            // Unchecked (the oracle could not tell): perhaps a canary.
            matches!(held.get(r.id.as_str()), Some(&"lock") | Some(&"") | None)
                && r.pkg == d.pkg
                && s.end < step.start
                && s.ok(runs)
        })
        .map(|s| runs[s.deploy].host.as_str())
        .collect();
    if canaries.len() < need {
        out.push(format!(
            "{} started {} {} under a lease after {} canaries ({canaries:?}), {need} needed: {d:?}",
            d.host,
            d.path,
            d.pkg,
            canaries.len()
        ));
    }
}

/// A step whose last health check failed halts the cluster with `Health check failed for
/// PATH N: ...` (unless its agent was killed or lost its session first): a sampled halt
/// record of its host says so, or its agent logged that it halts the cluster for it (a halt
/// written while the cluster was halted already, and resumed before the next sample, is
/// seen only there; `halt_lines` are prefixed with the host id of the agent that logged
/// them).
fn check_health_halts(
    runs: &[RunLog],
    steps: &[Step],
    seen: &Seen,
    counts: &mut Counts,
    out: &mut Vec<String>,
) {
    let Seen {
        journal,
        commits,
        halt_lines,
        ..
    } = *seen;
    for step in steps.iter().filter(|s| !s.health.is_empty()) {
        let last = &runs[*step.health.last().unwrap()];
        if last.rc == Some(0) {
            counts.healthy += 1;
            continue;
        }
        if last.rc.is_none() {
            continue;
        }
        counts.unhealthy += 1;
        let want = format!("Health check failed for {} {}: ", last.path, last.n);
        let halted = journal.halts.iter().any(|(seen, props)| {
            let halt = props.get("halt");
            *seen >= last.start - 1.0
                && text(halt.and_then(|h| h.get("host"))) == last.host
                && text(halt.and_then(|h| h.get("error"))).starts_with(&want)
        }) || halt_lines.iter().any(|l| {
            l.starts_with(&format!("{} ", last.host))
                && l.contains(&format!("halting the cluster: {want}"))
        }) || settled(last, journal, commits);
        let end = last.end.unwrap_or(last.start);
        let lost = journal
            .kills
            .iter()
            .any(|(h, t)| *h == last.host && *t >= last.start && *t <= end + 30.0)
            || session_fault(journal, &last.host, runs[step.deploy].start, end + 1.0);
        if !halted && !lost {
            out.push(format!(
                "a health check that never passed halted nothing with {want:?}: {last:?}"
            ));
        }
    }
}

/// How long after the original's host node was created every agent's read of `/hosts`
/// surely sees it, in seconds: a follower more than `syncLimit` ticks (2 × 500 ms, see
/// `tests/support/ensemble.rs`) behind its leader is dropped and stops serving, so a read
/// answers at most about 1 s stale; doubled for the scheduling of a loaded machine.
pub const MIXED_SEEN: f64 = 2.0;

/// The start of the pass agent process `pid` of `host` was in at `at`: its last
/// `Deploying version` by then (-inf if its log has none).
pub fn pass_begun(journal: &Journal, host: &str, pid: u64, at: f64) -> f64 {
    journal
        .passes
        .iter()
        .filter(|(h, p, t)| h == host && *p == pid && *t <= at)
        .map(|(_, _, t)| *t)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The start of the pass `run` belongs to.
fn pass_start(journal: &Journal, run: &RunLog) -> f64 {
    pass_begun(journal, &run.host, run.agent, run.start)
}

/// True if the agent may have found the fleet mixed for `run`: it decided at some time
/// between its pass's start and the run's start, and some window's node may have been
/// there then (from its create's send to [`MIXED_SEEN`] after its delete had succeeded: a
/// read may answer that stale). The node lock where K > 1 is then no violation.
fn maybe_mixed(journal: &Journal, run: &RunLog) -> bool {
    let pass = pass_start(journal, run);
    journal
        .mixed
        .iter()
        .any(|w| pass <= w.gone + MIXED_SEEN && run.start >= w.begun)
}

/// The mixed-fleet rule: an agent decides whether the fleet is mixed when it plans a pass
/// (after its `Deploying version` line), or at the latest when it enters a node (before the
/// script starts). A step of a pass that began at least [`MIXED_SEEN`] after a window's start
/// and that started before the window's end was decided inside the window, so it must hold
/// the node lock, never a lease. Passes begun before the window (planned on a fleet of ours
/// alone) may still take leases in it; steps after the window may take leases again.
fn check_mixed(
    runs: &[RunLog],
    steps: &[Step],
    seen: &Seen,
    counts: &mut Counts,
    out: &mut Vec<String>,
) {
    let Seen {
        verdicts,
        journal,
        commits,
        ..
    } = *seen;
    let held: BTreeMap<&str, &str> = verdicts.iter().map(|v| (v.id.as_str(), v.held)).collect();
    for step in steps {
        let d = &runs[step.deploy];
        if !d.path.starts_with("/acme/") {
            continue;
        }
        let pass = pass_start(journal, d);
        let Some(MixedWindow { from, to, .. }) = journal
            .mixed
            .iter()
            .find(|w| pass >= w.from + MIXED_SEEN && pass <= w.to && d.start <= w.to)
        else {
            continue;
        };
        counts.mixed_steps += 1;
        let asked = candidates(commits, &d.version, d.start)
            .into_iter()
            .filter_map(|t| rollout(t, &d.path))
            .any(|(k, _)| k > 1);
        if asked {
            counts.mixed_parallel += 1;
        }
        if held.get(d.id.as_str()) == Some(&"lease") {
            out.push(format!(
                "{} entered {} through a lease at {:.3} in a pass begun at {pass:.3}, while the \
                 fleet was mixed (the original's host node registered from {from:.3} to {to:.3}): {d:?}",
                d.host, d.path, d.start
            ));
        }
    }
}

/// Every holder the nemesis killed mid-step under a lock or lease is named by a halt (some
/// agent logged `halting the cluster: ... (HOST) died deploying PATH N`), unless the last
/// commit no longer deploys its node (its record then stays, counted as stale and
/// `unnamed`). The next holder reads the records of both kinds of place, so a change of K
/// between 1 and more (or a canary phase) does not hide a dead holder.
fn check_holder_kills(
    journal: &Journal,
    verdicts: &[Verdict],
    halt_lines: &[String],
    commits: &Commits,
    counts: &mut Counts,
    out: &mut Vec<String>,
) {
    let held: BTreeMap<&str, &str> = verdicts.iter().map(|v| (v.id.as_str(), v.held)).collect();
    let last = commits.last().map(|(_, _, t)| t);
    for kill in &journal.holder_kills {
        match held.get(kill.run.as_str()).copied() {
            Some("lease") => counts.killed_leases += 1,
            Some("lock") => counts.killed_locks += 1,
            _ => continue,
        }
        let named = format!("({}) died deploying {} {} ", kill.host, kill.path, kill.n);
        if halt_lines.iter().any(|l| l.contains(&named)) {
            counts.named += 1;
            continue;
        }
        if last.and_then(|t| rollout(t, &kill.path)).is_none() {
            counts.unnamed += 1;
        } else {
            out.push(format!(
                "{} was killed holding {} {} ({} at {}, {:.3}) and no halt named it",
                kill.host, kill.path, kill.n, kill.kind, kill.version, kill.time
            ));
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

fn check_halts(runs: &[RunLog], journal: &Journal, commits: &Commits, out: &mut Vec<String>) {
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
            runs.iter().any(|r| {
                r.host == host && failed(r) && r.start <= time + 1.0 && {
                    // A failed health check explains only a health halt for its instance.
                    let health = format!("Health check failed for {} {}: ", r.path, r.n);
                    (r.kind == "health") == error.starts_with("Health check failed for ")
                        && (r.kind != "health" || error.starts_with(&health))
                }
            })
        };
        if !explained {
            out.push(format!("a halt no fault explains: {halt:?}"));
        }
    }
    for run in runs.iter().filter(|r| failed(r)) {
        // A failure of a node with a budget may be settled by it (a quarantine, a node halt).
        if halt_times.iter().any(|t| *t >= run.start - 1.0) || settled(run, journal, commits) {
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

/// False if some tree an agent deploying `version` may have read by `at` does not deploy
/// `path` to `host`: a sync killed after writing a later commit's tree (or forced while the
/// cluster was halted) leaves that tree under the old version, and a pass that reads it has
/// nothing to do there.
fn surely_wanted(commits: &Commits, version: &str, at: f64, host: &str, path: &str) -> bool {
    let Some(name) = path.strip_prefix("/acme/") else {
        return true;
    };
    candidates(commits, version, at)
        .iter()
        .all(|t| t.acme.get(name).is_some_and(|n| n.hosts.contains_key(host)))
}

fn check_versions(
    runs: &[RunLog],
    steps: &[Step],
    journal: &Journal,
    commits: &Commits,
    out: &mut Vec<String>,
) {
    // A deploy run of a package with a health check that no check followed failed its step
    // as surely as a failed script (unless its agent died there).
    let unchecked: BTreeSet<usize> = steps
        .iter()
        .filter(|s| {
            let d = &runs[s.deploy];
            let rpm = if d.path.starts_with("/acme/") {
                "foo"
            } else {
                "webapp"
            };
            s.health.is_empty() && d.rc == Some(0) && has_health(rpm, &d.pkg)
        })
        .map(|s| s.deploy)
        .collect();
    let mut flagged = BTreeSet::new();
    for (host, version, pid, seen) in &journal.samples {
        // The runs of this agent process at this version, before the sample.
        let agent = |r: &&RunLog| {
            r.host == *host && r.version == *version && r.start < *seen && r.agent == *pid
        };
        let failures: Vec<&RunLog> = runs
            .iter()
            .enumerate()
            .filter(|(_, r)| agent(r))
            .filter(|(i, r)| {
                (r.rc != Some(0) && r.kind != "health-retry")
                    || (unchecked.contains(i) && r.end.is_some_and(|e| e < *seen))
            })
            .map(|(_, r)| r)
            .collect();
        // Every failed step dropped by a tree the agent may have read since: nothing to redo.
        if failures
            .iter()
            .all(|r| !surely_wanted(commits, version, *seen, host, &r.path))
        {
            continue;
        }
        let failed = failures
            .iter()
            .map(|r| r.end.unwrap_or(r.start))
            .fold(f64::NEG_INFINITY, f64::max);
        if failed.is_finite()
            && !runs.iter().filter(agent).any(|r| r.start > failed)
            && flagged.insert((host.clone(), version.clone(), *pid))
        {
            out.push(format!(
                "{host} (agent {pid}) recorded version {version} after a step at that version \
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
