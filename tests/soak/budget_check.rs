//! The checks of failure budgets, node halts and node pauses (CONTRACT 15), from the
//! scripts' log, what the agents logged ([`Outcome`]s), the records seen under
//! `/node-state` and `/node-pauses` ([`NodeRecord`]s, `budget.rs`) and the `pause PATH` /
//! `resume PATH` commands run ([`NodeCommand`]s). For every node N and cluster version V:
//!
//! A quarantine or node halt is what an agent logged: for its own failure (`PATH left undone:
//! ... (failed host P of PATH, within its budget ...)`), or for a dead holder it found and
//! counted for the dead holder's host (at the version of the dead holder's in-flight record).
//!
//! - no more than F hosts are quarantined for N at V (F as the trees the agents may have read
//!   for V give it: the most of them), counted between two clearings of N's records at V (a
//!   `resume PATH N`, or a new cluster version, whose sync deletes the records of the others:
//!   a host still in a pass of V then counts from an empty budget; a quarantine whose record
//!   may have been made during a clearing is left out of both counts) ([`check_counts`]);
//! - a quarantined host runs no deploy script of N at V again until a clearing that may have
//!   removed its record ([`check_retries`]);
//! - nobody enters N (starts a deploy script of it) once its halt or pause was recorded,
//!   until a `resume PATH N` began, but for [`SEEN`] after it was made (the agent reads the
//!   node's gate after taking its place, then writes its status and starts the script), or
//!   longer when a fault cost its host the servers meanwhile ([`check_entries`]);
//! - every failure of a node with a budget is a quarantine or a halt ([`settled`], used by
//!   the checker's halt checks), and every node halt and failure record has a cause: a failed
//!   run of its host on its node ([`check_causes`]);
//! - budgets and node halts are off in a mixed fleet: a pass begun inside a `mixed-fleet`
//!   window (as `checker::check_mixed` judges the leases) quarantines nobody and halts no
//!   node for a failure that began before the window's end ([`check_mixed`]).

use std::collections::{BTreeMap, BTreeSet};

use super::actors::version_text;
use super::checker::{candidates, failed, pass_begun, session_fault, Commits, RunLog, MIXED_SEEN};
use super::world::{Journal, NodeRecord, Outcome};

/// How long after a node's halt or pause was made a host may still start its step: it read
/// the gate after taking the node's place (a write, so every record made before that was
/// seen), then wrote its status and started the script; doubled for a loaded machine, as
/// `checker::MIXED_SEEN`.
pub const SEEN: f64 = 2.0;

/// Counts for the summary line.
#[derive(Debug, Default)]
pub struct BudgetCounts {
    /// Quarantines the agents logged.
    pub quarantined: usize,
    /// Node halts the agents logged.
    pub node_halts: usize,
    /// Failure records, node halts and node pauses seen in ZooKeeper.
    pub records: usize,
    /// Quarantines whose record may have been made while a `resume PATH` ran (not counted).
    pub ambiguous: usize,
    /// Steps of a node started within [`SEEN`] after its halt or pause was made.
    pub late: usize,
    /// Nodes the agents left undone because they were quarantined, halted, paused.
    pub kept: [usize; 3],
    /// (node, version) whose budget was spent to the full.
    pub full: usize,
}

/// Runs the checks; violations go to `out`.
pub fn check(
    runs: &[RunLog],
    journal: &Journal,
    commits: &Commits,
    counts: &mut BudgetCounts,
    out: &mut Vec<String>,
) {
    counts.records = journal.node_records.len();
    counts.node_halts = journal
        .outcomes
        .iter()
        .filter(|o| o.kind == "node-halt")
        .count();
    for (i, kind) in ["kept-quarantined", "kept-halted", "kept-paused"]
        .iter()
        .enumerate()
    {
        counts.kept[i] = journal.outcomes.iter().filter(|o| o.kind == *kind).count();
    }
    check_counts(runs, journal, commits, counts, out);
    check_retries(runs, journal, out);
    check_entries(runs, journal, counts, out);
    check_causes(runs, journal, out);
    check_mixed(runs, journal, out);
}

/// The quarantines the agents logged.
fn quarantines(journal: &Journal) -> impl Iterator<Item = &Outcome> {
    journal.outcomes.iter().filter(|o| o.kind == "within")
}

/// The `resume PATH` runs of `path`: (start, end).
fn node_resumes(journal: &Journal, path: &str) -> Vec<(f64, f64)> {
    journal
        .node_commands
        .iter()
        .filter(|c| c.what == "resume" && c.path == path)
        .map(|c| (c.start, c.end))
        .collect()
}

/// What may have deleted the failure records of `path` at `version`, each from when it may
/// have begun to when it surely had ended: the `resume PATH` runs of `path`, and every new
/// cluster version but `version` (its sync, or resume, deletes the records of the others:
/// a host still in a pass of `version` then counts its failure from an empty budget).
fn clearings(journal: &Journal, path: &str, version: &str) -> Vec<(f64, f64)> {
    let versions = journal.versions.windows(2).filter_map(|w| {
        let ((_, _, before), (new, first, _)) = (&w[0], &w[1]);
        (!new.is_null() && version_text(new) != version).then_some((*before, first + PRUNE_WITHIN))
    });
    let mut out = node_resumes(journal, path);
    out.extend(versions);
    out
}

