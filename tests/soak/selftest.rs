//! The checker checked: made-up logs with one known violation each must be flagged, and a
//! clean one must not (a checker that cannot fail would make the soak a test that cannot
//! fail).

use serde_json::json;

use std::collections::BTreeMap;

use super::checker::{check, Counts, RunLog};
use super::oracle::{Check, Verdict};
use super::tree::{AcmeNode, Budget, MaxFailures, MaxParallel, Tree};
use super::world::{HolderKill, Journal, MixedWindow, NodeCommand, NodeRecord, Outcome};

fn run(id: &str, host: &str, path: &str, start: f64, end: Option<f64>, rc: Option<i32>) -> RunLog {
    RunLog {
        id: id.into(),
        host: host.into(),
        agent: 100,
        kind: "deploy".into(),
        path: path.into(),
        n: "0".into(),
        version: "v1".into(),
        pkg: "1.4".into(),
        start,
        end,
        rc,
    }
}

/// A tree whose `/acme/a` and `/acme/b` are deployed to `h1`..`h4` with `parallel` and
/// `canary`, foo at `pkg`.
fn tree(parallel: MaxParallel, canary: Option<u32>, pkg: &'static str) -> Tree {
    let hosts: BTreeMap<String, u32> = ["h1", "h2", "h3", "h4"]
        .iter()
        .map(|h| (h.to_string(), 1))
        .collect();
    let node = AcmeNode {
        hosts,
        rev: 0,
        parallel,
        canary,
        budget: Budget::default(),
    };
    Tree {
        foo: pkg,
        webrc: "1.0",
        acme: [("a".to_string(), node.clone()), ("b".to_string(), node)].into(),
        webapp: BTreeMap::new(),
        extra: None,
    }
}

/// One commit `v1` (made at time 0) of [`tree`].
fn commits(parallel: MaxParallel, canary: Option<u32>) -> Vec<(String, f64, Tree)> {
    vec![("v1".into(), 0.0, tree(parallel, canary, "1.4"))]
}

/// Verdicts: every run held what it needed (the node lock, or the role lock).
fn ok(runs: &[RunLog]) -> Vec<Verdict> {
    held(runs, "lock")
}

/// Verdicts: every run of an `/acme` node held `how` (`lock` or `lease`).
fn held(runs: &[RunLog], how: &'static str) -> Vec<Verdict> {
    runs.iter()
        .map(|r| Verdict {
            id: r.id.clone(),
            check: Check::Ok,
            elapsed: 0.01,
            at: r.start + 0.01,
            held: if r.path.starts_with("/acme/") {
                how
            } else {
                "role"
            },
        })
        .collect()
}

fn violations(runs: Vec<RunLog>, verdicts: Vec<Verdict>, journal: &Journal) -> Vec<String> {
    violations_at(runs, verdicts, journal, &commits(MaxParallel::Unset, None))
}

fn violations_at(
    mut runs: Vec<RunLog>,
    verdicts: Vec<Verdict>,
    journal: &Journal,
    commits: &[(String, f64, Tree)],
) -> Vec<String> {
    check(
        &mut runs,
        &verdicts,
        journal,
        commits,
        &[],
        &mut Counts::default(),
    )
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
        found.len() == 2
            && found[0].contains("2 hosts inside /acme/a")
            && found[1].contains("two holders of the node lock"),
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
        found.len() == 1 && found[0].contains("inside the role lock"),
        "{found:?}"
    );
}

