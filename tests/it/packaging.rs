//! The RPM: `scripts/test.sh` builds it with `scripts/build-rpm.sh --sandbox` from a release
//! build and passes its path in `ZKD_TEST_RPM`; this test installs it into the real dnf
//! sandbox and runs the installed binary. Also: every command answers `-h` and `-V`, and the
//! systemd unit passes `systemd-analyze verify` where that is available.

use crate::support;

use support::rpm::Sandbox;

#[test]
fn the_rpm_installs_with_dnf_and_its_binary_runs() {
    let Ok(rpm) = std::env::var("ZKD_TEST_RPM") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build the RPM (scripts/test.sh sets ZKD_TEST_RPM)"
        );
        eprintln!("SKIPPED: ZKD_TEST_RPM is not set (run scripts/test.sh, which builds the RPM)");
        return;
    };
    let Some(sb) = Sandbox::try_new() else { return };
    let out = std::process::Command::new(sb.yum_path())
        .args(["-y", "install", &rpm])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sb
        .rpm_q("zkdeployment")
        .is_some_and(|v| v.starts_with(env!("CARGO_PKG_VERSION"))));
    let bin = sb.root().join("usr/bin/zkdeployment");
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("zkdeployment {}", env!("CARGO_PKG_VERSION"))
    );
    let help = std::process::Command::new(&bin)
        .args(["monitor", "--help"])
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("Nagios"));
    for file in [
        "etc/zkdeployment/agent.cfg",
        "usr/lib/systemd/system/zkdeployment-agent.service",
        "etc/cron.d/zkdeployment-sync",
        "usr/share/man/man1/zkdeployment-sync.1",
        "usr/share/bash-completion/completions/zkdeployment",
        "usr/share/zkdeployment/nagios-zkdeployment.cfg",
    ] {
        assert!(sb.root().join(file).exists(), "{file} missing from the RPM");
    }
    // The shipped example config is valid (its host-id comes from a file we provide).
    let cfg = std::fs::read_to_string(sb.root().join("etc/zkdeployment/agent.cfg")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("host-id"), "h1\n").unwrap();
    let cfg = cfg.replace(
        "file:///etc/zkdeployment/host-id",
        &format!("file://{}/host-id", dir.path().display()),
    );
    zkdeployment::config::parse(&dir.path().join("agent.cfg"), &cfg, &|_| Ok(None))
        .expect("the example config parses");
}

#[test]
fn every_command_answers_help_and_version() {
    let commands: [&[&str]; 11] = [
        &[],
        &["agent"],
        &["deploy"],
        &["sync"],
        &["monitor"],
        &["status"],
        &["resume"],
        &["tree"],
        &["tree", "check"],
        &["tree", "export"],
        &["tree", "import"],
    ];
    for cmd in commands {
        for flag in ["-h", "--help", "-V"] {
            let mut args = cmd.to_vec();
            args.push(flag);
            let run = support::run(&args);
            assert_eq!(run.code, 0, "{args:?}: {run:?}");
            assert!(!run.stdout.is_empty(), "{args:?}");
        }
        if cmd != ["resume"] {
            let mut args = cmd.to_vec();
            args.push("--version");
            assert_eq!(support::run(&args).code, 0, "{args:?}");
        }
    }
    // One ZooKeeper argument everywhere: `-z/--zookeeper CONN`, except `agent`, whose `-z`
    // is the original's --assert-zookeeper-address.
    for cmd in [
        &["deploy"][..],
        &["monitor"],
        &["status"],
        &["resume"],
        &["sync"],
        &["tree", "export"],
        &["tree", "import"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let help = support::run(&args).stdout;
        assert!(help.contains("-z, --zookeeper <CONN>"), "{args:?}\n{help}");
    }
    let help = support::run(&["agent", "--help"]).stdout;
    assert!(
        help.contains("-z, --assert-zookeeper-address <ADDR>"),
        "{help}"
    );
    assert!(help.contains("    --zookeeper <CONN>"), "{help}");
}

#[test]
fn the_systemd_unit_verifies() {
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("SKIPPED: systemd-analyze is not installed");
        return;
    };
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/zkdeployment-agent.service"
    ))
    .unwrap();
    assert!(
        unit.contains("Type=notify")
            && unit.contains("Restart=on-failure")
            && unit.contains("RestartPreventExitStatus=2")
    );
    let path = dir.path().join("zkdeployment-agent.service");
    std::fs::write(
        &path,
        unit.replace("/usr/bin/zkdeployment", env!("CARGO_BIN_EXE_zkdeployment")),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
