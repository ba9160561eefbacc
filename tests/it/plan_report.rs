//! The plan is the program: for many scenarios (plain deployments, undeploys, uninstalls,
//! `/etc` removal, a role controller installed, changed and removed, a git checkout, the
//! after hook, and failures of a deploy script, of yum, of a controller script and of the
//! after hook), the steps `last-pass.json` records are the steps `deploy --dry-run` printed
//! just before, in the same order: the same actions (JSON) and the same descriptions (text).
//! A failed pass records the plan's steps up to the failing one. The dry run lists the role
//! controller's scripts, the version recording and the after hook where the pass runs them.

use crate::support;

use git2::{Repository, Signature};
use serde_json::{json, Value};
use support::agent::{v, Pm, TestHost};
use support::git::TestRepo;
use support::rpm::{payload_script, FakeYum};
use zookeeper_client::{Acls, CreateMode};

/// What a dry run shows: the JSON steps and the text lines of the steps.
struct Shown {
    json: Vec<Value>,
    text: Vec<String>,
}

/// `deploy --dry-run --json` and `deploy --dry-run`, with `env`.
async fn dry_run(h: &TestHost, env: &[(&str, &str)]) -> Shown {
    let run = h.deploy_env(&["--dry-run", "--json"], env).await;
    assert!(matches!(run.code, 0 | 10), "{run}");
    let plan: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}\n{run}"));
    let json = plan["steps"].as_array().unwrap().clone();
    let run = h.deploy_env(&["--dry-run"], env).await;
    // A deploy line ends with how the node rolls out (`[max-parallel 1]`), which is not part
    // of the step's name in the report.
    let text = run
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .map(|l| match l.rsplit_once(" [max-parallel ") {
            Some((step, _)) if l.starts_with("deploy ") => step.to_string(),
            _ => l.to_string(),
        })
        .collect();
    Shown { json, text }
}