#[test]
fn a_run_without_its_lock_is_flagged_unless_the_check_was_late() {
    let runs = vec![run("a", "h1", "/acme/a", 10.0, Some(11.0), Some(0))];
    let bad = |elapsed, at| {
        vec![Verdict {
            id: "a".into(),
            check: Check::Bad("held by h2".into()),
            elapsed,
            at,
            held: "",
        }]
    };
    let found = violations(runs.clone(), bad(0.05, 10.05), &Journal::default());
    assert!(
        found.len() == 1 && found[0].contains("without its lock"),
        "{found:?}"
    );
    // Too slow to prove anything (3 s), or known only after the run had ended (a health
    // check waits 1 s at most for its answer): unknown, not a violation.
    for (elapsed, at) in [(3.0, 13.0), (1.1, 11.1)] {
        let mut counts = Counts::default();
        let found = check(
            &mut runs.clone(),
            &bad(elapsed, at),
            &Journal::default(),
            &commits(MaxParallel::Unset, None),
            &[],
            &mut counts,
        );
        assert_eq!(found, Vec::<String>::new(), "{elapsed} {at}");
        assert_eq!(counts.unknown, 1, "{elapsed} {at}");
    }
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

#[test]
fn a_version_recorded_after_a_failure_whose_step_a_later_tree_drops_is_not_flagged() {
    // h1's /acme/b failed at v1; a sync killed after writing the next commit's tree (which
    // deploys nothing to h1) left it under v1, and h1's next pass at v1 had nothing to do.
    let runs = vec![run("b", "h1", "/acme/b", 1.3, Some(1.4), Some(3))];
    let mut journal = Journal::default();
    journal.halts.push(halt("h1", "Command failed: ...", 1.5));
    journal.samples.push(("h1".into(), "v1".into(), 100, 3.0));
    let mut later = tree(MaxParallel::Count(1), None, "1.4");
    for node in later.acme.values_mut() {
        node.hosts.remove("h1");
    }
    let mut history = commits(MaxParallel::Count(1), None);
    history.push(("v2".into(), 2.0, later));
    let found = violations_at(runs.clone(), ok(&runs), &journal, &history);
    assert_eq!(found, Vec::<String>::new());
    // The same tree committed after the version was recorded excuses nothing.
    history[1].1 = 3.5;
    let found = violations_at(runs.clone(), ok(&runs), &journal, &history);
    assert!(
        found.len() == 1 && found[0].contains("recorded version v1"),
        "{found:?}"
    );
}

// Rolling deploys: leases, canaries, health checks.

#[test]
fn k_hosts_under_leases_are_fine_and_k_plus_one_is_flagged() {
    let k2 = commits(MaxParallel::Count(2), None);
    let two = vec![
        run("a", "h1", "/acme/a", 1.0, Some(2.0), Some(0)),
        run("b", "h2", "/acme/a", 1.5, Some(3.0), Some(0)),
        run("c", "h3", "/acme/a", 2.5, Some(3.5), Some(0)),
    ];
    let found = violations_at(two.clone(), held(&two, "lease"), &Journal::default(), &k2);
    assert_eq!(found, Vec::<String>::new());
    // A third host while two are inside.
    let mut three = two.clone();
    three.push(run("d", "h4", "/acme/a", 1.8, Some(2.2), Some(0)));
    let found = violations_at(
        three.clone(),
        held(&three, "lease"),
        &Journal::default(),
        &k2,
    );
    assert!(
        found.len() == 1
            && found[0].contains("3 hosts inside /acme/a")
            && found[0].contains("max-parallel 2"),
        "{found:?}"
    );
    // 50% of 4 deploy targets is 2 as well.
    let half = commits(MaxParallel::Percent(50), None);
    let found = violations_at(
        three.clone(),
        held(&three, "lease"),
        &Journal::default(),
        &half,
    );
    assert!(
        found.len() == 1 && found[0].contains("3 hosts inside"),
        "{found:?}"
    );
    // A health check keeps its step inside: h1's check until 2.6 makes h3 the third.
    let mut checked = two.clone();
    let mut health = run("ha", "h1", "/acme/a", 2.1, Some(2.6), Some(0));
    health.kind = "health".into();
    checked.push(health);
    let found = violations_at(
        checked.clone(),
        held(&checked, "lease"),
        &Journal::default(),
        &k2,
    );
    assert!(
        found.len() == 1 && found[0].contains("3 hosts inside"),
        "{found:?}"
    );
}

#[test]
fn a_k_that_changed_between_versions_is_judged_by_the_version_deployed() {
    // v1 allows 3, v2 (committed at 5.0) 1: three at once at v1 are fine, at v2 not.
    let commits = vec![
        (
            "v1".to_string(),
            0.0,
            tree(MaxParallel::Count(3), None, "1.4"),
        ),
        ("v2".to_string(), 5.0, tree(MaxParallel::Unset, None, "1.4")),
    ];
    let at = |version: &str, start: f64| {
        let mut runs = vec![
            run("a", "h1", "/acme/a", start, Some(start + 1.0), Some(0)),
            run(
                "b",
                "h2",
                "/acme/a",
                start + 0.2,
                Some(start + 1.0),
                Some(0),
            ),
            run(
                "c",
                "h3",
                "/acme/a",
                start + 0.4,
                Some(start + 1.0),
                Some(0),
            ),
        ];
        for r in &mut runs {
            r.version = version.into();
        }
        runs
    };
    let v1 = at("v1", 1.0);
    let found = violations_at(
        v1.clone(),
        held(&v1, "lease"),
        &Journal::default(),
        &commits,
    );
    assert_eq!(found, Vec::<String>::new());
    let v2 = at("v2", 6.0);
    let found = violations_at(v2.clone(), held(&v2, "lock"), &Journal::default(), &commits);
    assert!(
        found
            .iter()
            .any(|f| f.contains("3 hosts inside /acme/a") && f.contains("max-parallel 1")),
        "{found:?}"
    );
    // v1 deployed while v2's tree was already written (committed before the run) may use
    // either: a lease at v1 after 5.0 is fine, and a lease where only K = 1 applies is not.
    let late = at("v1", 6.0);
    let found = violations_at(
        late.clone(),
        held(&late, "lease"),
        &Journal::default(),
        &commits,
    );
    assert_eq!(found, Vec::<String>::new());
    let one = vec![run("x", "h1", "/acme/a", 6.0, Some(7.0), Some(0))];
    let mut one_v2 = one.clone();
    one_v2[0].version = "v2".into();
    let found = violations_at(
        one_v2.clone(),
        held(&one_v2, "lease"),
        &Journal::default(),
        &commits,
    );
    assert!(
        found.len() == 1 && found[0].contains("a lease of /acme/a where max-parallel is 1"),
        "{found:?}"
    );
}

#[test]
fn a_script_or_health_check_without_its_lease_is_flagged() {
    let mut runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(0)),
        run("b", "h1", "/acme/a", 1.6, Some(1.7), Some(0)),
    ];
    runs[1].kind = "health".into();
    for bad in ["a", "b"] {
        let mut verdicts = held(&runs, "lease");
        for v in &mut verdicts {
            if v.id == bad {
                v.check = Check::Bad("no lease of /agent-semaphores/acme,a is h1's".into());
                v.held = "";
            }
        }
        let found = violations_at(
            runs.clone(),
            verdicts,
            &Journal::default(),
            &commits(MaxParallel::Count(2), None),
        );
        assert!(
            found.len() == 1 && found[0].contains("without its lock") && found[0].contains(bad),
            "{bad}: {found:?}"
        );
    }
}

