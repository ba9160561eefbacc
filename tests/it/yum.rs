//! `zkdeployment::packages::yum`: the `list installed` parser, the install algorithm against
//! the yum 3 fake (its quirks), and against the real dnf in a sandbox (RHEL 8/9 behaviour).

use crate::support;

use std::path::Path;
use std::process::Command;

use proptest::prelude::*;
use support::rpm::{FakeYum, Sandbox, LONG_NAME};
use zkdeployment::packages::yum::{parse_list_installed, Installed, Yum, YumError};

fn parse(output: &str, name: &str) -> Option<String> {
    parse_list_installed(output, name).unwrap_or_else(|e| panic!("parse error: {e}"))
}

// ---------------------------------------------------------------------------------------------
// parse_list_installed

#[test]
fn parses_dnf_output() {
    let out = "Installed Packages\n\
               foo.noarch                             1.4-1                              @local\n";
    assert_eq!(parse(out, "foo").as_deref(), Some("1.4"));
}

#[test]
fn parses_yum3_wrapped_long_names() {
    let out = format!(
        "Installed Packages\n\
         {LONG_NAME}.noarch\n\
         {:41}1.0-1                  @local\n",
        ""
    );
    assert_eq!(parse(&out, LONG_NAME).as_deref(), Some("1.0"));
}

#[test]
fn removes_epoch_and_release() {
    let out = "Installed Packages\nepochy.noarch          1:2.5-1           @local\n";
    assert_eq!(parse(out, "epochy").as_deref(), Some("2.5"));
    let out = "Installed Packages\nkernel.x86_64   4.18.0-513.5.1.el8_9   @anaconda\n";
    assert_eq!(parse(out, "kernel").as_deref(), Some("4.18.0"));
    let out = "squid.x86_64   7:3.5.20-17.el7_9.10   @updates\n";
    assert_eq!(parse(out, "squid").as_deref(), Some("3.5.20"));
}

#[test]
fn ignores_other_packages_sharing_the_prefix() {
    let out = "Installed Packages\n\
               foo-bar.noarch          9.9-1        @local\n\
               foo.noarch              1.4-1        @local\n\
               foobar.noarch           8.8-1        @local\n";
    assert_eq!(parse(out, "foo").as_deref(), Some("1.4"));
    assert_eq!(parse(out, "foo-bar").as_deref(), Some("9.9"));
    let only_longer = "Installed Packages\nfoo-bar.noarch    9.9-1    @local\n";
    assert_eq!(parse(only_longer, "foo"), None);
    // The version of a package named bar-1.4 is not read from its name.
    let versioned = "Installed Packages\nbar-1.4.noarch    1.4-1    @local\n";
    assert_eq!(parse(versioned, "bar-1.4").as_deref(), Some("1.4"));
    assert_eq!(parse(versioned, "bar"), None);
}

#[test]
fn ignores_headers_and_messages() {
    let out = "Loaded plugins: fastestmirror, langpacks\n\
               Loading mirror speeds from cached hostfile\n\
               Installed Packages\n\
               foo.x86_64                     2.0-3.el7                     @base\n";
    assert_eq!(parse(out, "foo").as_deref(), Some("2.0"));
}

#[test]
fn empty_and_garbage_output_is_not_installed() {
    assert_eq!(parse("", "foo"), None);
    assert_eq!(parse("\n\n", "foo"), None);
    assert_eq!(parse("Installed Packages\n", "foo"), None);
    assert_eq!(
        parse("Error: No matching Packages to list\nfoo is great\n", "foo"),
        None
    );
    assert_eq!(parse("foo-1.4-1.noarch foo.noarch.x 1.0-1\n", "foo"), None);
}

#[test]
fn an_entry_without_a_version_is_a_parse_error() {
    for out in [
        "Installed Packages\nfoo.noarch\n",
        "Installed Packages\nfoo.noarch   @local\n",
        "Installed Packages\nfoo.noarch   1.4   @local\n",
    ] {
        let err = parse_list_installed(out, "foo").expect_err(out);
        assert!(matches!(err, YumError::Parse(_)), "{err:?}");
        let message = err.to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(message.contains("foo.noarch"), "{message}");
    }
}