/// The report's (action, step) pairs. A `health` entry (the health check that follows a
/// deploy script when the package has one) belongs to its deploy step and is left out.
fn reported(h: &TestHost) -> Vec<(String, String)> {
    h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["action"] != "health")
        .map(|s| {
            (
                s["action"].as_str().unwrap().to_string(),
                s["step"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Dry run, then the pass (expecting `code`); asserts the report's steps are the plan's steps
/// (all of them if the pass succeeded, else the plan's first steps, up to the failed one).
/// Returns the plan's actions.
async fn pass_as_planned(h: &TestHost, env: &[(&str, &str)], code: i32) -> Vec<String> {
    let shown = dry_run(h, env).await;
    let planned: Vec<(String, String)> = shown
        .json
        .iter()
        .map(|s| s["action"].as_str().unwrap().to_string())
        .zip(shown.text.iter().cloned())
        .collect();
    assert_eq!(
        shown.json.len(),
        shown.text.len(),
        "JSON {:?} and text {:?} list different steps",
        shown.json,
        shown.text
    );
    let run = h.deploy_env(&[], env).await;
    run.assert_code(code);
    let report = reported(h);
    if code == 0 {
        assert_eq!(report, planned, "{run}");
    } else {
        assert!(!report.is_empty(), "{run}");
        assert!(report.len() <= planned.len(), "{report:?}\n{planned:?}");
        assert_eq!(report, planned[..report.len()], "{run}");
        let last = h.report()["steps"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_ne!(
            last["exit"],
            json!(0),
            "the last step recorded failed: {last}"
        );
    }
    planned.into_iter().map(|(a, _)| a).collect()
}

const WEB: &str = "
/acme
  /web : foo
    version = '1.0'
    /deploy
      /h1
        n = 2
  /old : worker
    version = '1.1'
    /deploy
      /h1
";

#[tokio::test]
async fn deployments_undeploys_removals_and_the_after_hook() {
    let mut h = TestHost::fake("plan-report-plain").await;
    h.extra = "after = /bin/sh -c 'echo after'\n".into();
    h.tree(WEB, v("r1")).await;
    let actions = pass_as_planned(&h, &[], 0).await;
    assert_eq!(
        actions,
        [
            "install",
            "install",
            "deploy",
            "deploy",
            "deploy",
            "record-version",
            "after"
        ]
    );
    // The deploys name the node lock each takes.
    let shown = dry_run(&h, &[]).await;
    assert!(shown.json.is_empty(), "converged: {:?}", shown.json);
    h.set_version(v("r2")).await;
    let shown = dry_run(&h, &[]).await;
    let deploy = shown
        .json
        .iter()
        .find(|s| s["action"] == json!("deploy"))
        .unwrap();
    assert_eq!(deploy["lock"], json!({"node": "/agent-locks/acme,old"}));

    // One instance fewer, an application gone: undeploys, an uninstall, /etc removed.
    let fewer = WEB.replace("n = 2", "n = 1");
    let fewer = &fewer[..fewer.find("  /old").unwrap()];
    h.tree(fewer, v("r3")).await;
    let actions = pass_as_planned(&h, &[], 0).await;
    assert_eq!(
        actions,
        [
            "undeploy",
            "undeploy",
            "deploy",
            "uninstall",
            "remove-etc",
            "record-version",
            "after"
        ]
    );
}

#[tokio::test]
async fn failures_record_the_plan_up_to_the_failing_step() {
    let mut h = TestHost::fake("plan-report-fail").await;
    h.tree(WEB, v("r1")).await;
    // A deploy script fails.
    pass_as_planned(&h, &[("ZK_TEST_FAIL", "/acme/web")], 1).await;
    assert_eq!(
        h.report()["steps"].as_array().unwrap().last().unwrap()["action"],
        json!("deploy")
    );
    // yum fails.
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    fake.set_fail(Some("install foo-2.0"));
    h.tree(&WEB.replace("'1.0'", "'2.0'"), v("r2")).await;
    pass_as_planned(&h, &[], 1).await;
    assert_eq!(
        h.report()["steps"].as_array().unwrap().last().unwrap()["action"],
        json!("install")
    );
    fake.set_fail(None);
    // The after hook fails: every step before it ran.
    h.extra = "after = /bin/sh -c 'exit 3'\n".into();
    h.set_version(v("r3")).await;
    let actions = pass_as_planned(&h, &[], 1).await;
    assert_eq!(actions.last().map(String::as_str), Some("after"));
    assert_eq!(h.report()["steps"].as_array().unwrap().len(), actions.len());
}

const ROLE: &str = "web-role";

fn role_tree(rc: Option<(&str, &str)>) -> String {
    let mut text = String::from("/roles\n");
    if let Some((rpm, version)) = rc {
        text.push_str(&format!("  /{ROLE} : {rpm}\n    version = '{version}'\n"));
    }
    text.push_str(&format!(
        "/acme\n  /web : foo\n    version = '1.0'\n    /deploy\n      /{ROLE}\n"
    ));
    text
}

#[tokio::test]
async fn a_role_controller_and_its_scripts() {
    let conn = support::chroot("plan-report-role").await;
    let mut h = TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await;
    h.role = Some(ROLE.into());
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for path in ["/role-locks", "/role-locks/web-role"] {
        h.client.create(path, b"", &open).await.unwrap();
    }
    h.tree(&role_tree(Some(("webrc", "1.0"))), v("r1")).await;
    let actions = pass_as_planned(&h, &[], 0).await;
    assert_eq!(
        actions,
        [
            "role-controller",
            "starting-deployments",
            "install",
            "deploy",
            "ending-deployments",
            "record-version"
        ]
    );
    // Deployments run under the role lock.
    h.set_version(v("r2")).await;
    let shown = dry_run(&h, &[]).await;
    let deploy = shown
        .json
        .iter()
        .find(|s| s["action"] == json!("deploy"))
        .unwrap();
    assert_eq!(deploy["lock"], json!({"role": "/role-locks/web-role"}));
    assert!(
        shown
            .text
            .contains(&"starting-deployments /roles/web-role (webrc)".to_string()),
        "{:?}",
        shown.text
    );
    // The controller changes; then its end script fails.
    h.tree(&role_tree(Some(("webrc", "1.1"))), v("r3")).await;
    pass_as_planned(&h, &[], 0).await;
    h.set_version(v("r4")).await;
    pass_as_planned(&h, &[("ZK_TEST_FAIL_ROLE", "ending")], 1).await;
    // The controller goes (the failed host's request is removed, as an operator would).
    let (requests, _) = h.client.get_children("/role-locks/web-role").await.unwrap();
    for r in requests {
        h.client
            .delete(&format!("/role-locks/web-role/{r}"), None)
            .await
            .unwrap();
    }
    h.tree(&role_tree(None), v("r5")).await;
    let actions = pass_as_planned(&h, &[], 0).await;
    assert_eq!(actions, ["role-controller", "deploy", "record-version"]);
}

/// Commits an executable payload `bin/zookeeper-deploy` of `foo-git-<label>` on master.
fn commit_checkout(repo: &TestRepo, label: &str) {
    let git = Repository::open(repo.path()).unwrap();
    let blob = |text: &str| git.blob(text.as_bytes()).unwrap();
    let mut bin = git.treebuilder(None).unwrap();
    bin.insert(
        "zookeeper-deploy",
        blob(&payload_script(&format!("foo-git-{label}"))),
        0o100755,
    )
    .unwrap();
    let bin = bin.write().unwrap();
    let mut top = git.treebuilder(None).unwrap();
    top.insert("VERSION", blob(label), 0o100644).unwrap();
    top.insert("bin", bin, 0o040000).unwrap();
    let tree = git.find_tree(top.write().unwrap()).unwrap();
    let parent = git
        .find_reference("refs/heads/master")
        .ok()
        .and_then(|r| r.peel_to_commit().ok());
    let parents: Vec<_> = parent.iter().collect();
    let sig = Signature::now("test", "test@example.com").unwrap();
    git.commit(
        Some("refs/heads/master"),
        &sig,
        &sig,
        label,
        &tree,
        &parents,
    )
    .unwrap();
}

#[tokio::test]
async fn a_git_checkout_is_brought_up_to_date_every_pass() {
    let h = TestHost::fake("plan-report-git").await;
    let repo = TestRepo::new();
    commit_checkout(&repo, "one");
    let version = format!("git:{}#master", repo.url());
    let tree = format!("/acme\n  /web : foo\n    version = '{version}'\n    /deploy\n      /h1\n");
    h.tree(&tree, v("r1")).await;
    let log = h.scratch("deploy.log").display().to_string();
    let env = [("ZK_DEPLOY_LOG", log.as_str())];
    let actions = pass_as_planned(&h, &env, 0).await;
    assert_eq!(actions, ["install", "deploy", "record-version"]);
    commit_checkout(&repo, "two");
    h.set_version(v("r2")).await;
    let actions = pass_as_planned(&h, &env, 0).await;
    assert_eq!(actions, ["install", "deploy", "record-version"]);
}
