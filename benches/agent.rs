//! Agent benchmark on the generated fleet (about 50,000 nodes; `BENCH_CUSTOMERS=20000` for
//! about 1,000,000): discovery time for one host, the time from a version bump to the first
//! deploy script of the running agent, and the agent's idle resident memory.
//! Run with `cargo bench --bench agent` (`ZK_HEAP=2g` for the big tree).

#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use zkdeployment::agent::discover::discover_on;
use zkdeployment::agent::model::Host;
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};

fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let customers = fleet::customers();
    fleet::runtime().block_on(async {
        let conn = support::chroot("bench-agent").await;
        let client = support::connect(&conn).await;
        let t = Instant::now();
        let mut nodes = 0;
        for (_, text) in fleet::fleet_files(customers, 100) {
            let tree = parse(&text).unwrap();
            nodes += tree.descendants();
            import_tree(&client, &tree, "/", Trim::No, false).await.unwrap();
        }
        let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        client.create("/hosts", br#"{"version": "v1"}"#, &open).await.unwrap();
        println!("setup: {nodes} nodes imported in {:.1} s", t.elapsed().as_secs_f64());

        let host = Host { id: fleet::BENCH_HOST.into(), name: "bench-host.example.com".into(), role: None };
        let mut best = f64::MAX;
        let mut found = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let (d, snap) = discover_on(&client, &host).await.unwrap();
            best = best.min(t.elapsed().as_secs_f64());
            found = d.deployments.len();
            assert_eq!(snap.walked, nodes + 1, "the walk visits every node of the tree");
        }
        println!("discovery for one host: {best:.3} s (best of 5; {nodes} nodes walked, {found} deployments)");

        // A real agent process: packages already installed (a stand-in yum answers
        // `list installed`), deploy scripts that record the time they start.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let times = dir.path().join("times");
        write_exe(&root.join("opt/benchpkg/bin/zookeeper-deploy"), &format!(
            "#!/bin/sh\necho \"$ZKDEPLOYMENT_VERSION $(date +%s.%N)\" >> {}\n[ \"$1\" = -u ] || {{ mkdir -p \"$ZKDEPLOYMENT_ROOT/etc/benchpkg\"; : > \"$ZKDEPLOYMENT_ROOT/etc/benchpkg/$(echo \"$1\" | sed -e 's,^/,,' -e 's,/,\\,,g').$2.deployed\"; }}\n",
            times.display()));
        let yum = dir.path().join("yum");
        write_exe(&yum, "#!/bin/sh\necho 'Installed Packages'\necho 'benchpkg.noarch   1.0-1   @local'\n");
        let cfg = dir.path().join("agent.cfg");
        std::fs::write(&cfg, format!(
            "[zkdeployment]\nhost-id = {}\nhost-name = bench-host.example.com\nrun-directory = {}\nroot = {}\nyum = {}\nzookeeper = {conn}\n",
            fleet::BENCH_HOST, dir.path().join("run").display(), root.display(), yum.display())).unwrap();
        let mut agent = tokio::process::Command::new(support::bin())
            .args(["agent", cfg.to_str().unwrap()])
            .env("ZKDEPLOYMENT_LOG", "warn")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let status = dir.path().join("run/status");
        let wait_done = |v: &'static str| {
            let status = status.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(120);
                loop {
                    let s = std::fs::read_to_string(&status).unwrap_or_default();
                    if s.split_whitespace().nth(2) == Some(v) && s.ends_with(" done") {
                        return;
                    }
                    assert!(Instant::now() < deadline, "agent never reached {v}: {s}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        wait_done("v1").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let pid = agent.id().unwrap();
        let idle = rss_kib(pid).unwrap_or(0);
        let mut samples = Vec::new();
        for round in 2..5 {
            let v = format!("v{round}");
            let bumped = zkdeployment::files::now();
            client.set_data("/hosts", json!({"version": v}).to_string().as_bytes(), None).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let first = loop {
                let text = std::fs::read_to_string(&times).unwrap_or_default();
                if let Some(line) = text.lines().find(|l| l.starts_with(&format!("{v} "))) {
                    break line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap();
                }
                assert!(Instant::now() < deadline, "no deploy script ran for {v}");
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            samples.push(first - bumped);
            let leak: &'static str = Box::leak(v.into_boxed_str());
            wait_done(leak).await;
        }
        samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("version bump to first deploy script (running agent): median {:.3} s over {} bumps", samples[samples.len() / 2], samples.len());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = rss_kib(pid).unwrap_or(0);
        println!("agent resident memory: idle after the first pass {} KiB, idle after {} more passes {} KiB", idle, samples.len(), after);
        agent.start_kill().unwrap();
        let _ = agent.wait().await;
    });
}