#[test]
fn a_lease_before_the_canaries_passed_is_flagged() {
    let commits = commits(MaxParallel::Count(3), Some(2));
    // h1 and h2 are canaries (the node lock, one at a time), then h3 and h4 take leases.
    let good = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(0)),
        run("b", "h2", "/acme/a", 1.6, Some(2.0), Some(0)),
        run("c", "h3", "/acme/a", 2.1, Some(3.0), Some(0)),
        run("d", "h4", "/acme/a", 2.2, Some(3.0), Some(0)),
    ];
    let verdicts = |runs: &[RunLog]| {
        let mut v = held(runs, "lease");
        v[0].held = "lock";
        v[1].held = "lock";
        v
    };
    let found = violations_at(good.clone(), verdicts(&good), &Journal::default(), &commits);
    assert_eq!(found, Vec::<String>::new());
    // h3 takes a lease between the first and the second canary (no overlap: a lease
    // overlapping a canary's node lock would be `cross`).
    let mut early = good.clone();
    early[2].start = 1.55;
    early[2].end = Some(1.58);
    let found = violations_at(
        early.clone(),
        verdicts(&early),
        &Journal::default(),
        &commits,
    );
    assert!(
        found.len() == 1 && found[0].contains("after 1 canaries") && found[0].contains("2 needed"),
        "{found:?}"
    );
    // A canary whose health check never passed does not count.
    let mut unhealthy = good.clone();
    let mut check = run("hb", "h2", "/acme/a", 2.02, Some(2.05), Some(1));
    check.kind = "health".into();
    unhealthy.push(check);
    let mut journal = Journal::default();
    journal.halts.push(halt(
        "h2",
        "Health check failed for /acme/a 0: soak: never healthy",
        1.95,
    ));
    let mut v = verdicts(&unhealthy);
    v[4].held = "lock";
    let found = violations_at(unhealthy.clone(), v, &journal, &commits);
    assert!(
        found.iter().filter(|f| f.contains("canaries")).count() == 2,
        "{found:?}"
    );
    // Two canaries at once under the node lock.
    let mut both = good.clone();
    both[1].start = 1.4;
    let found = violations_at(both.clone(), verdicts(&both), &Journal::default(), &commits);
    assert!(
        found
            .iter()
            .any(|f| f.contains("two holders of the node lock")),
        "{found:?}"
    );
}

