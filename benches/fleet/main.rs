//! Fleet benchmark: N real `zkdeployment agent` processes (`FLEET_HOSTS`, default 200) against
//! one ZooKeeper holding the generated fleet tree (about 50,000 nodes; `BENCH_CUSTOMERS`),
//! each host with a handful of deployments of its own and a trivial deploy script. A version
//! bump → every host `done`, twice: made live with the deployment index (as a sync does), and
//! as a foreign `/hosts` write (every agent then walks the tree). Prints per bump the time,
//! ZooKeeper requests received (`mntr` `zk_packets_received` delta; pings of N idle sessions
//! included) and server CPU (`/proc/<pid>/stat`), per host, and the agents' own discovery
//! reads from `last-pass.json`. Run with `cargo bench --bench fleet`.

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "mod.rs"]
mod fleet;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};

/// Deployments per fleet host.
const PER_HOST: usize = 3;

fn hosts() -> usize {
    std::env::var("FLEET_HOSTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

/// An agent process; killed when dropped (and by the kernel if the bench dies first).
struct Agent {
    run: PathBuf,
    child: std::process::Child,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_of(agent: &Agent) -> String {
    std::fs::read_to_string(agent.run.join("status")).unwrap_or_default()
}

async fn wait_all_done(agents: &[Agent], version: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let pending = agents
            .iter()
            .filter(|a| {
                let s = status_of(a);
                !(s.split_whitespace().nth(2) == Some(version) && s.ends_with(" done"))
            })
            .count();
        if pending == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{pending} agents never reached {version} done (e.g. {:?})",
            agents.iter().map(status_of).find(|s| !s.ends_with(" done"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn discovery(agents: &[Agent]) -> (f64, usize) {
    let mut reads = 0u64;
    let mut indexed = 0;
    for a in agents {
        let text = std::fs::read_to_string(a.run.join("last-pass.json")).unwrap_or_default();
        let report: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        reads += report["discovery"]["reads"].as_u64().unwrap_or(0);
        if report["discovery"]["source"] == "index" {
            indexed += 1;
        }
    }
    (reads as f64 / agents.len() as f64, indexed)
}

fn main() {
    let n = hosts();
    let customers = fleet::customers();
    let server = support::ZkServer::start();
    let (port, pid) = (server.port, server.pid().expect("the server runs"));
    let conn = server.connect_string();
    fleet::runtime().block_on(async {
        let client = support::connect(&conn).await;
        let t = Instant::now();
        let mut nodes = 0;
        let mut texts: Vec<String> = fleet::fleet_files(customers, 100)
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        texts.push(fleet::fleet_hosts_text(n, PER_HOST));
        for text in texts {
            let tree = parse(&text).unwrap();
            nodes += tree.descendants();
            import_tree(&client, &tree, "/", Trim::No, false).await.unwrap();
        }
        let open = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.create("/hosts", b"{}", &open).await.unwrap();
        let g = fleet::write_index(&client).await;
        fleet::bump(&client, "v1", Some(&g)).await;
        println!(
            "setup: {nodes} nodes imported, index written, in {:.1} s",
            t.elapsed().as_secs_f64()
        );

        let dir = tempfile::tempdir().unwrap();
        let yum = dir.path().join("yum");
        fleet::write_exe(&yum, fleet::YUM);
        let mut agents = Vec::new();
        for i in 0..n {
            let home = dir.path().join(format!("host{i}"));
            let root = home.join("root");
            fleet::write_exe(
                &root.join("opt/benchpkg/bin/zookeeper-deploy"),
                fleet::DEPLOY_SCRIPT,
            );
            let run = home.join("run");
            let cfg = home.join("agent.cfg");
            std::fs::write(
                &cfg,
                format!(
                    "[zkdeployment]\nhost-id = fleet-{i}\nhost-name = fleet-{i}.example.com\nrun-directory = {}\nroot = {}\nyum = {}\nzookeeper = {conn}\n",
                    run.display(),
                    root.display(),
                    yum.display()
                ),
            )
            .unwrap();
            let mut cmd = std::process::Command::new(support::bin());
            cmd.args(["agent", cfg.to_str().unwrap()])
                .env("ZKDEPLOYMENT_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let child = support::spawn_with_pdeathsig(cmd).unwrap();
            agents.push(Agent { run, child });
        }
        let t = Instant::now();
        wait_all_done(&agents, "v1", Duration::from_secs(1200)).await;
        println!(
            "{n} agents started and converged on v1 in {:.1} s (load average {})",
            t.elapsed().as_secs_f64(),
            std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        // A fresh session: starting a thousand processes keeps this thread busy for longer
        // than a session timeout, and the first session may have expired meanwhile.
        let client = support::connect(&conn).await;

        println!(
            "| bump | time to all done | ZooKeeper requests / host | server CPU ms / host | discovery reads / host (agents) | answered by index |"
        );
        println!("|---|---|---|---|---|---|");
        for (label, with_index) in [("index", true), ("walk", false), ("index again", true)] {
            let version = format!("v-{}", label.replace(' ', "-"));
            // The generation is written before the clock starts: in a sync it is part of the
            // syncer's work (one walk), not of the fleet's.
            let g = if with_index {
                Some(fleet::write_index(&client).await)
            } else {
                None
            };
            let (p0, c0) = (fleet::packets_received(port), fleet::cpu_seconds(pid));
            let t = Instant::now();
            fleet::bump(&client, &version, g.as_ref()).await;
            wait_all_done(&agents, &version, Duration::from_secs(1200)).await;
            let secs = t.elapsed().as_secs_f64();
            let (p1, c1) = (fleet::packets_received(port), fleet::cpu_seconds(pid));
            let (reads, indexed) = discovery(&agents);
            println!(
                "| {label} | {secs:.2} s | {:.0} | {:.1} | {reads:.0} | {indexed}/{n} |",
                (p1 - p0) as f64 / n as f64,
                (c1 - c0) * 1000.0 / n as f64,
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        println!(
            "load average after: {}",
            std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
        );
        drop(agents);
    });
    drop(server);
}