/// How long after the operator saw a new cluster version the sync (or resume) that set it
/// may still be deleting the failure records of the others.
pub const PRUNE_WITHIN: f64 = 3.0;

/// When the failure `q` reports began: the latest start of a run of its host on its node at
/// its version before it (its record was made after that).
fn failure_start(runs: &[RunLog], q: &Outcome) -> f64 {
    runs.iter()
        .filter(|r| r.host == q.host && r.path == q.path && r.version == q.version)
        .map(|r| r.start)
        .filter(|s| *s <= q.time)
        .fold(q.time - 30.0, f64::max)
}

/// The most F any tree the agents may have read for `version` by `at` gives `path` (0 where
/// none has it, or has no budget).
pub fn allowed(commits: &Commits, path: &str, version: &str, at: f64) -> usize {
    let Some(name) = path.strip_prefix("/acme/") else {
        return 0;
    };
    candidates(commits, version, at)
        .into_iter()
        .filter_map(|t| t.acme.get(name))
        .map(|node| node.f())
        .max()
        .unwrap_or(0)
}

/// True if a tree the agents may have read for `version` by `at` gives `path` a budget.
fn budgeted(commits: &Commits, path: &str, version: &str, at: f64) -> bool {
    let Some(name) = path.strip_prefix("/acme/") else {
        return false;
    };
    candidates(commits, version, at)
        .into_iter()
        .filter_map(|t| t.acme.get(name))
        .any(|node| node.budgeted())
}

/// No more than F hosts quarantined for a node at a version, between two `resume PATH`.
fn check_counts(
    runs: &[RunLog],
    journal: &Journal,
    commits: &Commits,
    counts: &mut BudgetCounts,
    out: &mut Vec<String>,
) {
    let mut groups: BTreeMap<(&str, &str, usize), (BTreeSet<&str>, f64)> = BTreeMap::new();
    for q in quarantines(journal) {
        counts.quarantined += 1;
        let lo = failure_start(runs, q);
        let rs = clearings(journal, &q.path, &q.version);
        if rs.iter().any(|(s, e)| *s < q.time && *e > lo) {
            counts.ambiguous += 1;
            continue;
        }
        let epoch = rs.iter().filter(|(_, e)| *e <= lo).count();
        let group = groups
            .entry((&q.path, &q.version, epoch))
            .or_insert_with(|| (BTreeSet::new(), 0.0));
        group.0.insert(&q.host);
        group.1 = group.1.max(q.time);
    }
    for ((path, version, _), (hosts, last)) in groups {
        let f = allowed(commits, path, version, last);
        if hosts.len() > f {
            out.push(format!(
                "{} hosts quarantined for {path} at {version}, its budget F = {f}: {hosts:?}",
                hosts.len()
            ));
        } else if hosts.len() == f {
            counts.full += 1;
        }
    }
}

/// A quarantined host does not run the node again at that version until a `resume PATH`.
fn check_retries(runs: &[RunLog], journal: &Journal, out: &mut Vec<String>) {
    for q in quarantines(journal) {
        let lo = failure_start(runs, q);
        let rs = clearings(journal, &q.path, &q.version);
        // A dead holder's record is made by the host that found it: the dead holder (its
        // session cut, not its agent killed) may have read its gate just before.
        let found = |r: &RunLog| {
            q.by != q.host
                && (r.start <= q.time + SEEN || session_fault(journal, &q.host, q.time, r.start))
        };
        let again = runs.iter().find(|r| {
            r.kind == "deploy"
                && r.host == q.host
                && r.path == q.path
                && r.version == q.version
                && r.start > q.time
                && !found(r)
                && !rs.iter().any(|(s, e)| *s < r.start && *e > lo)
        });
        if let Some(r) = again {
            out.push(format!(
                "{} was quarantined for {} at {} ({:.3}) and ran it again with no resume \
                 between: {r:?}",
                q.host, q.path, q.version, q.time
            ));
        }
    }
}

/// A node halt or pause: (path, made, what).
fn holds(journal: &Journal) -> Vec<(&str, f64, String)> {
    let records = journal
        .node_records
        .iter()
        .filter(|r| r.kind != "fail")
        .map(|r| (r.path.as_str(), r.ctime, describe(r)));
    // A halt the soak did not see (resumed at once) is known from its agent's log, made
    // before it said so.
    let logged = journal
        .outcomes
        .iter()
        .filter(|o| o.kind == "node-halt")
        .map(|o| {
            let what = format!("the node halt {} logged at {:.3}", o.host, o.time);
            (o.path.as_str(), o.time, what)
        });
    records.chain(logged).collect()
}

fn describe(r: &NodeRecord) -> String {
    let who = r.data.get("host").map(version_text).unwrap_or_default();
    format!(
        "the {} by {who} made at {:.3} (seen at {:.3})",
        r.kind, r.ctime, r.seen
    )
}

