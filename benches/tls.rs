//! What TLS to ZooKeeper costs the agent: one ZooKeeper serving a plain port and a TLS port
//! (`tests/support/tls.rs`: Netty, PEM stores, certificates made by openssl), two agents
//! (`h1`, `h2`) deploying the same node, so that its node lock passes from one to the other.
//! Each round bumps the version and measures the bump → the first deploy script's start (one
//! host's pass: the wake-up, the reads, the lock) and the node-lock hand-off (the first
//! host's script end → the second host's script start). The pair runs over the plain port,
//! then over TLS with client certificates, alternated `BENCH_PASSES` times (default 3) of
//! `BENCH_ROUNDS` rounds (default 10). Run with `cargo bench --bench tls`; `ZKD_BENCH_BIN=PATH`
//! runs that binary as the agents (a release build copied aside, as for `benches/agent.rs`).

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::tls::{Pki, TlsZk};
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::Client;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn write_exe(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

struct Agent {
    child: tokio::process::Child,
    status: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// The time the agent was done at `version`, from its status file.
    fn done_at(&self, version: &str) -> Option<f64> {
        let s = std::fs::read_to_string(&self.status).unwrap_or_default();
        let f: Vec<&str> = s.split_whitespace().collect();
        (f.len() == 4 && f[2] == version && f[3] == "done").then(|| f[0].parse().unwrap())
    }
}

/// An agent for `id` whose deploy script records its start and end in `times`; `tls`: the
/// lines that put it on TLS (empty: the plain port).
fn start_agent(conn: &str, id: &str, times: &Path, tls: &str) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write_exe(
        &root.join("opt/benchpkg/bin/zookeeper-deploy"),
        &format!(
            "#!/bin/bash\n[ \"$1\" = -u ] && exit 0\n\
             echo \"start $ZKDEPLOYMENT_HOST_ID $EPOCHREALTIME\" >> {t}\n\
             m=\"$ZKDEPLOYMENT_ROOT/etc/benchpkg\"; [ -d \"$m\" ] || mkdir -p \"$m\"; p=\"${{1#/}}\"; : > \"$m/${{p//\\//,}}.$2.deployed\"\n\
             echo \"end $ZKDEPLOYMENT_HOST_ID $EPOCHREALTIME\" >> {t}\n",
            t = times.display(),
        ),
    );
    let yum = dir.path().join("yum");
    write_exe(
        &yum,
        "#!/bin/sh\necho 'Installed Packages'\necho 'benchpkg.noarch   1.0-1   @local'\n",
    );
    let cfg = dir.path().join("agent.cfg");
    std::fs::write(
        &cfg,
        format!(
            "[zkdeployment]\nhost-id = {id}\nhost-name = {id}.example.com\nrun-directory = {}\nroot = {}\nyum = {}\nzookeeper = {conn}\n{tls}",
            dir.path().join("run").display(),
            root.display(),
            yum.display()
        ),
    )
    .unwrap();
    let bin = std::env::var_os("ZKD_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(support::bin);
    let child = tokio::process::Command::new(bin)
        .args(["agent", cfg.to_str().unwrap()])
        .env("ZKDEPLOYMENT_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Agent {
        child,
        status: dir.path().join("run/status"),
        _dir: dir,
    }
}

async fn all_done(agents: &[Agent], version: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !agents.iter().all(|a| a.done_at(version).is_some()) {
        assert!(
            Instant::now() < deadline,
            "the agents never reached {version}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stop(agents: Vec<Agent>) {
    for mut a in agents {
        let pid = nix::unistd::Pid::from_raw(a.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(20), a.child.wait()).await;
    }
}

/// (bump → first script start, hand-off) in ms for the round that began at `at`.
fn measure(times: &Path, at: f64) -> (f64, f64) {
    let text = std::fs::read_to_string(times).unwrap_or_default();
    let events: Vec<(String, f64)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let t: f64 = f[2].parse().ok()?;
            (t >= at).then(|| (f[0].to_string(), t))
        })
        .collect();
    let starts: Vec<f64> = events
        .iter()
        .filter(|e| e.0 == "start")
        .map(|e| e.1)
        .collect();
    let ends: Vec<f64> = events
        .iter()
        .filter(|e| e.0 == "end")
        .map(|e| e.1)
        .collect();
    assert_eq!((starts.len(), ends.len()), (2, 2), "{text}");
    ((starts[0] - at) * 1000.0, (starts[1] - ends[0]) * 1000.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let passes = env_usize("BENCH_PASSES", 3);
    let rounds = env_usize("BENCH_ROUNDS", 10);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pki = Pki::new();
        pki.ca("ca");
        let store = pki.server("ca", "server", "IP:127.0.0.1");
        pki.client("ca", "h1", "/CN=h1", 30);
        pki.client("ca", "h2", "/CN=h2", 30);
        let zk = TlsZk::start(&store, &pki.path("ca.pem"));
        let client: Client = support::connect(&zk.plain_conn()).await;
        let open = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        client.create("/hosts", br#"{"version": "v0"}"#, &open).await.unwrap();
        let tree = "/bench\n  /a : benchpkg\n    version = '1.0'\n    /deploy\n      /h1\n      /h2\n";
        import_tree(&client, &parse(tree).unwrap(), "/", Trim::Yes, false)
            .await
            .unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let times = scratch.path().join("times");
        let mut results: Vec<(&str, Vec<f64>, Vec<f64>)> =
            vec![("plain", vec![], vec![]), ("TLS", vec![], vec![])];
        let mut v = 0;
        for _ in 0..passes {
            for (label, bumps, handoffs) in results.iter_mut() {
                let conn = match *label {
                    "plain" => zk.plain_conn(),
                    _ => zk.tls_conn(),
                };
                let lines = |id: &str| match *label {
                    "plain" => String::new(),
                    _ => format!(
                        "zookeeper-tls-ca = {}\nzookeeper-tls-cert = {}\nzookeeper-tls-key = {}\nzookeeper-auth = x509\n",
                        pki.path("ca.pem").display(),
                        pki.path(&format!("{id}.crt")).display(),
                        pki.path(&format!("{id}.key")).display()
                    ),
                };
                let agents = vec![
                    start_agent(&conn, "h1", &times, &lines("h1")),
                    start_agent(&conn, "h2", &times, &lines("h2")),
                ];
                all_done(&agents, &format!("v{v}")).await;
                for _ in 0..rounds {
                    v += 1;
                    let version = format!("v{v}");
                    let data = format!(r#"{{"version": "{version}"}}"#);
                    let at = zkdeployment::files::now();
                    client.set_data("/hosts", data.as_bytes(), None).await.unwrap();
                    all_done(&agents, &version).await;
                    let (bump, handoff) = measure(&times, at);
                    bumps.push(bump);
                    handoffs.push(handoff);
                }
                stop(agents).await;
            }
        }
        println!("{passes} passes x {rounds} rounds per transport, 2 agents, one node:");
        for (label, bumps, handoffs) in results.iter_mut() {
            println!(
                "  {label:5}: bump -> first deploy script median {:.1} ms; node-lock hand-off median {:.1} ms",
                median(bumps),
                median(handoffs)
            );
        }
    });
}
