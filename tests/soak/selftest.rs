//! The checker checked: made-up logs with one known violation each must be flagged, and a
//! clean one must not (a checker that cannot fail would make the soak a test that cannot
//! fail).

use serde_json::json;

use super::checker::{check, Counts, RunLog};
use super::oracle::{Check, Verdict};
use super::world::Journal;

fn run(id: &str, host: &str, path: &str, start: f64, end: Option<f64>, rc: Option<i32>) -> RunLog {
    RunLog {
        id: id.into(),
        host: host.into(),
        agent: 100,
        kind: "deploy".into(),
        path: path.into(),
        n: "0".into(),
        version: "v1".into(),
        start,
        end,
        rc,
    }
}

fn ok(runs: &[RunLog]) -> Vec<Verdict> {
    runs.iter()
        .map(|r| Verdict {
            id: r.id.clone(),
            check: Check::Ok,
            elapsed: 0.01,
        })
        .collect()
}

fn violations(mut runs: Vec<RunLog>, verdicts: Vec<Verdict>, journal: &Journal) -> Vec<String> {
    check(&mut runs, &verdicts, journal, &mut Counts::default())
}

fn halt(host: &str, error: &str, time: f64) -> (f64, serde_json::Map<String, serde_json::Value>) {
    let props = json!({"version": null, "halt": {
        "host": host, "name": format!("{host}.example.com"), "version": "v1",
        "error": error, "time": time}});
    (time, props.as_object().unwrap().clone())
}

#[test]
fn a_clean_history_has_no_violation() {
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(2.0), Some(0)),
        run("b", "h2", "/acme/a", 2.1, Some(3.0), Some(0)),
        run("c", "h3", "/acme/b", 1.5, Some(2.5), Some(0)),
    ];
    let journal = Journal::default();
    assert_eq!(
        violations(runs.clone(), ok(&runs), &journal),
        Vec::<String>::new()
    );
}

#[test]
fn two_hosts_inside_one_node_lock_are_flagged() {
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(2.0), Some(0)),
        run("b", "h2", "/acme/a", 1.9, Some(3.0), Some(0)),
    ];
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("inside /acme/a"),
        "{found:?}"
    );
}

#[test]
fn two_role_hosts_inside_the_role_lock_are_flagged() {
    let mut a = run("a", "w1", "/roles/web", 1.0, Some(2.0), Some(0));
    a.kind = "starting-deployments".into();
    let b = run("b", "w2", "/webapp/x", 1.5, Some(1.7), Some(0));
    let runs = vec![a, b];
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("role:web"),
        "{found:?}"
    );
}

#[test]
fn a_run_without_its_lock_is_flagged_unless_the_check_was_late() {
    let runs = vec![run("a", "h1", "/acme/a", 10.0, Some(11.0), Some(0))];
    let bad = |elapsed| {
        vec![Verdict {
            id: "a".into(),
            check: Check::Bad("held by h2".into()),
            elapsed,
        }]
    };
    let found = violations(runs.clone(), bad(0.05), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("without its lock"),
        "{found:?}"
    );
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &bad(3.0),
        &Journal::default(),
        &mut counts,
    );
    assert_eq!(found, Vec::<String>::new());
    assert_eq!(counts.unknown, 1);
}

#[test]
fn a_run_that_never_ended_is_flagged_unless_its_agent_was_killed() {
    let runs = vec![run("a", "h1", "/acme/a", 1.0, None, None)];
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("never ended"),
        "{found:?}"
    );
    let mut journal = Journal::default();
    journal.kills.push(("h1".into(), 1.5));
    assert_eq!(
        violations(runs.clone(), ok(&runs), &journal),
        Vec::<String>::new()
    );
}

#[test]
fn halts_need_a_record_and_a_cause_and_failures_need_a_halt() {
    let failed = run("a", "h1", "/acme/a", 1.0, Some(1.2), Some(3));
    let runs = vec![failed.clone()];
    // A failure no halt followed.
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("halted nothing"),
        "{found:?}"
    );
    // Unless its agent died before it could write the halt.
    let mut journal = Journal::default();
    journal.kills.push(("h1".into(), 1.25));
    assert_eq!(
        violations(runs.clone(), ok(&runs), &journal),
        Vec::<String>::new()
    );
    // Its halt.
    let mut journal = Journal::default();
    journal.halts.push(halt("h1", "Command failed: ...", 1.3));
    assert_eq!(
        violations(runs.clone(), ok(&runs), &journal),
        Vec::<String>::new()
    );
    // A halt by a host that had no failure, an in-flight halt for a host nobody killed.
    let mut journal = Journal::default();
    journal.halts.push(halt("h2", "Command failed: ...", 1.3));
    journal.halts.push(halt(
        "h2",
        "h3.example.com (h3) died deploying /acme/a 0",
        1.4,
    ));
    let found = violations(vec![], vec![], &journal);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found.iter().all(|f| f.contains("no fault explains")),
        "{found:?}"
    );
    // A halt without its record.
    let mut journal = Journal::default();
    journal
        .halts
        .push((1.0, json!({"version": null}).as_object().unwrap().clone()));
    let found = violations(vec![], vec![], &journal);
    assert!(
        found.len() == 1 && found[0].contains("without its record"),
        "{found:?}"
    );
}

#[test]
fn a_version_recorded_after_a_failed_run_without_a_new_pass_is_flagged() {
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.2), Some(0)),
        run("b", "h1", "/acme/b", 1.3, Some(1.4), Some(3)),
    ];
    let mut journal = Journal::default();
    journal.halts.push(halt("h1", "Command failed: ...", 1.5));
    journal.samples.push(("h1".into(), "v1".into(), 100, 2.0));
    let found = violations(runs.clone(), ok(&runs), &journal);
    assert!(
        found.len() == 1 && found[0].contains("recorded version v1"),
        "{found:?}"
    );
    // A new pass after the failure makes it right.
    let mut more = runs.clone();
    more.push(run("c", "h1", "/acme/a", 1.8, Some(1.9), Some(0)));
    assert_eq!(
        violations(more.clone(), ok(&more), &journal),
        Vec::<String>::new()
    );
}
