//! Git checkouts as package versions, through the agent (`zkdeployment deploy`): a version
//! `git:LOCATION#REF` (or `git://LOCATION#REF`) makes `ROOT/opt/<rpm>` a checkout of REF,
//! built by its `stage-build` only when its commit changed; switching between
//! an RPM and a checkout removes the other first; a checkout no longer used is deleted
//! without yum.
//!
//! The repositories are made here (a [`TestRepo`] whose commits are written with git2 so
//! that the scripts are executable): `bin/zookeeper-deploy` is the test payload (it logs
//! `foo-git-<label>: ARGS` to `ZK_DEPLOY_LOG` and writes the `.deployed` marker) and
//! `stage-build` appends `<label> <cwd>` to a build log outside the checkout.

use crate::support;

use std::path::PathBuf;

use git2::{Oid, Repository, Signature};
use serde_json::{json, Value};
use support::agent::{lines, v, Pm, TestHost};
use support::git::TestRepo;
use support::rpm::payload_script;

/// A repository of deployable checkouts for one test host.
struct Source {
    repo: TestRepo,
    build_log: PathBuf,
}

impl Source {
    fn new(h: &TestHost) -> Source {
        Source {
            repo: TestRepo::new(),
            build_log: h.scratch("build.log"),
        }
    }

    /// Commits on `branch` (child of its tip): `VERSION` = `label`, the payload
    /// `bin/zookeeper-deploy` of `foo-git-<label>`, an executable `stage-build`, and a
    /// `.gitignore`. Returns the commit id.
    fn commit(&self, branch: &str, label: &str) -> String {
        self.commit_with(branch, label, "foo", &["zookeeper-deploy"], true)
    }

    /// [`Source::commit`] with the payload scripts `bin/<script>` of `<name>-git-<label>`,
    /// and a `stage-build` that fails (after logging) unless `build_ok`.
    fn commit_with(
        &self,
        branch: &str,
        label: &str,
        name: &str,
        scripts: &[&str],
        build_ok: bool,
    ) -> String {
        let git = Repository::open(self.repo.path()).unwrap();
        let blob = |text: &str| git.blob(text.as_bytes()).unwrap();
        let stage_build = format!(
            "#!/bin/sh\necho \"$(cat VERSION) $PWD\" >> '{}'\n{}",
            self.build_log.display(),
            if build_ok {
                ""
            } else {
                "echo 'the build failed: the test asked for it'\nexit 2\n"
            }
        );
        let payload = payload_script(&format!("{name}-git-{label}"));
        let mut bin = git.treebuilder(None).unwrap();
        for script in scripts {
            bin.insert(script, blob(&payload), 0o100755).unwrap();
        }
        let bin = bin.write().unwrap();
        let mut top = git.treebuilder(None).unwrap();
        top.insert(".gitignore", blob("deploy.log\n"), 0o100644)
            .unwrap();
        top.insert("VERSION", blob(label), 0o100644).unwrap();
        top.insert("stage-build", blob(&stage_build), 0o100755)
            .unwrap();
        top.insert("bin", bin, 0o040000).unwrap();
        let tree = git.find_tree(top.write().unwrap()).unwrap();
        let refname = format!("refs/heads/{branch}");
        let parent = git
            .find_reference(&refname)
            .ok()
            .and_then(|r| r.peel_to_commit().ok());
        let parents: Vec<_> = parent.iter().collect();
        let sig = Signature::now("test", "test@example.com").unwrap();
        git.commit(Some(&refname), &sig, &sig, label, &tree, &parents)
            .unwrap()
            .to_string()
    }

    /// A lightweight tag.
    fn tag(&self, name: &str, commit: &str) {
        let git = Repository::open(self.repo.path()).unwrap();
        let object = git
            .find_object(Oid::from_str(commit).unwrap(), None)
            .unwrap();
        git.tag_lightweight(name, &object, true).unwrap();
    }

    /// `git:<path>#REF`.
    fn version(&self, reference: &str) -> String {
        format!("git:{}#{reference}", self.repo.url())
    }

    /// The build log: `<label> <cwd>` per build.
    fn builds(&self) -> Vec<String> {
        lines(&self.build_log)
    }
}

/// `/acme/web : TYPE` at `version`, deployed to h1.
fn tree(type_: &str, version: &str) -> String {
    format!("/acme\n  /web : {type_}\n    version = '{version}'\n    /deploy\n      /h1\n")
}

