//! Fleet benchmark of `zkdeployment plan` and `zkdeployment status`: the generated ~50,000-node
//! tree in ZooKeeper, 1,000 registered hosts (`BENCH_HOSTS`) each with the inventory of a host
//! converged on that tree, and a candidate commit from local files that upgrades two packages
//! of every customer. Prints the wall time of each command as a process (best and median of 5)
//! and the plan's peak resident memory. Run with `cargo bench --bench plan`.

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

mod fleet;

use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use zkdeployment::agent::discover::discover_in;
use zkdeployment::agent::inventory::Inventory;
use zkdeployment::agent::model::Host;
use zkdeployment::fleet::index::TargetIndex;
use zkdeployment::fleet::plan::converged;
use zkdeployment::tree::parse::parse;
use zkdeployment::tree::Node;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::paths::{version_set, DEPLOYED_AT, INVENTORY, VERSION_SET};
use zookeeper_client::{Acls, CreateMode};

/// Registered hosts: `BENCH_HOSTS`, default 1,000.
fn hosts() -> usize {
    std::env::var("BENCH_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// CPU seconds (user + system) of the child processes waited for so far.
fn children_cpu() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// Runs the binary `runs` times; returns (best, median) wall seconds and the last stdout size,
/// and prints the median CPU time of a run (wall time on a loaded machine waits for the CPU).
fn time(args: &[&str], runs: usize, ok: &[i32]) -> (f64, f64, usize) {
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut size = 0;
    for _ in 0..runs {
        let before = children_cpu();
        let t = Instant::now();
        let out = Command::new(support::bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        times.push(t.elapsed().as_secs_f64());
        let code = out.status.code().unwrap_or(-1);
        assert!(
            ok.contains(&code),
            "{args:?}: exit {code}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        size = out.stdout.len();
        cpu.push(children_cpu() - before);
    }
    cpu.sort_by(f64::total_cmp);
    println!(
        "  ({} {}: CPU user+system {:.3} s median)",
        args[0],
        if args.contains(&"--json") {
            "--json"
        } else {
            "(text)"
        },
        cpu[cpu.len() / 2]
    );
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2], size)
}

/// Peak resident memory (KiB) of the largest child process waited for so far.
fn children_peak_kib() -> i64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    usage.max_rss()
}

fn main() {
    let customers = fleet::customers();
    let host_count = hosts();
    fleet::runtime().block_on(async {
        let conn = support::chroot("bench-plan").await;
        let client = support::connect(&conn).await;
        let t = Instant::now();
        let mut whole = Node::default();
        for (_, text) in fleet::fleet_files(customers, 100) {
            let tree = parse(&text).unwrap();
            import_tree(&client, &tree, "/", Trim::No, false).await.unwrap();
            whole.children.extend(tree.children);
        }
        let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let mut hosts_props = serde_json::Map::new();
        hosts_props.insert("version".into(), json!("r1"));
        hosts_props.insert(VERSION_SET.into(), version_set(&json!("r1")));
        client
            .create("/hosts", &serde_json::to_vec(&hosts_props).unwrap(), &open)
            .await
            .unwrap();
        // Every host registered with the inventory of a host converged on the tree.
        let index = TargetIndex::build(&whole);
        let mut creates = Vec::new();
        for i in 0..host_count {
            let id = format!("host-{i}");
            let host = Host {
                id: id.clone(),
                name: format!("{id}.example.com"),
                role: None,
            };
            let found = discover_in(&whole, &index.deploy_nodes(&host), &host).unwrap();
            let installed = converged(&found);
            let inv = Inventory::from_installed(&installed, &installed.versions, &json!("r1"), 0.0);
            let node = json!({"name": host.name, "version": "r1", "pid": 1,
                              "status": "done", DEPLOYED_AT: 1.0, INVENTORY: inv.to_value()});
            creates.push((format!("/hosts/{id}"), serde_json::to_vec(&node).unwrap()));
        }
        let inventory_bytes: usize = creates.iter().map(|(_, d)| d.len()).sum();
        for chunk in creates.chunks(200) {
            let all = chunk
                .iter()
                .map(|(path, data)| client.create(path, data, &ephemeral));
            for r in futures::future::join_all(all).await {
                r.unwrap();
            }
        }
        println!(
            "setup: {} tree nodes, {host_count} registered hosts ({} KiB of host nodes, inventories included) in {:.1} s",
            whole.descendants(),
            inventory_bytes / 1024,
            t.elapsed().as_secs_f64()
        );

        // The candidate: every customer's pkg2 and pkg5 go from 1.2 to 1.3.
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (name, text) in fleet::fleet_files(customers, 100) {
            let path = dir.path().join(&name);
            std::fs::write(&path, text.replace("version = '1.2'", "version = '1.3'")).unwrap();
            files.push(path.display().to_string());
        }
        let mut args = vec!["plan", "-z", &conn, "--json", "--files"];
        args.extend(files.iter().map(String::as_str));
        // Runs in a blocking thread: the session of this runtime keeps pinging meanwhile.
        let json_args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (best, median, size) = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = json_args.iter().map(String::as_str).collect();
            time(&refs, 5, &[10])
        })
        .await
        .unwrap();
        println!(
            "plan --json, {host_count} hosts, {} files: best {best:.3} s, median {median:.3} s ({} KiB of JSON)",
            files.len(),
            size / 1024
        );
        let text_args: Vec<String> = args
            .iter()
            .filter(|a| **a != "--json")
            .map(|s| s.to_string())
            .collect();
        let (best, median, _) = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = text_args.iter().map(String::as_str).collect();
            time(&refs, 5, &[10])
        })
        .await
        .unwrap();
        println!("plan (text): best {best:.3} s, median {median:.3} s");
        println!(
            "plan peak resident memory: {:.1} MB",
            children_peak_kib() as f64 / 1024.0
        );

        for json in [true, false] {
            let conn = conn.clone();
            let (best, median, _) = tokio::task::spawn_blocking(move || {
                let mut args = vec!["status", "-z", conn.as_str()];
                if json {
                    args.push("--json");
                }
                time(&args, 5, &[0])
            })
            .await
            .unwrap();
            println!(
                "status{}, {host_count} hosts: best {best:.3} s, median {median:.3} s",
                if json { " --json" } else { "" }
            );
        }
    });
}