proptest! {
    #[test]
    fn never_panics(output in any::<String>(), name in "[a-z.+_-]{0,12}") {
        let _ = parse_list_installed(&output, &name);
    }

    #[test]
    fn never_panics_on_near_misses(
        lines in prop::collection::vec("(foo|foo\\.noarch|foo-x\\.noarch|1:1\\.0-1|1\\.0|@local| |\n)*", 0..6)
    ) {
        let _ = parse_list_installed(&lines.join("\n"), "foo");
    }

    #[test]
    fn reads_back_what_yum_prints(
        name in "[a-z][a-z0-9_+-]{0,50}",
        arch in "(noarch|x86_64|i686)",
        version in "[0-9][0-9a-z.]{0,8}",
        release in "[0-9][0-9a-z._]{0,8}",
        epoch in prop::option::of(0u32..10),
        wrapped in any::<bool>(),
    ) {
        let evr = match epoch {
            Some(e) => format!("{e}:{version}-{release}"),
            None => format!("{version}-{release}"),
        };
        let entry = format!("{name}.{arch}");
        let line = if wrapped {
            format!("{entry}\n{:41}{evr:<22} @local", "")
        } else {
            format!("{entry:<40} {evr:<22} @local")
        };
        let out = format!("Installed Packages\n{name}-extra.{arch} 9-9 @local\n{line}\n");
        prop_assert_eq!(parse_list_installed(&out, &name), Ok(Some(version)));
    }
}

// ---------------------------------------------------------------------------------------------
// Against the yum 3 fake

#[tokio::test]
async fn fake_install_verifies_and_cleans_first() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(
        fake.calls(),
        [
            "-q list installed foo",
            "-y clean all",
            "-y install foo-1.0",
            "-q list installed foo"
        ]
    );
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.0-1"));
    assert!(fake.fs().join("opt/foo/bin/zookeeper-deploy").is_file());
    assert_eq!(
        yum.installed_version("foo").await,
        Ok(Some("1.0".to_string()))
    );
}

#[tokio::test]
async fn fake_upgrade_and_clean_once_per_pass() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(
        yum.install("foo", Some("1.4")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(
        yum.install("worker", Some("1.1")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.4-1"));
    let cleans = |calls: &[String]| calls.iter().filter(|c| *c == "-y clean all").count();
    assert_eq!(cleans(&fake.calls()), 1, "{:?}", fake.calls());
    assert!(yum.cleaned());

    // The next pass is a new Yum value: it cleans again before its first install.
    let mut next = Yum::new(fake.yum_path());
    assert_eq!(
        next.install("foo", Some("2.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(cleans(&fake.calls()), 2, "{:?}", fake.calls());
    // ...but not when nothing needs installing.
    let mut idle = Yum::new(fake.yum_path());
    assert_eq!(
        idle.install("foo", Some("2.0")).await,
        Ok(Installed::Unchanged)
    );
    assert_eq!(cleans(&fake.calls()), 2, "{:?}", fake.calls());
    assert!(!idle.cleaned());
}

#[tokio::test]
async fn fake_refuses_a_lower_version_so_we_downgrade() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    assert_eq!(
        yum.install("foo", Some("2.0")).await,
        Ok(Installed::Installed)
    );
    let before = fake.calls().len();
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Downgraded)
    );
    assert_eq!(
        fake.calls()[before..],
        [
            "-q list installed foo",
            "-y install foo-1.0",
            "-q list installed foo",
            "-y downgrade foo-1.0",
            "-q list installed foo"
        ]
    );
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.0-1"));
}

#[tokio::test]
async fn fake_already_installed_runs_no_install() {
    let fake = FakeYum::new();
    Yum::new(fake.yum_path())
        .install("foo", Some("1.4"))
        .await
        .unwrap();
    let before = fake.calls().len();
    let mut yum = Yum::new(fake.yum_path());
    assert_eq!(
        yum.install("foo", Some("1.4")).await,
        Ok(Installed::Unchanged)
    );
    assert_eq!(fake.calls()[before..], ["-q list installed foo"]);
}

#[tokio::test]
async fn fake_dont_care() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    // Not installed: installed without a version, and verified.
    assert_eq!(yum.install("bar-1.4", None).await, Ok(Installed::Installed));
    assert_eq!(
        fake.calls(),
        [
            "-q list installed bar-1.4",
            "-y clean all",
            "-y install bar-1.4",
            "-q list installed bar-1.4"
        ]
    );
    // Installed: any version will do.
    let before = fake.calls().len();
    assert_eq!(yum.install("bar-1.4", None).await, Ok(Installed::Unchanged));
    assert_eq!(fake.calls()[before..], ["-q list installed bar-1.4"]);
    Yum::new(fake.yum_path())
        .install("foo", Some("1.0"))
        .await
        .unwrap();
    assert_eq!(yum.install("foo", None).await, Ok(Installed::Unchanged));
    assert_eq!(fake.installed("foo").as_deref(), Some("0:1.0-1"));
}

#[tokio::test]
async fn fake_dont_care_is_verified_too() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    let err = yum.install("nosuch-2.0", None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to install nosuch-2.0 (installed: None)"
    );
    assert_eq!(
        fake.calls().last().map(String::as_str),
        Some("-q list installed nosuch-2.0")
    );
}

#[tokio::test]
async fn fake_missing_package_exit_0_is_caught() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    let err = yum.install("nosuch", Some("1.0")).await.unwrap_err();
    assert_eq!(
        err,
        YumError::NotInstalled {
            spec: "nosuch-1.0".into(),
            installed: None
        }
    );
    assert_eq!(
        err.to_string(),
        "Failed to install nosuch-1.0 (installed: None)"
    );
}