fn log_env(h: &TestHost) -> String {
    h.scratch("deploy.log").display().to_string()
}

/// The payload's log (`ZK_DEPLOY_LOG`).
fn log(h: &TestHost) -> Vec<String> {
    lines(&h.scratch("deploy.log"))
}

async fn deploy(h: &TestHost, args: &[&str]) {
    let env = log_env(h);
    h.deploy_env(args, &[("ZK_DEPLOY_LOG", env.as_str())])
        .await
        .assert_ok();
}

/// Yum calls that change something.
fn mutations(h: &TestHost) -> Vec<String> {
    h.yum_calls()
        .into_iter()
        .filter(|c| !c.starts_with("-q list installed "))
        .collect()
}

fn read(h: &TestHost, rel: &str) -> String {
    std::fs::read_to_string(h.root().join(rel)).unwrap_or_default()
}

/// The HEAD commit of the checkout.
fn head(h: &TestHost) -> String {
    Repository::open(h.root().join("opt/foo"))
        .unwrap()
        .head()
        .unwrap()
        .peel_to_commit()
        .unwrap()
        .id()
        .to_string()
}

/// The output the report gives for the install step of the last pass.
fn install_output(h: &TestHost) -> Value {
    h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == json!("install"))
        .map(|s| s["output"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_checkout_is_built_once_and_rebuilt_only_when_its_commit_changes() {
    let h = TestHost::fake("git-rebuild").await;
    let src = Source::new(&h);
    let c1 = src.commit("master", "v1");
    let version = src.version("master");
    h.tree(&tree("foo", &version), v("r1")).await;
    deploy(&h, &[]).await;
    let opt = h.root().join("opt/foo");
    assert!(h.exists("/opt/foo/.git"));
    assert_eq!(read(&h, "opt/foo/VERSION"), "v1");
    assert_eq!(read(&h, "opt/foo/.git/.zkdeployment"), version);
    assert_eq!(head(&h), c1);
    assert_eq!(src.builds(), [format!("v1 {}", opt.display())]);
    assert_eq!(log(&h), ["foo-git-v1: /acme/web 0"]);
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
    assert_eq!(
        read(&h, "etc/foo/acme,web.0.script"),
        opt.join("bin/zookeeper-deploy").display().to_string()
    );
    assert_eq!(install_output(&h), json!(format!("foo at {c1}, rebuilt")));
    // No package manager work for a checkout (only the query of what is installed).
    assert_eq!(mutations(&h), Vec::<String>::new());

    // Same REF, same commit: fetched, not rebuilt, deployed again.
    h.set_version(v("r2")).await;
    deploy(&h, &[]).await;
    deploy(&h, &["--force"]).await;
    assert_eq!(src.builds().len(), 1);
    assert_eq!(log(&h).len(), 3);
    assert_eq!(install_output(&h), json!(format!("foo at {c1}")));

    // REF moved: fetched, checked out, rebuilt.
    let c2 = src.commit("master", "v2");
    h.set_version(v("r3")).await;
    deploy(&h, &[]).await;
    assert_eq!(head(&h), c2);
    assert_eq!(read(&h, "opt/foo/VERSION"), "v2");
    assert_eq!(
        src.builds(),
        [
            format!("v1 {}", opt.display()),
            format!("v2 {}", opt.display())
        ]
    );
    assert_eq!(log(&h).last().unwrap(), "foo-git-v2: /acme/web 0");
    assert_eq!(install_output(&h), json!(format!("foo at {c2}, rebuilt")));
    assert_eq!(h.status_text(), "done");
    assert_eq!(h.host_version().as_deref(), Some("\"r3\""));
    assert_eq!(mutations(&h), Vec::<String>::new());
}

#[tokio::test]
async fn tags_and_commit_ids_are_checked_out() {
    let h = TestHost::fake("git-refs").await;
    let src = Source::new(&h);
    let c1 = src.commit("master", "v1");
    src.tag("release-1", &c1);
    let c2 = src.commit("master", "v2");
    // A tag, in the original's git:// form.
    let tagged = format!("git://{}#release-1", src.repo.url());
    h.tree(&tree("foo", &tagged), v("r1")).await;
    deploy(&h, &[]).await;
    assert_eq!(head(&h), c1);
    assert_eq!(read(&h, "opt/foo/.git/.zkdeployment"), tagged);
    assert_eq!(log(&h), ["foo-git-v1: /acme/web 0"]);
    // A full commit id.
    h.tree(&tree("foo", &src.version(&c2)), v("r2")).await;
    deploy(&h, &[]).await;
    assert_eq!(head(&h), c2);
    assert_eq!(log(&h)[1..], ["foo-git-v2: /acme/web 0"]);
    // An abbreviated one.
    h.tree(&tree("foo", &src.version(&c1[..10])), v("r3")).await;
    deploy(&h, &[]).await;
    assert_eq!(head(&h), c1);
    assert_eq!(log(&h)[2..], ["foo-git-v1: /acme/web 0"]);
    let labels: Vec<String> = src
        .builds()
        .iter()
        .map(|b| b.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(labels, ["v1", "v2", "v1"]);
    assert_eq!(mutations(&h), Vec::<String>::new());
}

#[tokio::test]
async fn an_rpm_becomes_a_checkout_and_an_rpm_again() {
    let h = TestHost::fake("git-switch").await;
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    let src = Source::new(&h);
    src.commit("master", "v1");
    h.tree(&tree("foo", "1.0"), v("r1")).await;
    deploy(&h, &[]).await;
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.0-1"));
    assert_eq!(log(&h), ["foo-1.0-1: /acme/web 0"]);

    // RPM → checkout: the RPM is removed first (removing it after the clone would take the
    // checkout's bin/zookeeper-deploy with it), nothing is installed.
    h.tree(&tree("foo", &src.version("master")), v("r2")).await;
    let before = mutations(&h).len();
    deploy(&h, &[]).await;
    assert_eq!(mutations(&h)[before..], ["-y remove foo"]);
    assert_eq!(fake.installed("foo"), None);
    assert!(h.exists("/opt/foo/.git"));
    assert_eq!(src.builds().len(), 1);
    assert_eq!(log(&h)[1..], ["foo-git-v1: /acme/web 0"]);
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);

    // Checkout → RPM: the checkout is removed before yum installs into /opt/foo.
    h.tree(&tree("foo", "1.4"), v("r3")).await;
    let before = mutations(&h).len();
    deploy(&h, &[]).await;
    assert_eq!(
        mutations(&h)[before..],
        ["-y clean all", "-y install foo-1.4"]
    );
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.4-1"));
    assert!(!h.exists("/opt/foo/.git"));
    assert!(!h.exists("/opt/foo/stage-build"));
    assert!(!h.exists("/opt/foo/VERSION"));
    assert_eq!(log(&h)[2..], ["foo-1.4-1: /acme/web 0"]);
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
    assert_eq!(h.status_text(), "done");

    // And the next pass is settled: nothing to install.
    h.set_version(v("r4")).await;
    let before = mutations(&h).len();
    deploy(&h, &[]).await;
    assert_eq!(mutations(&h)[before..], Vec::<String>::new());
    assert_eq!(log(&h)[3..], ["foo-1.4-1: /acme/web 0"]);
}

#[tokio::test]
async fn a_checkout_no_longer_used_is_deleted_without_yum() {
    let h = TestHost::fake("git-remove").await;
    let src = Source::new(&h);
    src.commit("master", "v1");
    h.tree(&tree("foo", &src.version("master")), v("r1")).await;
    deploy(&h, &[]).await;
    assert!(h.exists("/opt/foo/.git"));
    h.tree("/acme\n", v("r2")).await;
    let calls = h.yum_calls().len();
    deploy(&h, &[]).await;
    // Undeployed with the checkout's script, then the checkout and /etc/foo removed.
    assert_eq!(log(&h)[1..], ["foo-git-v1: -u /acme/web 0"]);
    assert!(!h.exists("/opt/foo"));
    assert!(!h.exists("/etc/foo"));
    assert_eq!(h.yum_calls()[calls..], Vec::<String>::new());
    let actions: Vec<Value> = h.report()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["action"].clone())
        .collect();
    assert_eq!(
        actions,
        [
            json!("undeploy"),
            json!("uninstall"),
            json!("remove-etc"),
            json!("record-version")
        ]
    );
    assert_eq!(h.status_text(), "done");
}

#[tokio::test]
async fn a_subtype_is_passed_to_the_checkouts_script() {
    let h = TestHost::fake("git-subtype").await;
    let src = Source::new(&h);
    src.commit("master", "v1");
    h.tree(&tree("foo admin", &src.version("master")), v("r1"))
        .await;
    deploy(&h, &[]).await;
    assert_eq!(log(&h), ["foo-git-v1: -r admin /acme/web 0"]);
    assert_eq!(h.etc("foo"), ["acme,web.0.deployed", "acme,web.0.script"]);
    let report = h.report();
    let deploy = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["action"] == json!("deploy"))
        .unwrap()
        .clone();
    assert_eq!(
        deploy["command"],
        json!([
            h.root()
                .join("opt/foo/bin/zookeeper-deploy")
                .display()
                .to_string(),
            "-r",
            "admin",
            "/acme/web",
            "0"
        ])
    );
}