#[test]
fn a_version_recorded_after_a_failed_health_check_is_flagged() {
    let mut runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.2), Some(0)),
        run("b", "h1", "/acme/a", 1.3, Some(1.4), Some(1)),
        run("c", "h1", "/acme/a", 3.3, Some(3.4), Some(1)),
    ];
    runs[1].kind = "health".into();
    runs[2].kind = "health".into();
    let mut journal = Journal::default();
    journal.halts.push(halt(
        "h1",
        "Health check failed for /acme/a 0: soak: never healthy",
        3.5,
    ));
    journal.samples.push(("h1".into(), "v1".into(), 100, 4.0));
    let found = violations(runs.clone(), ok(&runs), &journal);
    assert!(
        found.len() == 1 && found[0].contains("recorded version v1"),
        "{found:?}"
    );
    // A retry that failed before a check that passed is no failure.
    let mut healthy = runs.clone();
    healthy[2].rc = Some(0);
    let found = violations(
        healthy.clone(),
        ok(&healthy),
        &Journal {
            samples: journal.samples.clone(),
            ..Journal::default()
        },
    );
    assert_eq!(found, Vec::<String>::new());
    // A package with a health check whose deploy was never followed by one.
    let mut unchecked = vec![runs[0].clone()];
    unchecked[0].pkg = "2.0".into();
    let found = violations(
        unchecked.clone(),
        ok(&unchecked),
        &Journal {
            samples: journal.samples.clone(),
            ..Journal::default()
        },
    );
    assert!(
        found.len() == 1 && found[0].contains("recorded version v1"),
        "{found:?}"
    );
}

#[test]
fn a_failed_health_check_must_halt_with_its_message() {
    let mut runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.2), Some(0)),
        run("b", "h1", "/acme/a", 1.3, Some(5.4), Some(137)),
    ];
    runs[1].kind = "health".into();
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found
            .iter()
            .any(|f| f.contains("halted nothing with \"Health check failed for /acme/a 0: ")),
        "{found:?}"
    );
    // The wrong message: a failed script's.
    let mut journal = Journal::default();
    journal.halts.push(halt("h1", "Command failed: ...", 5.5));
    let found = violations(runs.clone(), ok(&runs), &journal);
    assert!(
        found.iter().any(|f| f.contains("no fault explains")),
        "{found:?}"
    );
    let mut journal = Journal::default();
    journal.halts.push(halt(
        "h1",
        "Health check failed for /acme/a 0: still running after 4 s",
        5.5,
    ));
    assert_eq!(
        violations(runs.clone(), ok(&runs), &journal),
        Vec::<String>::new()
    );
    // A halt only its agent's log shows (written and resumed between two samples) counts
    // for the health check; another host's does not. (With no sampled halt at all, the rule
    // that a failed run halts something still complains: only the health rule is looked at.)
    let logged = |host: &str| {
        vec![format!(
            "{host} 2026-11-25T00:00:05Z ERROR halting the cluster: Health check failed for /acme/a 0: still running after 4 s"
        )]
    };
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &ok(&runs),
        &Journal::default(),
        &commits(MaxParallel::Unset, None),
        &logged("h1"),
        &mut counts,
    );
    assert!(
        !found.iter().any(|f| f.contains("halted nothing with")),
        "{found:?}"
    );
    let found = check(
        &mut runs.clone(),
        &ok(&runs),
        &Journal::default(),
        &commits(MaxParallel::Unset, None),
        &logged("h2"),
        &mut counts,
    );
    assert!(
        found
            .iter()
            .any(|f| f.contains("halted nothing with \"Health check failed for /acme/a 0: ")),
        "{found:?}"
    );
    // A health check with no successful deploy run before it.
    let mut orphan = runs.clone();
    orphan[0].rc = Some(3);
    let found = violations(orphan.clone(), ok(&orphan), &journal);
    assert!(
        found
            .iter()
            .any(|f| f.contains("without a successful deploy run")),
        "{found:?}"
    );
}

#[test]
fn a_killed_lease_holder_must_be_named_by_a_halt() {
    let runs = vec![run("a", "h1", "/acme/a", 1.0, None, None)];
    let mut journal = Journal::default();
    journal.kills.push(("h1".into(), 1.5));
    journal.holder_kills.push(HolderKill {
        host: "h1".into(),
        run: "a".into(),
        kind: "deploy".into(),
        path: "/acme/a".into(),
        n: "0".into(),
        version: "v1".into(),
        time: 1.5,
    });
    let k2 = commits(MaxParallel::Count(2), None);
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &k2);
    assert!(
        found.len() == 1 && found[0].contains("no halt named it"),
        "{found:?}"
    );
    let named = ["halting the cluster: h1.example.com (h1) died deploying /acme/a 0 (version v1) since 1.0: in-flight record of lease abc left in /agent-semaphores/acme,a-__in-flight__".to_string()];
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &held(&runs, "lease"),
        &journal,
        &k2,
        &named,
        &mut counts,
    );
    assert_eq!(found, Vec::<String>::new());
    assert_eq!((counts.killed_leases, counts.named), (1, 1));
}