#[tokio::test]
async fn fake_missing_version_reports_the_installed_one() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    yum.install("foo", Some("1.4")).await.unwrap();
    let err = yum.install("foo", Some("9.9")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to install foo-9.9 (installed: 1.4)"
    );
    assert!(fake.calls().contains(&"-y downgrade foo-9.9".to_string()));
}

#[tokio::test]
async fn fake_missing_package_exit_1_is_a_command_failure() {
    let fake = FakeYum::new();
    fake.set_missing_rc(1);
    let mut yum = Yum::new(fake.yum_path());
    let err = yum.install("nosuch", Some("1.0")).await.unwrap_err();
    assert!(matches!(err, YumError::Command(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("Command failed: {} -y install nosuch-1.0", fake.yum_path())
    );
}

#[tokio::test]
async fn fake_failing_clean_is_an_error_and_retried() {
    let fake = FakeYum::new();
    fake.set_fail(Some("^clean"));
    let mut yum = Yum::new(fake.yum_path());
    let err = yum.install("foo", Some("1.0")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Command failed: {} -y clean all", fake.yum_path())
    );
    assert!(!yum.cleaned());
    assert_eq!(fake.installed("foo"), None);
    fake.set_fail(None);
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert!(yum.cleaned());
}

#[tokio::test]
async fn fake_wrapped_long_name_and_epoch() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    assert_eq!(
        yum.install(LONG_NAME, Some("1.0")).await,
        Ok(Installed::Installed)
    );
    // The fake wraps, as yum 3 does: NAME.ARCH alone on its line.
    let listing = Command::new(fake.yum_path())
        .args(["-q", "list", "installed", LONG_NAME])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.lines().any(|l| l == format!("{LONG_NAME}.noarch")),
        "{listing}"
    );
    assert_eq!(
        yum.install("epochy", Some("2.5")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(fake.installed("epochy").as_deref(), Some("1:2.5-1"));
    assert_eq!(
        yum.installed_version("epochy").await,
        Ok(Some("2.5".to_string()))
    );
}

#[tokio::test]
async fn fake_remove() {
    let fake = FakeYum::new();
    let mut yum = Yum::new(fake.yum_path());
    yum.install("webrc", Some("1.1")).await.unwrap();
    let bin = fake.fs().join("opt/webrc/bin");
    assert!(bin.join("starting-deployments").is_file());
    assert!(bin.join("ending-deployments").is_file());
    yum.remove("webrc").await.unwrap();
    assert_eq!(
        fake.calls().last().map(String::as_str),
        Some("-y remove webrc")
    );
    assert_eq!(yum.installed_version("webrc").await, Ok(None));
    assert!(!bin.join("starting-deployments").exists());
    // Removing what is not installed is fine.
    yum.remove("webrc").await.unwrap();
}

#[tokio::test]
async fn missing_yum_is_a_command_error() {
    let yum = Yum::new("/nonexistent/yum");
    let err = yum.installed_version("foo").await.unwrap_err();
    assert!(matches!(err, YumError::Command(_)), "{err:?}");
}

#[test]
fn dry_run_commands() {
    let mut yum = Yum::new("yum");
    assert_eq!(
        yum.plan_install("foo", Some("1.4")),
        ["yum -y clean all", "yum -y install foo-1.4"]
    );
    assert_eq!(
        yum.plan_install("bar-1.4", None),
        ["yum -y install bar-1.4"]
    );
    assert_eq!(yum.plan_remove("foo"), "yum -y remove foo");
}

// ---------------------------------------------------------------------------------------------
// Against the real dnf (RHEL 8/9 yum)

fn run_script(path: &Path, args: &[&str]) {
    let status = Command::new(path).args(args).status().unwrap();
    assert!(status.success(), "{} failed", path.display());
}

#[tokio::test]
async fn dnf_install_upgrade_downgrade() {
    let Some(sandbox) = Sandbox::try_new() else {
        return;
    };
    let mut yum = Yum::new(sandbox.yum_path());
    assert_eq!(yum.installed_version("foo").await, Ok(None));
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(sandbox.rpm_q("foo").as_deref(), Some("1.0-1"));
    assert_eq!(
        yum.install("foo", Some("1.4")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(sandbox.rpm_q("foo").as_deref(), Some("1.4-1"));
    // dnf's install goes to the exact version asked for: no downgrade needed.
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(sandbox.rpm_q("foo").as_deref(), Some("1.0-1"));
    let calls = sandbox.calls();
    assert_eq!(calls.iter().filter(|c| *c == "-y clean all").count(), 1);
    assert!(!calls.iter().any(|c| c.contains("downgrade")), "{calls:?}");
    assert_eq!(
        yum.install("foo", Some("1.0")).await,
        Ok(Installed::Unchanged)
    );

    // The payload lands in the installroot and logs its calls.
    run_script(
        &sandbox.opt("foo").join("bin/zookeeper-deploy"),
        &["a", "b"],
    );
    assert_eq!(
        support::read(sandbox.opt("foo").join("deploy.log")),
        "foo-1.0-1: a b\n"
    );
}

#[tokio::test]
async fn dnf_dont_care_versioned_name() {
    let Some(sandbox) = Sandbox::try_new() else {
        return;
    };
    let mut yum = Yum::new(sandbox.yum_path());
    assert_eq!(yum.install("bar-1.4", None).await, Ok(Installed::Installed));
    assert_eq!(sandbox.rpm_q("bar-1.4").as_deref(), Some("1.4-1"));
    assert_eq!(sandbox.rpm_q("bar-1.0"), None);
    let before = sandbox.calls().len();
    let mut next = Yum::new(sandbox.yum_path());
    assert_eq!(
        next.install("bar-1.4", None).await,
        Ok(Installed::Unchanged)
    );
    assert_eq!(sandbox.calls()[before..], ["-q list installed bar-1.4"]);
    assert!(sandbox
        .opt("bar-1.4")
        .join("bin/zookeeper-deploy")
        .is_file());
}

#[tokio::test]
async fn dnf_epoch_long_name_and_role_scripts() {
    let Some(sandbox) = Sandbox::try_new() else {
        return;
    };
    let mut yum = Yum::new(sandbox.yum_path());
    assert_eq!(
        yum.install("epochy", Some("2.5")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(
        yum.installed_version("epochy").await,
        Ok(Some("2.5".into()))
    );
    assert_eq!(sandbox.rpm_q("epochy").as_deref(), Some("2.5-1"));
    assert_eq!(
        yum.install(LONG_NAME, Some("1.0")).await,
        Ok(Installed::Installed)
    );
    assert_eq!(
        yum.install("webrc", Some("1.1")).await,
        Ok(Installed::Installed)
    );
    let bin = sandbox.opt("webrc").join("bin");
    run_script(&bin.join("starting-deployments"), &["x"]);
    run_script(&bin.join("ending-deployments"), &[]);
    assert_eq!(
        support::read(sandbox.opt("webrc").join("deploy.log")),
        "webrc-1.1-1 starting-deployments: x\nwebrc-1.1-1 ending-deployments: \n"
    );
}

#[tokio::test]
async fn dnf_missing_package_is_a_command_failure() {
    let Some(sandbox) = Sandbox::try_new() else {
        return;
    };
    let mut yum = Yum::new(sandbox.yum_path());
    let err = yum.install("nosuch", Some("1.0")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Command failed: {} -y install nosuch-1.0",
            sandbox.yum_path()
        )
    );
}

#[tokio::test]
async fn dnf_remove() {
    let Some(sandbox) = Sandbox::try_new() else {
        return;
    };
    let mut yum = Yum::new(sandbox.yum_path());
    yum.install("foo", Some("1.4")).await.unwrap();
    assert!(sandbox.opt("foo").join("bin/zookeeper-deploy").is_file());
    yum.remove("foo").await.unwrap();
    assert_eq!(yum.installed_version("foo").await, Ok(None));
    assert_eq!(sandbox.rpm_q("foo"), None);
    assert!(!sandbox.opt("foo").exists());
}
