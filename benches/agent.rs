//! Agent benchmark on the generated fleet (about 50,000 nodes; `BENCH_CUSTOMERS=100` for about
//! 5,000, `BENCH_CUSTOMERS=20000` for about 1,000,000): discovery for one host (time and nodes
//! read, from the deployment index and by the walk), the time from a version bump to the first
//! deploy script of the running agent (a sync-like bump answered by the index, then foreign
//! bumps that force the walk), and the agent's resident memory after those passes.
//! Run with `cargo bench --bench agent` (`ZK_HEAP=2g` for the big tree).
//!
//! `ZKD_BENCH_BIN=PATH` runs that binary as the agent instead of the one cargo built for the
//! bench: cargo builds benches with the dev-dependencies' features, so the bench's binary has
//! tokio's multi-threaded scheduler (which the tests need and the product does not), and its
//! resident memory is not the product's. Measure the product with
//! `cargo build --release --locked && cp target/release/zkdeployment /tmp/zkd &&
//! ZKD_BENCH_BIN=/tmp/zkd cargo bench --bench agent` (copied: the bench's build replaces
//! `target/release/zkdeployment`).

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use zkdeployment::agent::discover::{discover_with_mode, Mode, Source};
use zkdeployment::agent::model::Host;
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};

fn write_exe(path: &Path, text: &str) {
    fleet::write_exe(path, text)
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// Resident memory of its own (heap, stacks) and mapped from files (the binary, libc), and
/// the peak resident set so far (`VmHWM`).
fn rss_split(pid: u32) -> String {
    format!(
        "{} KiB anonymous + {} KiB file-backed; peak {} KiB",
        status_kib(pid, "RssAnon:").unwrap_or(0),
        status_kib(pid, "RssFile:").unwrap_or(0),
        status_kib(pid, "VmHWM:").unwrap_or(0)
    )
}

/// The shared libraries mapped by a process (their file names).
fn shared_libraries(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut libs: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains(".so"))
        .filter_map(|p| p.rsplit('/').next().map(str::to_string))
        .collect();
    libs.dedup();
    libs
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
        let t = Instant::now();
        let g = fleet::write_index(&client).await;
        fleet::bump(&client, "v1", Some(&g)).await;
        println!("deployment index written (walk + generation) in {:.2} s", t.elapsed().as_secs_f64());

        let host = Host { id: fleet::BENCH_HOST.into(), name: "bench-host.example.com".into(), role: None };
        let v1 = json!("v1");
        for (label, mode) in [("walk", Mode::Walk), ("index", Mode::Index(&v1))] {
            let mut best = f64::MAX;
            let (mut found, mut reads) = (0, 0);
            for _ in 0..5 {
                let t = Instant::now();
                let (d, snap) = discover_with_mode(&client, &host, mode).await.unwrap();
                best = best.min(t.elapsed().as_secs_f64());
                found = d.deployments.len();
                reads = snap.reads;
                match mode {
                    Mode::Walk => assert_eq!(snap.walked, nodes + 1, "the walk visits every node of the tree"),
                    Mode::Index(_) => assert_eq!(snap.source, Some(Source::Index), "the index answers"),
                }
            }
            println!("discovery for one host ({label}) on {nodes} nodes: {best:.4} s (best of 5), {reads} nodes read, {found} deployments");
        }

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
        let agent_bin = std::env::var_os("ZKD_BENCH_BIN").map(std::path::PathBuf::from).unwrap_or_else(support::bin);
        println!("agent binary: {} ({} bytes)", agent_bin.display(), std::fs::metadata(&agent_bin).map(|m| m.len()).unwrap_or(0));
        let mut agent = tokio::process::Command::new(&agent_bin)
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
        let idle_split = rss_split(pid);
        let mut samples = Vec::new();
        let mut walked = Vec::new();
        for round in 2..8 {
            let with_index = round < 5;
            let v = format!("v{round}");
            let g = if with_index { Some(fleet::write_index(&client).await) } else { None };
            let bumped = zkdeployment::files::now();
            fleet::bump(&client, &v, g.as_ref()).await;
            let deadline = Instant::now() + Duration::from_secs(60);
            let first = loop {
                let text = std::fs::read_to_string(&times).unwrap_or_default();
                if let Some(line) = text.lines().find(|l| l.starts_with(&format!("{v} "))) {
                    break line.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap();
                }
                assert!(Instant::now() < deadline, "no deploy script ran for {v}");
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            if with_index { samples.push(first - bumped) } else { walked.push(first - bumped) }
            let leak: &'static str = Box::leak(v.into_boxed_str());
            wait_done(leak).await;
            if round == 4 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let after = rss_kib(pid).unwrap_or(0);
                println!("agent resident memory: idle after the first pass {idle} KiB ({idle_split}), idle after 3 more passes answered by the index {after} KiB ({})", rss_split(pid));
            }
        }
        for s in [&mut samples, &mut walked] {
            s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        }
        println!("version bump to first deploy script (running agent, index): median {:.3} s over {} bumps", samples[samples.len() / 2], samples.len());
        println!("version bump to first deploy script (running agent, walk forced): median {:.3} s over {} bumps", walked[walked.len() / 2], walked.len());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = rss_kib(pid).unwrap_or(0);
        println!("agent resident memory: idle after 3 more passes that walked {after} KiB ({})", rss_split(pid));
        println!("agent shared libraries: {}", shared_libraries(pid).join(" "));
        agent.start_kill().unwrap();
        let _ = agent.wait().await;
    });
}