#[test]
fn steps_under_the_other_kind_of_place_are_flagged() {
    // v1 (K = 1) under the node lock still inside when v2 (K = 2) takes a lease: the node
    // lock and the leases exclude each other (the older goes first), so that is a violation
    // (`cross`), though two hosts are within v2's K.
    let commits = vec![
        ("v1".to_string(), 0.0, tree(MaxParallel::Unset, None, "1.4")),
        (
            "v2".to_string(),
            1.0,
            tree(MaxParallel::Count(2), None, "1.4"),
        ),
    ];
    let mut runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(3.0), Some(0)),
        run("b", "h2", "/acme/a", 1.5, Some(3.5), Some(0)),
    ];
    runs[1].version = "v2".into();
    let mut verdicts = held(&runs, "lease");
    verdicts[0].held = "lock";
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &verdicts,
        &Journal::default(),
        &commits,
        &[],
        &mut counts,
    );
    assert!(
        found.len() == 1
            && found[0].contains("a step under the lease of /acme/a started at 1.500")
            && found[0].contains("under the other kind of place"),
        "{found:?}"
    );
    assert_eq!(counts.cross, 1);
    // The other way round: a lease holder inside when the node lock's holder starts.
    let mut swapped = verdicts.clone();
    swapped[0].held = "lease";
    swapped[1].held = "lock";
    let mut back = runs.clone();
    back[0].version = "v2".into();
    back[1].version = "v1".into();
    let found = violations_at(back, swapped, &Journal::default(), &commits);
    assert!(
        found.len() == 1 && found[0].contains("a step under the lock of /acme/a"),
        "{found:?}"
    );
    // A hand-off (the lock's holder ended, then the lease taker started) is no overlap, to
    // the nanosecond the scripts log.
    let mut handed = runs.clone();
    handed[1].start = 3.000_000_001;
    let found = violations_at(handed, verdicts, &Journal::default(), &commits);
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn a_lease_entered_in_a_pass_begun_in_a_mixed_window_is_flagged() {
    // K = 2 asked; the original's host node was registered from 10 to 20.
    let k2 = commits(MaxParallel::Count(2), None);
    let mut journal = Journal::default();
    journal.mixed.push(MixedWindow {
        begun: 9.9,
        from: 10.0,
        to: 20.0,
        gone: 20.1,
    });
    let mut runs = vec![
        // A pass begun before the window: its lease inside the window is fine.
        run("a", "h1", "/acme/a", 11.0, Some(12.0), Some(0)),
        // Passes begun well inside it: leases are violations...
        run("b", "h2", "/acme/a", 13.0, Some(13.5), Some(0)),
        run("c", "h3", "/acme/b", 19.5, Some(21.0), Some(0)),
        // ... but not a pass begun before the agents surely see the node,
        run("d", "h4", "/acme/b", 11.5, Some(11.9), Some(0)),
        // nor a step started after the node is gone (it may decide at entry),
        run("e", "h2", "/acme/b", 21.2, Some(21.5), Some(0)),
    ];
    runs[4].agent = 100;
    journal.passes = vec![
        ("h1".into(), 100, 5.0),
        ("h2".into(), 100, 12.5),
        ("h3".into(), 100, 19.0),
        ("h4".into(), 100, 10.5),
    ];
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &held(&runs, "lease"),
        &journal,
        &k2,
        &[],
        &mut counts,
    );
    assert!(
        found.len() == 2
            && found[0].contains("h2 entered /acme/a through a lease at 13.000")
            && found[1].contains("h3 entered /acme/b through a lease at 19.500"),
        "{found:?}"
    );
    // Judged: b, c (and d's pass began too early, a's before, e started after).
    assert_eq!((counts.mixed_steps, counts.mixed_parallel), (2, 2));
    // Under the node lock, the same history is clean (the node lock where K > 1 is right
    // for a pass that may have seen the fleet mixed)...
    let found = check(
        &mut runs.clone(),
        &ok(&runs),
        &journal,
        &k2,
        &[],
        &mut Counts::default(),
    );
    assert_eq!(found, Vec::<String>::new());
    // ... but not for one that began after the node was surely gone (and seen gone).
    let mut late = runs.clone();
    late.push(run("f", "h4", "/acme/a", 30.0, Some(31.0), Some(0)));
    journal.passes.push(("h4".into(), 100, 29.0));
    let found = check(
        &mut late.clone(),
        &ok(&late),
        &journal,
        &k2,
        &[],
        &mut Counts::default(),
    );
    assert!(
        found.len() == 1 && found[0].contains("max-parallel is above 1 and no canary"),
        "{found:?}"
    );
    // Another process of the same host (its pass starts are its own) is not judged by them.
    let mut other = runs.clone();
    other[1].agent = 200;
    let found = check(
        &mut other.clone(),
        &held(&other, "lease"),
        &journal,
        &k2,
        &[],
        &mut Counts::default(),
    );
    assert!(
        found.len() == 1 && found[0].contains("h3 entered"),
        "{found:?}"
    );
}