#[tokio::test]
async fn a_failing_build_halts_the_cluster_and_is_retried() {
    let h = TestHost::fake("git-build-fails").await;
    let src = Source::new(&h);
    src.commit_with("master", "v1", "foo", &["zookeeper-deploy"], false);
    h.tree(&tree("foo", &src.version("master")), v("r1")).await;
    let env = log_env(&h);
    let run = h.deploy_env(&[], &[("ZK_DEPLOY_LOG", env.as_str())]).await;
    run.assert_code(1);
    let build = h.root().join("opt/foo/stage-build").display().to_string();
    let message = format!("Command failed: {build}");
    assert!(run.stderr.contains(&message), "{run}");
    let hosts = h.hosts().await;
    assert_eq!(hosts["version"], Value::Null);
    assert_eq!(hosts["halt"]["error"], json!(message));
    let report = h.report();
    let last = report["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["action"], json!("install"));
    assert_eq!(last["command"], json!([build]));
    assert_eq!(last["exit"], json!(2));
    assert!(
        last["output"]
            .as_str()
            .unwrap()
            .contains("the build failed: the test asked for it"),
        "{last}"
    );
    assert_eq!(log(&h), Vec::<String>::new());
    // A fixed commit: fetched and built (the failed one left no built marker), deployed.
    src.commit("master", "v2");
    h.set_version(v("r2")).await;
    deploy(&h, &[]).await;
    let labels: Vec<String> = src
        .builds()
        .iter()
        .map(|b| b.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(labels, ["v1", "v2"]);
    assert_eq!(log(&h), ["foo-git-v2: /acme/web 0"]);
}

#[tokio::test]
async fn a_role_controller_can_be_a_checkout() {
    let mut h = TestHost::fake("git-controller").await;
    h.role = Some("web-role".into());
    let Pm::Fake(fake) = &h.pm else {
        unreachable!()
    };
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    h.client.create("/role-locks", b"", &open).await.unwrap();
    h.client
        .create("/role-locks/web-role", b"", &open)
        .await
        .unwrap();
    let src = Source::new(&h);
    let rc_scripts = ["starting-deployments", "ending-deployments"];
    src.commit_with("master", "v1", "webrc", &rc_scripts, true);
    let role_tree = |rc_version: &str| {
        format!(
            "/roles\n  /web-role : webrc\n    version = '{rc_version}'\n\
             /acme\n  /web : foo\n    version = '1.0'\n    /deploy\n      /web-role\n"
        )
    };
    h.tree(&role_tree(&src.version("master")), v("r1")).await;
    deploy(&h, &[]).await;
    assert!(h.exists("/opt/webrc/.git"));
    assert_eq!(
        log(&h),
        [
            "webrc-git-v1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-git-v1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(src.builds().len(), 1);
    assert_eq!(mutations(&h), ["-y clean all", "-y install foo-1.0"]);
    // Unchanged: brought up to date, not rebuilt.
    h.set_version(v("r2")).await;
    deploy(&h, &[]).await;
    assert_eq!(src.builds().len(), 1);
    assert_eq!(log(&h).len(), 6);
    // The RPM of the same name replaces the checkout.
    h.tree(&role_tree("1.0"), v("r3")).await;
    let before = mutations(&h).len();
    deploy(&h, &[]).await;
    assert_eq!(
        mutations(&h)[before..],
        ["-y clean all", "-y install webrc-1.0"]
    );
    assert!(!h.exists("/opt/webrc/.git"));
    assert_eq!(fake.installed("webrc").as_deref(), Some("0:1.0-1"));
    assert_eq!(
        log(&h)[6..],
        [
            "webrc-1.0-1 starting-deployments: /roles/web-role",
            "foo-1.0-1: /acme/web 0",
            "webrc-1.0-1 ending-deployments: /roles/web-role",
        ]
    );
    assert_eq!(h.status_text(), "done");
}