/// Nobody enters a node once its halt or pause was recorded, until a `resume PATH` began.
fn check_entries(
    runs: &[RunLog],
    journal: &Journal,
    counts: &mut BudgetCounts,
    out: &mut Vec<String>,
) {
    let (mut flagged, mut late) = (BTreeSet::new(), BTreeSet::new());
    for (path, made, what) in holds(journal) {
        // The first resume that may have ended it (one running when it was made may have).
        let until = node_resumes(journal, path)
            .into_iter()
            .filter(|(_, e)| *e > made)
            .map(|(s, _)| s)
            .fold(f64::INFINITY, f64::min);
        for r in runs
            .iter()
            .filter(|r| r.kind == "deploy" && r.path == path && r.start > made && r.start < until)
        {
            // Its status write (and the script's start) may have waited for a server.
            if r.start <= made + SEEN || session_fault(journal, &r.host, made - SEEN, r.start) {
                late.insert(r.id.clone());
            } else if flagged.insert(r.id.clone()) {
                out.push(format!(
                    "{} entered {path} at {:.3}, after {what} (no resume before): {r:?}",
                    r.host, r.start
                ));
            }
        }
    }
    counts.late = late.difference(&flagged).count();
}

/// True if the failed run `run` (a deploy script, or a step's last health check) was settled
/// by the node's budget: a quarantine or a node halt its agent logged, a failure record of
/// its host within F, or a node halt of its node, made after it started.
pub fn settled(run: &RunLog, journal: &Journal, commits: &Commits) -> bool {
    let end = run.end.unwrap_or(run.start);
    if !budgeted(commits, &run.path, &run.version, end) {
        return false;
    }
    let logged = journal.outcomes.iter().any(|o| {
        o.host == run.host && o.path == run.path && o.version == run.version && o.time >= run.start
    });
    let f = allowed(commits, &run.path, &run.version, end);
    let recorded = journal.node_records.iter().any(|r| {
        let time = r
            .data
            .get("time")
            .and_then(|t| t.as_f64())
            .unwrap_or(r.ctime);
        let host = r.data.get("host").map(version_text).unwrap_or_default();
        let version = r.data.get("version").map(version_text).unwrap_or_default();
        r.path == run.path
            && time >= run.start - 1.0
            && match r.kind {
                "halt" => true,
                "fail" => host == run.host && version == run.version && r.place <= f,
                _ => false,
            }
    });
    logged || recorded
}

/// Every node halt and failure record has a cause: a failed run of its host on its node
/// (at its version, for a failure record) that started before it was made, or a dead holder
/// it names.
fn check_causes(runs: &[RunLog], journal: &Journal, out: &mut Vec<String>) {
    for r in journal.node_records.iter().filter(|r| r.kind != "pause") {
        let host = r.data.get("host").map(version_text).unwrap_or_default();
        let version = r.data.get("version").map(version_text).unwrap_or_default();
        let error = r.data.get("error").map(version_text).unwrap_or_default();
        let caused = error.contains(") died deploying")
            || runs.iter().any(|run| {
                run.host == host
                    && run.path == r.path
                    && failed(run)
                    && run.start <= r.ctime
                    && (r.kind == "halt" || run.version == version)
            });
        if !caused {
            out.push(format!(
                "a {} record of {} no failed run explains: {} {:?}",
                r.kind, r.path, r.name, r.data
            ));
        }
    }
}

/// The latest instant by which the agent that said `o` had planned the pass begun at `pass`
/// (and so read whether the fleet is mixed, after its discovery): the start of its first
/// script in that pass, else `o` itself. For its own failure that is the failed run's start
/// at the latest; a finder of a dead holder decided in its own pass, whatever the dead
/// holder's run.
fn planned_by(runs: &[RunLog], o: &Outcome, pass: f64) -> f64 {
    runs.iter()
        .filter(|r| r.host == o.by && r.agent == o.pid && r.start >= pass && r.start <= o.time)
        .map(|r| r.start)
        .fold(o.time, f64::min)
}

/// No quarantine or node halt in a pass planned while the fleet was mixed.
fn check_mixed(runs: &[RunLog], journal: &Journal, out: &mut Vec<String>) {
    for o in journal
        .outcomes
        .iter()
        .filter(|o| o.kind == "within" || o.kind == "node-halt")
    {
        // The pass of the agent that said it (the finder, for a dead holder).
        let pass = pass_begun(journal, &o.by, o.pid, o.time);
        let planned = planned_by(runs, o, pass);
        if let Some(w) = journal
            .mixed
            .iter()
            .find(|w| pass >= w.from + MIXED_SEEN && planned <= w.to)
        {
            out.push(format!(
                "{} applied the budget of {} ({}) at {:.3} in a pass begun at {pass:.3}, while \
                 the fleet was mixed (from {:.3} to {:.3})",
                o.host, o.path, o.kind, o.time, w.from, w.to
            ));
        }
    }
}