#[test]
fn a_holder_a_resumed_halt_declared_dead_no_longer_counts() {
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(9.0), Some(0)),
        run("b", "h2", "/acme/a", 5.0, Some(6.0), Some(0)),
    ];
    let halted = ["halting the cluster: h1.example.com (h1) died deploying /acme/a 0 (version v1) since 1.0: in-flight record left in /agent-locks/acme,a".to_string()];
    let mut counts = Counts::default();
    let found = check(
        &mut runs.clone(),
        &ok(&runs),
        &Journal::default(),
        &commits(MaxParallel::Unset, None),
        &halted,
        &mut counts,
    );
    assert_eq!(found, Vec::<String>::new());
    assert_eq!(counts.after_resume, 1);
    // Another instance of the same host is not covered by that halt.
    let found = violations(runs.clone(), ok(&runs), &Journal::default());
    assert!(
        found.iter().any(|f| f.contains("2 hosts inside")),
        "{found:?}"
    );
}

#[test]
fn a_halt_resume_cleared_is_read_from_its_output() {
    let line = "cleared: halted 3s ago by w4.example.com (w4) deploying 8e8cf6a: \
                Health check failed for /webapp/x 0: soak: never healthy";
    let halt = super::actors::cleared_halt(line).expect("a cleared halt");
    assert_eq!(halt["host"], "w4");
    assert_eq!(halt["name"], "w4.example.com");
    assert_eq!(halt["version"], "8e8cf6a");
    assert_eq!(
        halt["error"],
        "Health check failed for /webapp/x 0: soak: never healthy"
    );
    assert!(halt["time"].is_f64());
    assert_eq!(
        super::actors::cleared_halt("cluster version set to 'r1'; halt cleared"),
        None
    );
}

/// One commit `v1` (made at time 0) whose `/acme/a` and `/acme/b` (on `h1`..`h4`) have
/// `budget`.
fn budget_commits(budget: Budget) -> Vec<(String, f64, Tree)> {
    let mut t = tree(MaxParallel::Count(4), None, "1.4");
    for node in t.acme.values_mut() {
        node.budget = budget;
    }
    vec![("v1".into(), 0.0, t)]
}

/// An agent's account of a failure of `path` at `v1` (`within` or `node-halt`).
fn outcome(host: &str, path: &str, time: f64, kind: &'static str) -> Outcome {
    Outcome {
        host: host.into(),
        by: host.into(),
        pid: 100,
        time,
        path: path.into(),
        version: "v1".into(),
        kind,
    }
}

/// A record seen under `/node-state` or `/node-pauses`.
fn node_record(kind: &'static str, host: &str, path: &str, ctime: f64, place: usize) -> NodeRecord {
    let data = json!({"host": host, "name": format!("{host}.example.com"), "version": "v1",
                      "error": "Command failed: zookeeper-deploy", "time": ctime - 0.01});
    NodeRecord {
        kind,
        name: format!("{kind}~{path}~{host}"),
        path: path.into(),
        czxid: 1,
        ctime,
        seen: ctime + 0.1,
        data: data.as_object().unwrap().clone(),
        place,
    }
}

fn resume_path(path: &str, start: f64) -> NodeCommand {
    NodeCommand {
        what: "resume",
        path: path.into(),
        start,
        end: start + 0.2,
        code: 0,
    }
}

const ONE: Budget = Budget {
    max: Some(MaxFailures::Count(1)),
    halt_node: true,
};

