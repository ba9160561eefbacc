//! The RPM: `scripts/test.sh` builds it with `scripts/build-rpm.sh --sandbox` from a release
//! build and passes its path in `ZKD_TEST_RPM`; this test installs it into the real dnf
//! sandbox and checks what lands where, that an agent-only host runs no cron line (the
//! `zkdeployment-syncer` package holds it), and that the installed configuration with only
//! `zookeeper` set runs a pass, the host id being the host name. Also: every command answers `-h` and `-V`, and the
//! systemd unit passes `systemd-analyze verify` where that is available.

use crate::support;

use std::path::{Path, PathBuf};

use support::rpm::Sandbox;

/// `dnf -y install PATH` in the sandbox.
fn dnf_install(sb: &Sandbox, rpm: &Path) {
    let out = std::process::Command::new(sb.yum_path())
        .arg("-y")
        .arg("install")
        .arg(rpm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        rpm.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file under the sandbox's `dir` (relative to the root), sorted.
fn files_under(root: &Path, dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![root.join(dir)];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn the_rpm_installs_with_dnf_and_works_as_installed() {
    let Ok(rpm) = std::env::var("ZKD_TEST_RPM") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must build the RPM (scripts/test.sh sets ZKD_TEST_RPM)"
        );
        eprintln!("SKIPPED: ZKD_TEST_RPM is not set (run scripts/test.sh, which builds the RPM)");
        return;
    };
    let rpm = PathBuf::from(rpm);
    let Some(sb) = Sandbox::try_new() else { return };
    dnf_install(&sb, &rpm);
    assert!(sb
        .rpm_q("zkdeployment")
        .is_some_and(|v| v.starts_with(env!("CARGO_PKG_VERSION"))));
    let root = sb.root();
    let bin = root.join("usr/bin/zkdeployment");
    let version = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("zkdeployment {}", env!("CARGO_PKG_VERSION"))
    );
    // What lands where.
    for file in [
        "etc/zkdeployment/agent.cfg",
        "usr/lib/systemd/system/zkdeployment-agent.service",
        "usr/lib/systemd/system-preset/80-zkdeployment.preset",
        "usr/share/man/man1/zkdeployment.1",
        "usr/share/man/man1/zkdeployment-sync.1",
        "usr/share/man/man1/zkdeployment-tree-check.1",
        "usr/share/man/man1/zkdeployment-tree-export.1",
        "usr/share/man/man1/zkdeployment-tree-import.1",
        "usr/share/man/man5/zkdeployment.conf.5",
        "usr/share/man/man8/zkdeployment-agent.8",
        "usr/share/bash-completion/completions/zkdeployment",
        "usr/share/zkdeployment/nagios-zkdeployment.cfg",
    ] {
        assert!(root.join(file).is_file(), "{file} missing from the RPM");
    }
    assert!(root.join("var/lib/zkdeployment").is_dir());
    let preset = support::read(root.join("usr/lib/systemd/system-preset/80-zkdeployment.preset"));
    assert!(
        preset
            .lines()
            .any(|l| l == "enable zkdeployment-agent.service"),
        "{preset}"
    );
    // An agent-only host runs no cron line.
    assert_eq!(files_under(&root, "etc/cron.d"), Vec::<String>::new());
    assert_eq!(files_under(&root, "etc/logrotate.d"), Vec::<String>::new());

    // The installed configuration with only `zookeeper` set: the host id is the host name, and
    // a pass runs (paths relocated into the installroot, where the package put them).
    let conn = support::chroot("packaging-agent").await;
    let client = support::connect(&conn).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client
        .create("/hosts", br#"{"version": "r1"}"#, &open)
        .await
        .unwrap();
    let shipped = support::read(root.join("etc/zkdeployment/agent.cfg"));
    let run_dir = root.join("var/lib/zkdeployment");
    let cfg = shipped
        .replace("/var/lib/zkdeployment", run_dir.to_str().unwrap())
        .replace(
            "/etc/zkdeployment/host-id",
            root.join("etc/zkdeployment/host-id").to_str().unwrap(),
        )
        + &format!("zookeeper = {conn}\n");
    let cfg_path = root.join("etc/zkdeployment/agent.cfg");
    std::fs::write(&cfg_path, cfg).unwrap();
    let out = std::process::Command::new(&bin)
        .arg("agent")
        .arg(&cfg_path)
        .arg("--run-once")
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("host-id"), "{stderr}");
    let status = support::read(run_dir.join("status"));
    let words: Vec<&str> = status.split_whitespace().collect();
    assert_eq!(words.get(3..), Some(&["done"][..]), "{status}");
    assert_eq!(support::read(run_dir.join("host_version")).trim(), "\"r1\"");
    // The same with the host id written to the file the configuration names.
    std::fs::write(root.join("etc/zkdeployment/host-id"), "chosen-id\n").unwrap();
    let run = support::run_async(&["deploy", cfg_path.to_str().unwrap(), "-n", "--json"]).await;
    let plan: serde_json::Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run}"));
    assert_eq!(plan["host"], "chosen-id", "{run}");

    // The syncer's package: the cron line and the rotation of its log.
    let syncer = std::fs::read_dir(rpm.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("zkdeployment-syncer-"))
        })
        .expect("the zkdeployment-syncer RPM beside the main one");
    dnf_install(&sb, &syncer);
    assert_eq!(
        files_under(&root, "etc/cron.d"),
        vec!["etc/cron.d/zkdeployment-sync".to_string()]
    );
    let cron = support::read(root.join("etc/cron.d/zkdeployment-sync"));
    let line = cron
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("zkdeployment sync"))
        .expect("a cron line");
    let command = line
        .split(" root ")
        .nth(1)
        .unwrap()
        .split('>')
        .next()
        .unwrap();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[0], "/usr/bin/zkdeployment");
    let mut argv = vec!["zkdeployment"];
    argv.extend_from_slice(&words[1..]);
    zkdeployment::cli::command()
        .try_get_matches_from(&argv)
        .unwrap_or_else(|e| panic!("the cron line does not parse: {e}"));
    assert!(
        command.contains("--tombstone /var/lib/zkdeployment/sync-tombstone")
            && command.contains("--lock-file /var/lib/zkdeployment/sync.lock")
            && command.contains("--config /etc/zkdeployment/agent.cfg"),
        "{line}"
    );
    let log = line.split("2>>").nth(1).expect("stderr to a log").trim();
    let rotate = support::read(root.join("etc/logrotate.d/zkdeployment-sync"));
    assert!(rotate.contains(&format!("{log} {{")), "{log}: {rotate}");
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
    // systemd never gives up on an agent that exits 1 (no start limit).
    assert!(unit.contains("\nStartLimitIntervalSec=0\n"), "{unit}");
    assert!(!unit.contains("StartLimitBurst"), "{unit}");
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
