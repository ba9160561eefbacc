//! A generated fleet tree for the benchmarks: customers with a config node and applications,
//! each deployed to a few hosts; split over several `.zk` files like a real repository.
#![allow(dead_code)]

/// Hosts the generated apps deploy to.
pub const HOSTS: usize = 200;
/// The host the agent benchmark plays (it gets 10 deployments, whatever the tree size).
pub const BENCH_HOST: &str = "bench-host";

/// Customers to generate: `BENCH_CUSTOMERS`, default 1,000 (about 50,000 nodes).
pub fn customers() -> usize {
    std::env::var("BENCH_CUSTOMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// The single-threaded runtime the agent itself uses.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Text of the fleet: `(file name, text)` pairs, `per_file` customers per file.
/// Each customer is 50 nodes, so 1,000 customers are about 50,000 nodes.
pub fn fleet_files(customers: usize, per_file: usize) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for start in (0..customers).step_by(per_file.max(1)) {
        let mut text = String::new();
        for c in start..(start + per_file).min(customers) {
            customer(&mut text, c);
        }
        files.push((format!("fleet-{:04}.zk", start / per_file.max(1)), text));
    }
    files
}

/// The whole fleet as one text.
pub fn fleet_text(customers: usize) -> String {
    fleet_files(customers, customers)
        .into_iter()
        .map(|(_, t)| t)
        .collect()
}

fn customer(out: &mut String, c: usize) {
    out.push_str(&format!(
        "/cust{c:04}\n  /config\n    db = 'db{}.example.com'\n    port = {}\n",
        c % 7,
        5000 + c % 100
    ));
    for a in 0..8 {
        out.push_str(&format!(
            "  /app{a} : pkg{a}\n    version = '1.{}'\n    threads = {}\n",
            a % 3,
            a + 1
        ));
        out.push_str("    config -> ../config\n    /deploy\n");
        for h in 0..4 {
            out.push_str(&format!("      /host-{}\n", (c * 8 + a * 4 + h) % HOSTS));
            if h == 0 {
                out.push_str("        n = 2\n");
            }
        }
    }
    // The bench host has the same 10 deployments on every tree size (100 customers or more).
    if c % 10 == 0 && c < 100 {
        out.push_str(&format!(
            "  /bench{c} : benchpkg\n    version = '1.0'\n    /deploy\n      /{BENCH_HOST}\n"
        ));
    }
}

/// The tree of the fleet benchmark's own hosts `fleet-0..hosts`: each has `per_host`
/// application nodes of its own (`/fleet/h<i>/a<k>`, package `benchpkg` 1.0), so no two
/// hosts wait on each other's node locks.
pub fn fleet_hosts_text(hosts: usize, per_host: usize) -> String {
    let mut text = String::from("/fleet\n");
    for i in 0..hosts {
        text.push_str(&format!("  /h{i}\n"));
        for k in 0..per_host {
            text.push_str(&format!(
                "    /a{k} : benchpkg\n      version = '1.0'\n      /deploy\n        /fleet-{i}\n"
            ));
        }
    }
    text
}

/// Writes a new generation of the deployment index (the syncer's code; it walks the tree).
pub async fn write_index(
    client: &zkdeployment::zk::Client,
) -> zkdeployment::sync::index::Generation {
    zkdeployment::sync::index::write_generation(client, None, None)
        .await
        .unwrap()
}

/// Sets the cluster version `version`: with `Some(generation)` as a sync does (one transaction
/// setting `/hosts` and making the generation live), with `None` as a foreign client would
/// (`/hosts` alone: agents then walk).
pub async fn bump(
    client: &zkdeployment::zk::Client,
    version: &str,
    generation: Option<&zkdeployment::sync::index::Generation>,
) {
    let hosts = serde_json::to_vec(&serde_json::json!({ "version": version })).unwrap();
    match generation {
        Some(g) => {
            let root = zkdeployment::sync::index::live_data(&serde_json::json!(version), g);
            let mut writer = client.new_multi_writer();
            writer.add_set_data("/hosts", &hosts, None).unwrap();
            writer
                .add_set_data("/deployment-index", &root, None)
                .unwrap();
            writer.commit().await.unwrap();
        }
        None => {
            client.set_data("/hosts", &hosts, None).await.unwrap();
        }
    }
}

/// A trivial deploy script (one process, no marker files: every bump redeploys anyway).
pub const DEPLOY_SCRIPT: &str = "#!/bin/sh\nexit 0\n";

/// A stand-in yum answering `list installed` with benchpkg 1.0.
pub const YUM: &str =
    "#!/bin/sh\necho 'Installed Packages'\necho 'benchpkg.noarch   1.0-1   @local'\n";

/// Writes an executable file (and its directories).
pub fn write_exe(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// User plus system CPU seconds of a process so far (`/proc/<pid>/stat`).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) } as f64;
    ticks / hz.max(1.0)
}

/// `zk_packets_received` from the server's `mntr`.
pub fn packets_received(port: u16) -> u64 {
    let mntr = crate::support::four_letter(port, "mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