#[test]
fn more_hosts_quarantined_than_the_budget_are_flagged_between_resumes() {
    // h1 and h2 fail /acme/a (F = 1): both say they are quarantined.
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(3)),
        run("b", "h2", "/acme/a", 1.2, Some(1.6), Some(3)),
    ];
    let mut journal = Journal {
        outcomes: vec![
            outcome("h1", "/acme/a", 1.7, "within"),
            outcome("h2", "/acme/a", 1.8, "within"),
        ],
        ..Default::default()
    };
    let commits = budget_commits(ONE);
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        found.len() == 1
            && found[0].contains("2 hosts quarantined for /acme/a at v1, its budget F = 1"),
        "{found:?}"
    );
    // A resume PATH between the two starts the count again.
    journal.node_commands = vec![resume_path("/acme/a", 1.05)];
    let mut late = runs.clone();
    late[1].start = 1.3;
    late[0].end = Some(1.04);
    journal.outcomes[0].time = 1.04;
    let found = violations_at(late.clone(), held(&late, "lease"), &journal, &commits);
    assert_eq!(found, Vec::<String>::new());
    // A quarantine where the tree gives no budget at all is flagged.
    let found = violations_at(
        runs.clone(),
        held(&runs, "lease"),
        &journal,
        &budget_commits(Budget::default()),
    );
    assert!(
        found.iter().any(|f| f.contains("its budget F = 0")),
        "{found:?}"
    );
}

#[test]
fn a_quarantined_host_running_the_node_again_before_a_resume_is_flagged() {
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(3)),
        run("b", "h1", "/acme/a", 3.0, Some(3.5), Some(0)),
    ];
    let mut journal = Journal {
        outcomes: vec![outcome("h1", "/acme/a", 1.7, "within")],
        ..Default::default()
    };
    let commits = budget_commits(ONE);
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        found.len() == 1 && found[0].contains("h1 was quarantined for /acme/a at v1"),
        "{found:?}"
    );
    journal.node_commands = vec![resume_path("/acme/a", 2.0)];
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn entering_a_node_after_its_halt_or_pause_was_recorded_is_flagged() {
    // h1 fails /acme/a and halts it (F = 0, halt-node) at 1.6; h2 enters it at 5.0.
    let runs = vec![
        run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(3)),
        run("b", "h2", "/acme/a", 5.0, Some(5.5), Some(0)),
    ];
    let halt_node = Budget {
        max: None,
        halt_node: true,
    };
    let commits = budget_commits(halt_node);
    let mut journal = Journal {
        outcomes: vec![outcome("h1", "/acme/a", 1.65, "node-halt")],
        node_records: vec![node_record("halt", "h1", "/acme/a", 1.6, 0)],
        ..Default::default()
    };
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        !found.is_empty()
            && found
                .iter()
                .all(|f| f.contains("h2 entered /acme/a at 5.000")),
        "{found:?}"
    );
    // Resumed before: fine.
    journal.node_commands = vec![resume_path("/acme/a", 4.0)];
    assert_eq!(
        violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits),
        Vec::<String>::new()
    );
    // Within SEEN of the halt: counted, not flagged.
    journal.node_commands.clear();
    let mut soon = runs.clone();
    soon[1].start = 2.5;
    soon[1].end = Some(2.9);
    let mut counts = Counts::default();
    let found = check(
        &mut soon,
        &held(&runs, "lease"),
        &journal,
        &commits,
        &[],
        &mut counts,
    );
    assert_eq!(found, Vec::<String>::new());
    assert_eq!(counts.budget.late, 1);
    // A pause of /acme/b (the nemesis's), entered 3 s later.
    let runs = vec![run("c", "h3", "/acme/b", 13.0, Some(13.5), Some(0))];
    let journal = Journal {
        node_records: vec![node_record("pause", "operator", "/acme/b", 10.0, 0)],
        ..Default::default()
    };
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        found.len() == 1 && found[0].contains("h3 entered /acme/b at 13.000, after the pause"),
        "{found:?}"
    );
}

#[test]
fn a_failure_of_a_node_with_a_budget_must_be_a_quarantine_or_a_halt() {
    let runs = vec![run("a", "h1", "/acme/a", 1.0, Some(1.5), Some(3))];
    let commits = budget_commits(ONE);
    // Nothing: flagged.
    let found = violations_at(
        runs.clone(),
        held(&runs, "lease"),
        &Journal::default(),
        &commits,
    );
    assert!(
        found.len() == 1 && found[0].contains("a failed run halted nothing"),
        "{found:?}"
    );
    // Its failure record within F (the agent's log lost): a quarantine.
    let mut journal = Journal {
        node_records: vec![node_record("fail", "h1", "/acme/a", 1.6, 1)],
        ..Default::default()
    };
    assert_eq!(
        violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits),
        Vec::<String>::new()
    );
    // Its record beyond F, and no halt: flagged.
    journal.node_records[0].place = 2;
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        found.len() == 1 && found[0].contains("a failed run halted nothing"),
        "{found:?}"
    );
    // ... unless the node was halted.
    journal
        .node_records
        .push(node_record("halt", "h1", "/acme/a", 1.7, 0));
    assert_eq!(
        violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits),
        Vec::<String>::new()
    );
    // A node halt and a failure record no failed run explains are flagged.
    let found = violations_at(Vec::new(), Vec::new(), &journal, &commits);
    assert!(
        found.len() == 2 && found.iter().all(|f| f.contains("no failed run explains")),
        "{found:?}"
    );
}

#[test]
fn a_new_cluster_version_starts_the_count_again_for_a_pass_still_at_the_old_one() {
    // h7 is quarantined for /acme/a at v1 (F = 1); the cluster moves to v2 (its sync deletes
    // v1's records); h6, still in a pass of v1, fails it and counts from an empty budget.
    let runs = vec![
        run("a", "h7", "/acme/a", 1.0, Some(1.5), Some(3)),
        run("b", "h6", "/acme/a", 6.0, Some(6.5), Some(3)),
    ];
    let mut journal = Journal {
        outcomes: vec![
            outcome("h7", "/acme/a", 1.7, "within"),
            outcome("h6", "/acme/a", 6.7, "within"),
        ],
        ..Default::default()
    };
    let commits = budget_commits(ONE);
    journal.versions = vec![(json!("v1"), 0.0, 1.9), (json!("v2"), 2.0, 9.0)];
    assert_eq!(
        violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits),
        Vec::<String>::new()
    );
    // The same cluster version all along: flagged.
    journal.versions = vec![(json!("v1"), 0.0, 9.0)];
    let found = violations_at(runs.clone(), held(&runs, "lease"), &journal, &commits);
    assert!(
        found.len() == 1 && found[0].contains("2 hosts quarantined"),
        "{found:?}"
    );
}

/// A journal with `said` (by `host`'s agent 100 in a pass begun at `pass`) and an original's
/// host node registered from 1 to 10.
fn mixed_from_1_to_10(said: Outcome, host: &str, pass: f64) -> Journal {
    Journal {
        outcomes: vec![said],
        passes: vec![(host.into(), 100, pass)],
        mixed: vec![MixedWindow {
            begun: 0.9,
            from: 1.0,
            to: 10.0,
            gone: 10.1,
        }],
        ..Default::default()
    }
}

#[test]
fn a_budget_applied_in_a_pass_begun_while_the_fleet_was_mixed_is_flagged() {
    let runs = vec![run("a", "h1", "/acme/a", 6.0, Some(6.5), Some(3))];
    let mut journal = mixed_from_1_to_10(outcome("h1", "/acme/a", 6.7, "within"), "h1", 5.0);
    let commits = budget_commits(ONE);
    let found = violations_at(runs.clone(), held(&runs, "lock"), &journal, &commits);
    assert!(
        found.len() == 1 && found[0].contains("while the fleet was mixed"),
        "{found:?}"
    );
    // A pass begun before the window was planned on a fleet of ours alone.
    journal.passes[0].2 = 0.5;
    assert_eq!(
        violations_at(runs.clone(), held(&runs, "lock"), &journal, &commits),
        Vec::<String>::new()
    );
}

#[test]
fn a_dead_holder_counted_by_a_finder_that_planned_after_the_window_is_not_flagged() {
    // h1 died in /acme/a before its script logged a start; h2 found it. h2's pass began
    // inside the window (1 to 10), but it planned (it reads whether the fleet is mixed after
    // discovery) by its first script at 10.5, after the original's node was deleted.
    let mut runs = vec![run("b", "h2", "/acme/b", 10.5, Some(11.0), Some(0))];
    let mut found_dead = outcome("h1", "/acme/a", 12.0, "within");
    found_dead.by = "h2".into();
    let mut journal = mixed_from_1_to_10(found_dead, "h2", 9.9);
    let commits = budget_commits(ONE);
    let judged = |runs: &Vec<RunLog>, journal: &Journal| {
        violations_at(runs.clone(), held(runs, "lock"), journal, &commits)
            .into_iter()
            .filter(|v| v.contains("while the fleet was mixed"))
            .collect::<Vec<_>>()
    };
    assert_eq!(judged(&runs, &journal), Vec::<String>::new());
    // A first script at 9.95 says it planned while the node surely existed: flagged.
    runs[0].start = 9.95;
    let found = judged(&runs, &journal);
    assert!(
        found.len() == 1 && found[0].starts_with("h1 applied"),
        "{found:?}"
    );
    // So does a finding within the window without any script before it.
    runs.clear();
    journal.outcomes[0].time = 9.98;
    assert_eq!(judged(&runs, &journal).len(), 1);
}
