//! Rollout benchmark (issue 13): long-running agent processes on one ZooKeeper, every package
//! already installed (a stand-in `yum` answers `list installed` at once), deploy scripts that
//! log their start and end times (bash's `$EPOCHREALTIME`, no extra process) and sleep. A
//! version bump starts each scenario, written as `sync` writes it (`/hosts` with the
//! deployment index's root, so agents read the index); the numbers are printed, never
//! asserted.
//!
//! - `10 × 5`: 10 agents, 5 application nodes deployed to all of them, scripts sleeping
//!   0.2 s: bump → every host done against the 2.0 s lower bound, and the hand-off between
//!   hosts (one host's script end → the next host's script start on the same node, the next
//!   host waiting for it; a node let go while every host still needing it was running
//!   another node's script is counted apart).
//! - `100 × 1`: 100 agents, one node, scripts sleeping 0.5 s, for `max-parallel` 1, 10 and
//!   25 %: bump → every host done against hosts / K × 0.5 s.
//! - the failure budget (issue 37): 100 agents, one node with `max-parallel = '10%'` and
//!   `max-failures = '5%'`, a rollout with no failure, then one where 3 hosts' scripts fail
//!   (quarantined within the budget): the other 97 done against the rollout with no failure.
//! - one host, 3 nodes, trivial scripts: bump → first script, bump → `done`, and the time
//!   between one script's end and the next one's start; then, measured from the bench in
//!   the same run, the floor no agent can go below on this machine at that moment: two
//!   writes' round trips and the deploy script's own start and end.
//!
//! Run with `cargo bench --bench rollout` (`BENCH_ROLLOUT=small` runs only the one-host and
//! 10 × 5 parts, `BENCH_ROLLOUT=hundred` only the 100 × 1 rounds, `BENCH_ROLLOUT=budget` only
//! the budget rounds, `BENCH_REPEAT=N` pairs of them, 3 unless set). `BENCH_SCRIPT_SECS=5`
//! makes the scripts of the 100-agent rounds (100 × 1 and budget) sleep 5 s instead of 0.5 s
//! (their fleet's first rollout, not measured, stays at 0.5 s); each round also prints the
//! machine's load average. `BENCH_KEEP=DIR` copies each 100-agent round's
//! script times (`times-K-vN`, after a line `bump <time>`), each 10 × 5 round's
//! (`times-10x5-vN`) and each one-host bump's (`times-one-vN`) into DIR, for a closer look;
//! `BENCH_K=25` (a list) runs only those values of K, the fleet starting at the first of
//! them (no 50 s first rollout at K = 1 unless K = 1 is asked for; so its first round is a
//! repeat, `max_leases` unchanged, unlike the full run's 25 % round, which follows K = 10
//! and rewrites it); `BENCH_REPEAT=N` runs the 25 % round N times (K unchanged after the
//! first). Each 100-agent round also prints the server's requests and CPU and the agents'
//! CPU, read 0.3 s after the round's end.
//! `ZKD_BENCH_BIN=PATH` runs that binary as the agents instead of the one cargo built (a
//! copy: to compare two builds under the same conditions).
//! `BENCH_LOG=FILTER` sets the agents' `ZKDEPLOYMENT_LOG` (`info` otherwise; with
//! `info,zookeeper_client=debug` each request sent is logged), and `BENCH_LOGDIR=DIR` keeps
//! each agent's log in DIR (`<id>.log`, appended to) after the bench: to count a round's requests by kind.
//! `BENCH_YUM=PATH` copies that program in as every agent's stand-in `yum` instead of the
//! shell script (it must print the script's two lines): to see what the stand-in's own
//! process costs the 100-agent rounds.

#[allow(dead_code)] // a bench uses a few of the test helpers
#[path = "../tests/support/mod.rs"]
mod support;

use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::Client;

fn write_exe(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// One agent process and its files.
struct Agent {
    dir: tempfile::TempDir,
    /// Where its log goes.
    log: PathBuf,
    child: tokio::process::Child,
}

impl Agent {
    fn status(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("run/status")).unwrap_or_default()
    }

    /// The time the status file says `version` was done, if it does.
    fn done_at(&self, version: &str) -> Option<f64> {
        let s = self.status();
        let f: Vec<&str> = s.trim_end().splitn(4, ' ').collect();
        (f.len() == 4 && f[2] == version && f[3] == "done").then(|| f[0].parse().unwrap())
    }
}

/// The file beside `times` that holds the seconds every deploy script of the fleet sleeps
/// (read by the script itself, a shell builtin, so that a round can change it).
fn sleep_file(times: &Path) -> PathBuf {
    times.with_file_name("sleep")
}

/// Sets the seconds the fleet's deploy scripts sleep from their next start on.
fn set_sleep(times: &Path, sleep: f64) {
    std::fs::write(sleep_file(times), format!("{sleep}\n")).unwrap();
}

/// The file whose presence in an agent's root makes its deploy script fail (exit 1) after
/// its sleep, writing no end time.
const FAIL_MARK: &str = "fail";

/// Starts an agent `id` whose deploy script sleeps the seconds in [`sleep_file`] (none for 0)
/// and logs to `times`, and fails while its root holds [`FAIL_MARK`].
fn start_agent(conn: &str, id: &str, times: &Path) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write_exe(
        &root.join("opt/benchpkg/bin/zookeeper-deploy"),
        &format!(
            "#!/bin/bash\n[ \"$1\" = -u ] && exit 0\n\
             echo \"start $1 $ZKDEPLOYMENT_HOST_ID $EPOCHREALTIME\" >> {t}\n\
             read -r s < {s}\n\
             [ \"$s\" = 0 ] || sleep \"$s\"\n\
             [ -e \"$ZKDEPLOYMENT_ROOT/{FAIL_MARK}\" ] && exit 1\n\
             m=\"$ZKDEPLOYMENT_ROOT/etc/benchpkg\"; [ -d \"$m\" ] || mkdir -p \"$m\"; p=\"${{1#/}}\"; : > \"$m/${{p//\\//,}}.$2.deployed\"\n\
             echo \"end $1 $ZKDEPLOYMENT_HOST_ID $EPOCHREALTIME\" >> {t}\n",
            t = times.display(),
            s = sleep_file(times).display(),
        ),
    );
    let yum = dir.path().join("yum");
    write_exe(
        &yum,
        "#!/bin/sh\necho 'Installed Packages'\necho 'benchpkg.noarch   1.0-1   @local'\n",
    );
    if let Some(program) = std::env::var_os("BENCH_YUM") {
        std::fs::copy(program, &yum).unwrap();
    }
    let cfg = dir.path().join("agent.cfg");
    std::fs::write(
        &cfg,
        format!(
            "[zkdeployment]\nhost-id = {id}\nhost-name = {id}.example.com\nrun-directory = {}\nroot = {}\nyum = {}\nzookeeper = {conn}\n",
            dir.path().join("run").display(),
            root.display(),
            yum.display()
        ),
    )
    .unwrap();
    // `BENCH_LOGDIR` keeps every agent's log there (`<id>.log`, appended to: the scenarios'
    // fleets share ids), past the bench's end.
    let log_path = match std::env::var_os("BENCH_LOGDIR") {
        Some(kept) => Path::new(&kept).join(format!("{id}.log")),
        None => dir.path().join("agent.log"),
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .unwrap();
    let bin = std::env::var_os("ZKD_BENCH_BIN").map_or_else(support::bin, PathBuf::from);
    // The environment a systemd service starts with (the unit in `systemd/` sets none; the
    // system's locale, here the bench's own), not cargo's: cargo adds `LD_LIBRARY_PATH` with
    // ten build directories, which every deploy script's bash and `sleep` would search for
    // their libraries (0.3 ms per script start here).
    let mut command = tokio::process::Command::new(bin);
    command.env_clear();
    for locale in ["LANG", "LC_ALL"] {
        if let Some(value) = std::env::var_os(locale) {
            command.env(locale, value);
        }
    }
    let child = command
        .args(["agent", cfg.to_str().unwrap()])
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
        .env(
            "ZKDEPLOYMENT_LOG",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    Agent {
        dir,
        log: log_path,
        child,
    }
}

/// The tree: nodes `/bench/a1..aN` (package benchpkg 1.0) deployed to every host.
fn tree(nodes: usize, hosts: &[String], props: &str) -> String {
    let mut text = String::from("/bench\n");
    for i in 1..=nodes {
        text.push_str(&format!("  /a{i} : benchpkg\n    version = '1.0'\n"));
        if !props.is_empty() {
            text.push_str(&format!("    {props}\n"));
        }
        text.push_str("    /deploy\n");
        for h in hosts {
            text.push_str(&format!("      /{h}\n"));
        }
    }
    text
}

async fn import(client: &Client, text: &str) {
    import_tree(client, &parse(text).unwrap(), "/", Trim::Yes, false)
        .await
        .unwrap();
}

/// Sends the server 12,000 requests of the kinds an agent sends (reads, lists, version-guarded
/// writes in transactions, ephemeral sequential creates and deletes), 20 at a time.
async fn warm_server(client: &Client) {
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let seq = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    client.create("/warm", b"{}", &open).await.unwrap();
    for _ in 0..100 {
        let made =
            futures::future::join_all((0..20).map(|_| client.create("/warm/c-", b"x", &seq))).await;
        let mut reads = Vec::new();
        for _ in 0..20 {
            reads.push(client.get_data("/warm"));
        }
        futures::future::join_all(reads).await;
        futures::future::join_all((0..20).map(|_| client.list_children("/warm"))).await;
        for _ in 0..20 {
            let (_, stat) = client.get_data("/warm").await.unwrap();
            let mut writer = client.new_multi_writer();
            writer
                .add_set_data("/warm", b"{}", Some(stat.version))
                .unwrap();
            writer.commit().await.unwrap();
        }
        let deletes = made.into_iter().map(|made| {
            let (_, sequence) = made.unwrap();
            let path = format!("/warm/c-{sequence}");
            async move { client.delete(&path, None).await.unwrap() }
        });
        futures::future::join_all(deletes).await;
    }
}

/// Sets the cluster version as `sync` does: `/hosts` and the deployment index's root in one
/// transaction, the index's new generation written first (not timed), so that agents read
/// the index rather than walk the tree. Gives the time of the transaction.
async fn bump(client: &Client, version: &str) -> f64 {
    use zkdeployment::sync::index::{live_data, write_generation};
    let generation = write_generation(client, None, None).await.unwrap();
    let index = live_data(&json!(version), &generation);
    let hosts = json!({ "version": version }).to_string();
    let mut writer = client.new_multi_writer();
    writer
        .add_set_data("/hosts", hosts.as_bytes(), None)
        .unwrap();
    writer
        .add_set_data(zkdeployment::zk::index::INDEX, &index, None)
        .unwrap();
    let at = zkdeployment::files::now();
    writer.commit().await.unwrap();
    at
}

/// How long [`all_done`] waits between two looks at the status files of the agents not yet
/// done: 10 ms, and 0.5 ms per file to read when there are more than 20, so that the bench
/// reads at most 2,000 files a second. The time an agent was done comes from its status
/// file, not from when the bench saw it, so looking less often loses nothing; reading all 100
/// files every 10 ms took 3–6 % of the machine's CPU from the agents and the server in the
/// 100-agent rounds.
fn poll_interval(files: usize) -> Duration {
    Duration::from_micros(500 * files as u64).max(Duration::from_millis(10))
}

/// Waits until every agent is done at `version`; returns the last done time.
async fn all_done<A: std::borrow::Borrow<Agent>>(
    agents: &[A],
    version: &str,
    limit: Duration,
) -> f64 {
    let deadline = Instant::now() + limit;
    let agents: Vec<&Agent> = agents.iter().map(Borrow::borrow).collect();
    // An agent done at `version` stays so until the next bump: read once.
    let mut done: Vec<Option<f64>> = vec![None; agents.len()];
    loop {
        for (a, d) in agents.iter().zip(done.iter_mut()) {
            if d.is_none() {
                *d = a.done_at(version);
            }
        }
        if done.iter().all(Option::is_some) {
            return done.into_iter().flatten().fold(0.0, f64::max);
        }
        if Instant::now() >= deadline {
            let late = agents.iter().zip(&done).filter(|(_, d)| d.is_none());
            for (a, _) in late {
                let log = std::fs::read_to_string(&a.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                eprintln!(
                    "status: {}\nlog tail (newest first):\n{}",
                    a.status(),
                    tail.join("\n")
                );
            }
            panic!("not every agent reached {version}");
        }
        let left = done.iter().filter(|d| d.is_none()).count();
        tokio::time::sleep(poll_interval(left)).await;
    }
}

/// One script run: node, host, start, end.
#[derive(Debug, Clone)]
struct Run {
    node: String,
    host: String,
    start: f64,
    end: f64,
}

fn runs(times: &Path, after: f64) -> Vec<Run> {
    let text = std::fs::read_to_string(times).unwrap_or_default();
    let mut open: Vec<(String, String, f64)> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let t: f64 = f[3].parse().unwrap();
        if t < after {
            continue;
        }
        match f[0] {
            "start" => open.push((f[1].into(), f[2].into(), t)),
            _ => {
                if let Some(i) = open.iter().position(|(n, h, _)| n == f[1] && h == f[2]) {
                    let (node, host, start) = open.remove(i);
                    out.push(Run {
                        node,
                        host,
                        start,
                        end: t,
                    });
                }
            }
        }
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// Gaps (ms) between consecutive runs grouped by `key`, each run after the previous ended.
fn gaps(runs: &[Run], key: impl Fn(&Run) -> &str) -> Vec<f64> {
    let mut by: std::collections::BTreeMap<&str, Vec<&Run>> = Default::default();
    for r in runs {
        by.entry(key(r)).or_default().push(r);
    }
    let mut out = Vec::new();
    for list in by.values() {
        for w in list.windows(2) {
            out.push((w[1].start - w[0].end) * 1000.0);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

fn summary(ms: &[f64]) -> String {
    if ms.is_empty() {
        return "n/a".into();
    }
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    format!(
        "median {:.1} ms, mean {mean:.1} ms, max {:.1} ms ({} gaps)",
        ms[ms.len() / 2],
        ms[ms.len() - 1],
        ms.len()
    )
}

/// `n` agents on a fresh chroot whose tree (`nodes` nodes, `props`) is at version `v1`.
async fn fleet(
    label: &str,
    n: usize,
    sleep: f64,
    nodes: usize,
    props: &str,
) -> (Client, Vec<Agent>, Vec<String>, PathBuf, tempfile::TempDir) {
    let conn = support::chroot(label).await;
    let client = support::connect(&conn).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client
        .create("/hosts", br#"{"version": "v1"}"#, &open)
        .await
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let times = scratch.path().join("times");
    set_sleep(&times, sleep);
    let ids: Vec<String> = (1..=n).map(|i| format!("h{i:03}")).collect();
    import(&client, &tree(nodes, &ids, props)).await;
    let agents = ids
        .iter()
        .map(|id| start_agent(&conn, id, &times))
        .collect();
    (client, agents, ids, times, scratch)
}

/// 10 agents × 5 nodes, scripts sleeping 0.2 s.
async fn ten_by_five() {
    let (client, agents, _ids, times, _keep) = fleet("bench-rollout-10x5", 10, 0.2, 5, "").await;
    all_done(&agents, "v1", Duration::from_secs(120)).await;
    let mut totals = Vec::new();
    let mut handoffs = Vec::new();
    let mut taken_late = Vec::new();
    for round in 2..=4 {
        let v = format!("v{round}");
        let before = server_load();
        let at = bump(&client, &v).await;
        let done = all_done(&agents, &v, Duration::from_secs(120)).await;
        let after = server_load();
        totals.push(done - at);
        if let Some(dir) = std::env::var_os("BENCH_KEEP") {
            let text = std::fs::read_to_string(&times).unwrap_or_default();
            let kept = format!("bump {at}\n{text}");
            std::fs::write(Path::new(&dir).join(format!("times-10x5-{v}")), kept).unwrap();
        }
        let rs = runs(&times, at);
        assert_eq!(rs.len(), 50, "{rs:?}");
        let (waited, busy) = handoff_gaps(&rs);
        handoffs.extend(waited);
        taken_late.extend(busy);
        // Where the time beyond the bound went: the busiest node's idle time between its
        // first start and last end, the start, the end.
        let first = rs.iter().map(|r| r.start).fold(f64::MAX, f64::min);
        let last = rs.iter().map(|r| r.end).fold(0.0, f64::max);
        let mut idle = Vec::new();
        for i in 1..=5 {
            let node = format!("/bench/a{i}");
            let mine: Vec<&Run> = rs.iter().filter(|r| r.node == node).collect();
            let start = mine.iter().map(|r| r.start).fold(f64::MAX, f64::min);
            let end = mine.iter().map(|r| r.end).fold(0.0, f64::max);
            let busy: f64 = mine.iter().map(|r| r.end - r.start).sum();
            idle.push(format!("{:.0}", (end - start - busy) * 1000.0));
        }
        eprintln!(
            "    (bump -> first script {:.0} ms; idle ms inside each node's span: {}; last end -> all done {:.0} ms)",
            (first - at) * 1000.0,
            idle.join(" "),
            (done - last) * 1000.0
        );
        print_server_load("", before, after, 10);
    }
    handoffs.sort_by(f64::total_cmp);
    taken_late.sort_by(f64::total_cmp);
    totals.sort_by(f64::total_cmp);
    let t = totals[totals.len() / 2];
    println!(
        "10 agents x 5 nodes, 0.2 s scripts: bump -> all done {t:.2} s (median of {}), {:.2}x the 2.0 s bound",
        totals.len(),
        t / 2.0
    );
    println!(
        "  lock hand-off between hosts (the next host waiting): {}",
        summary(&handoffs)
    );
    println!(
        "  a node let go while every host still needing it ran another node's script: {} times; that host's script end -> its start on the node: {}",
        taken_late.len(),
        summary(&taken_late)
    );
}

/// Each node's gaps (ms) from one host's script end to the next host's script start, split
/// by what the next host was doing at the release: waiting (a hand-off: no script of its
/// own running, so it waited for this node) or running another node's script (no host was
/// free to take the node; the gap is then measured from that host's own script end, the
/// time between two scripts on one host).
fn handoff_gaps(runs: &[Run]) -> (Vec<f64>, Vec<f64>) {
    let (mut waited, mut busy) = (Vec::new(), Vec::new());
    let mut by: std::collections::BTreeMap<&str, Vec<&Run>> = Default::default();
    for r in runs {
        by.entry(r.node.as_str()).or_default().push(r);
    }
    for list in by.values() {
        for w in list.windows(2) {
            let (released, next) = (w[0].end, w[1]);
            // The next host's own script before this one, if it ended after the release.
            let own_end = runs
                .iter()
                .filter(|r| r.host == next.host && r.start < next.start)
                .map(|r| r.end)
                .fold(f64::MIN, f64::max);
            if own_end > released {
                busy.push((next.start - own_end) * 1000.0);
            } else {
                waited.push((next.start - released) * 1000.0);
            }
        }
    }
    (waited, busy)
}

/// Prints the server's side of a round, from [`server_load`] before and after it, when both
/// are known.
fn print_server_load(
    label: &str,
    before: (Option<i64>, Option<f64>),
    after: (Option<i64>, Option<f64>),
    hosts: u32,
) {
    if let ((Some(p0), Some(c0)), (Some(p1), Some(c1))) = (before, after) {
        eprintln!(
            "    ({label}the server received {} requests, {:.0} per host, and used {:.0} ms of CPU)",
            p1 - p0,
            (p1 - p0) as f64 / f64::from(hosts),
            c1 - c0
        );
    }
}

/// The server's side: requests it received (`mntr` `zk_packets_received`) and its CPU time
/// in ms (`/proc`), when the bench started the server (`None` parts otherwise).
fn server_load() -> (Option<i64>, Option<f64>) {
    let address = support::zk_address();
    let port: Option<u16> = address.rsplit(':').next().and_then(|p| p.parse().ok());
    let packets = port.map(support::packets_received);
    let cpu = support::shared_server_pid().and_then(process_cpu);
    (packets, cpu)
}

/// A process's own CPU time in ms (`/proc/PID/stat`).
fn process_cpu(pid: u32) -> Option<f64> {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat
        .rsplit(')')
        .next()?
        .split_whitespace()
        .collect::<Vec<_>>();
    let field = |i: usize| after.get(i).and_then(|v| v.parse::<f64>().ok());
    Some((field(11)? + field(12)?) * 1000.0 / ticks)
}

/// How long a round's loads are read after its end (and before the next bump).
const SETTLE: Duration = Duration::from_millis(300);

/// The agents' CPU time in ms: their own (their commands' are not counted: a child's time
/// reaches its parent's count only once reaped), summed over their threads' scheduler
/// statistics (`/proc/PID/task/*/schedstat`, in ns). `/proc/PID/stat` counts whole clock
/// ticks, charged to whoever runs at each: for 100 agents running 2–3 ms each in a round,
/// that sum varied by ±100 ms from one round to the next.
/// `None` where the kernel keeps no scheduler statistics. (A thread that ends between two
/// readings takes its time out of the sum: the agent's threads live as long as it does.)
fn agents_cpu(agents: &[Agent]) -> Option<f64> {
    let threads_ns = |pid: u32| -> Option<u64> {
        let mut sum = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            sum += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(sum)
    };
    let mut total = 0;
    for pid in agents.iter().filter_map(|a| a.child.id()) {
        total += threads_ns(pid)?;
    }
    Some(total as f64 / 1e6)
}

/// Prints the agents' side of a round, from [`agents_cpu`] before and after it, when known.
fn print_agents_load(label: &str, before: Option<f64>, after: Option<f64>) {
    if let (Some(before), Some(after)) = (before, after) {
        eprintln!(
            "    ({label}the agents used {:.0} ms of CPU)",
            after - before
        );
    }
}

/// The seconds the deploy scripts of the 100-agent rounds sleep: `BENCH_SCRIPT_SECS`, 0.5
/// unless set.
fn script_secs() -> f64 {
    match std::env::var("BENCH_SCRIPT_SECS") {
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(secs) if secs >= 0.0 && secs.is_finite() => secs,
            _ => panic!("BENCH_SCRIPT_SECS={text}: not a number of seconds"),
        },
        Err(_) => 0.5,
    }
}

/// How long a round whose lower bound is `bound` seconds may take before the bench gives up:
/// twice the bound and a minute, at least 300 s.
fn round_limit(bound: f64) -> Duration {
    Duration::from_secs_f64((2.0 * bound + 60.0).max(300.0))
}

/// 100 agents × 1 node, scripts sleeping 0.5 s (`BENCH_SCRIPT_SECS`), for each K.
async fn hundred_by_one() {
    // `BENCH_REPEAT=N` runs the 25 % round N times (the later ones with K unchanged).
    let repeat: usize = std::env::var("BENCH_REPEAT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut rounds = vec![("", 1usize), ("max-parallel = 10", 10)];
    rounds.extend(std::iter::repeat_n(
        ("max-parallel = '25%'", 25),
        repeat.max(1),
    ));
    // `BENCH_K=10,25` runs only those rounds.
    let wanted = |k: usize| {
        std::env::var("BENCH_K").map_or(true, |only| {
            only.split(',').any(|s| s.trim() == k.to_string())
        })
    };
    // The fleet starts at the first round's K (its semaphore made, as in the full run's
    // rounds after the first), so that a run without K = 1 needs no 50 s first rollout.
    let first = rounds
        .iter()
        .find(|(_, k)| wanted(*k))
        .map_or("", |(prop, _)| *prop);
    let (client, agents, ids, times, _keep) = fleet("bench-rollout-100", 100, 0.5, 1, first).await;
    all_done(&agents, "v1", Duration::from_secs(300)).await;
    // The first rollout (not measured) is at 0.5 s scripts; the rounds at `BENCH_SCRIPT_SECS`.
    let secs = script_secs();
    set_sleep(&times, secs);
    println!("100 agents x 1 node, {secs} s scripts:");
    println!("  | max-parallel | K | rollout | bound | ratio | hand-off median |");
    println!("  |---|---|---|---|---|---|");
    for (round, (prop, k)) in rounds.into_iter().enumerate() {
        if !wanted(k) {
            continue;
        }
        let v = format!("v{}", round + 2);
        import(&client, &tree(1, &ids, prop)).await;
        // The loads are read once the agents have settled: a pass goes on a little after
        // its `done` (the report's durable write, the metrics), and that belongs to its round.
        tokio::time::sleep(SETTLE).await;
        let before = server_load();
        let agents_before = agents_cpu(&agents);
        let at = bump(&client, &v).await;
        let bound = 100.0 / k as f64 * secs;
        let done = all_done(&agents, &v, round_limit(bound)).await;
        tokio::time::sleep(SETTLE).await;
        let after = server_load();
        let agents_after = agents_cpu(&agents);
        let total = done - at;
        let rs = runs(&times, at);
        if let Some(dir) = std::env::var_os("BENCH_KEEP") {
            let text = std::fs::read_to_string(&times).unwrap_or_default();
            let kept = format!("bump {at}\n{text}");
            std::fs::write(Path::new(&dir).join(format!("times-{k}-{v}")), kept).unwrap();
        }
        // Hand-off: for K = 1 the gap between consecutive runs of the node.
        let handoff = if k == 1 {
            let g = gaps(&rs, |r| r.node.as_str());
            format!("{:.1} ms", g.get(g.len() / 2).copied().unwrap_or(f64::NAN))
        } else {
            "-".into()
        };
        let label = if prop.is_empty() {
            "1 (default)"
        } else {
            prop.trim_start_matches("max-parallel = ")
        };
        println!(
            "  | {label} | {k} | {total:.2} s | {bound:.1} s | {:.2}x | {handoff} |",
            total / bound
        );
        eprintln!("    (K = {k}: load average {})", load_average());
        // Where the time beyond the bound went: before the first script, between scripts
        // (the K places not all busy), after the last one.
        let first = rs.iter().map(|r| r.start).fold(f64::MAX, f64::min);
        let last = rs.iter().map(|r| r.end).fold(0.0, f64::max);
        let busy: f64 = rs.iter().map(|r| r.end - r.start).sum();
        eprintln!(
            "    (K = {k}: bump -> first script {:.0} ms; scripts kept {:.1}% of the K places busy from the first start to the last end; last end -> all done {:.0} ms)",
            (first - at) * 1000.0,
            100.0 * busy / (k as f64 * (last - first)),
            (done - last) * 1000.0
        );
        // The server's side of the round (the bump's index generation included).
        print_server_load(&format!("K = {k}: "), before, after, 100);
        print_agents_load(&format!("K = {k}: "), agents_before, agents_after);
    }
}

/// The hosts whose deploy scripts fail in the budget rounds' failing half, spread over the
/// fleet's ids.
const FAILING: [&str; 3] = ["h017", "h050", "h083"];

/// The budget rounds (issue 37): 100 agents, one node with `max-parallel = '10%'` and
/// `max-failures = '5%'` (F = 5), in pairs: a rollout with no failure, then one where the
/// scripts of the 3 hosts of [`FAILING`] fail (within the budget: each is quarantined, the
/// rollout goes on). Gives the time from the bump until the other 97 are done against the
/// whole rollout with no failure; checks that the 3 ended `error` and nothing was halted.
/// `BENCH_REPEAT=N` runs N pairs (3 unless set); `BENCH_SCRIPT_SECS` sets the scripts' sleep.
async fn budget_rollout() {
    let pairs: usize = std::env::var("BENCH_REPEAT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let props = "max-parallel = '10%'\n    max-failures = '5%'";
    let (client, agents, ids, times, _keep) =
        fleet("bench-rollout-budget", 100, 0.5, 1, props).await;
    all_done(&agents, "v1", Duration::from_secs(300)).await;
    let secs = script_secs();
    set_sleep(&times, secs);
    let limit = round_limit(100.0 / 10.0 * secs);
    let fails = |id: &String| FAILING.contains(&id.as_str());
    let pick = |want: bool| -> Vec<&Agent> {
        agents
            .iter()
            .zip(&ids)
            .filter(|(_, id)| fails(id) == want)
            .map(|(a, _)| a)
            .collect()
    };
    let (failing, others) = (pick(true), pick(false));
    println!("100 agents x 1 node, max-parallel '10%', max-failures '5%', {secs} s scripts, 3 hosts failing:");
    println!("  | pair | no failure: all 100 done | 3 failing: the other 97 done | ratio | load average |");
    println!("  |---|---|---|---|---|");
    let mut ratios = Vec::new();
    for pair in 0..pairs {
        let mut totals = [0.0; 2];
        for (half, fail) in [false, true].into_iter().enumerate() {
            let v = format!("v{}", 2 + 2 * pair + half);
            mark_failing(&failing, fail);
            tokio::time::sleep(SETTLE).await;
            let at = bump(&client, &v).await;
            let done = if fail {
                all_done(&others, &v, limit).await
            } else {
                all_done(&agents, &v, limit).await
            };
            totals[half] = done - at;
            if fail {
                for a in &failing {
                    ended_with(a, &v, "error", limit).await;
                }
            }
            let (data, _) = client.get_data("/hosts").await.unwrap();
            let hosts = zkdeployment::zk::decode(&data);
            assert_eq!(hosts.get("version"), Some(&json!(v)), "halted: {hosts:?}");
        }
        let ratio = totals[1] / totals[0];
        ratios.push(ratio);
        println!(
            "  | {} | {:.2} s | {:.2} s | {ratio:.3}x | {} |",
            pair + 1,
            totals[0],
            totals[1],
            load_average()
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "  the other 97 against no failure: median {:.3}x, max {:.3}x (bound 1.10x)",
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    );
}

/// Puts [`FAIL_MARK`] into the roots of `agents` (`fail`), or takes it out.
fn mark_failing(agents: &[&Agent], fail: bool) {
    for a in agents {
        let mark = a.dir.path().join("root").join(FAIL_MARK);
        if fail {
            std::fs::write(&mark, b"").unwrap();
        } else if mark.exists() {
            std::fs::remove_file(&mark).unwrap();
        }
    }
}

/// Waits until `agent`'s status file says it ended `version` with `text`.
async fn ended_with(agent: &Agent, version: &str, text: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let status = agent.status();
        let f: Vec<&str> = status.trim_end().splitn(4, ' ').collect();
        if f.len() == 4 && f[2] == version && f[3] == text {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "status {status:?}, not {version} {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The machine's load averages (1, 5 and 15 minutes), as `/proc/loadavg` says.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One host, 3 nodes, trivial scripts.
async fn one_host() {
    let (client, agents, _ids, times, _keep) = fleet("bench-rollout-one", 1, 0.0, 3, "").await;
    all_done(&agents, "v1", Duration::from_secs(60)).await;
    let (mut first, mut done, mut between) = (Vec::new(), Vec::new(), Vec::new());
    // A fresh JVM answers slower until its JIT has compiled the request path, and a
    // production ensemble has long done so: the server first answers requests of every kind
    // the agents send, then 20 bumps; 30 are measured (the machine's noise is of the order of a round trip).
    warm_server(&client).await;
    for round in 2..=51 {
        let v = format!("v{round}");
        let at = bump(&client, &v).await;
        let end = all_done(&agents, &v, Duration::from_secs(60)).await;
        if let Some(dir) = std::env::var_os("BENCH_KEEP") {
            let text = std::fs::read_to_string(&times).unwrap_or_default();
            let kept = format!("bump {at}\n{text}");
            std::fs::write(Path::new(&dir).join(format!("times-one-{v}")), kept).unwrap();
        }
        let rs = runs(&times, at);
        assert_eq!(rs.len(), 3, "{rs:?}");
        if round <= 21 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        first.push((rs[0].start - at) * 1000.0);
        done.push((end - at) * 1000.0);
        between.extend(gaps(&rs, |r| r.host.as_str()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for v in [&mut first, &mut done, &mut between] {
        v.sort_by(f64::total_cmp);
    }
    println!("one host, 3 nodes, trivial scripts, fast yum (30 bumps):");
    println!("  bump -> first deploy script: {}", summary(&first));
    println!("  bump -> done: {}", summary(&done));
    println!(
        "  between consecutive deploy scripts: {}",
        summary(&between)
    );
    // What no agent can go below on this machine, now: the release and the next lock, and
    // the record's write, each a write's round trip at least; the deploy script's own start
    // (spawned, to its first line) and end (its last line to its exit being seen).
    let round_trips = write_round_trips(&client).await;
    let (starts, ends) = script_start_and_end(&agents[0], &times);
    let median = |v: &[f64]| v[v.len() / 2];
    println!(
        "  this machine now, from the bench: a write's round trip {}; a deploy script's start {}; its end {}",
        summary(&round_trips),
        summary(&starts),
        summary(&ends)
    );
    println!(
        "  floor between two scripts (2 round trips + a script's start and end): {:.1} ms",
        2.0 * median(&round_trips) + median(&starts) + median(&ends)
    );
}

/// 30 version-guarded writes of a scratch node, one at a time: their round trips (ms), sorted.
async fn write_round_trips(client: &Client) -> Vec<f64> {
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create("/round-trip", b"0", &open).await.unwrap();
    let mut out = Vec::new();
    for i in 0..30 {
        let clock = Instant::now();
        client
            .set_data("/round-trip", i.to_string().as_bytes(), Some(i))
            .await
            .unwrap();
        out.push(clock.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    out
}

/// Runs `agent`'s deploy script 30 times from the bench, in the environment the agent gives
/// it (but a scratch root): from the spawn to its first line, and from its last line to its
/// exit being seen (ms), each sorted.
fn script_start_and_end(agent: &Agent, times: &Path) -> (Vec<f64>, Vec<f64>) {
    let script = agent
        .dir
        .path()
        .join("root/opt/benchpkg/bin/zookeeper-deploy");
    let scratch = tempfile::tempdir().unwrap();
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        let mut command = std::process::Command::new(&script);
        command.env_clear();
        for locale in ["LANG", "LC_ALL"] {
            if let Some(value) = std::env::var_os(locale) {
                command.env(locale, value);
            }
        }
        command
            .args(["/probe", "0"])
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
            .env("ZKDEPLOYMENT_ROOT", scratch.path())
            .env("ZKDEPLOYMENT_HOST_ID", "probe");
        let spawned = zkdeployment::files::now();
        let status = command.status().unwrap();
        let reaped = zkdeployment::files::now();
        assert!(status.success());
        let text = std::fs::read_to_string(times).unwrap();
        let at = |word: &str| -> f64 {
            let line = text
                .lines()
                .rev()
                .find(|l| l.starts_with(&format!("{word} /probe probe ")))
                .unwrap();
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        starts.push((at("start") - spawned) * 1000.0);
        ends.push((reaped - at("end")) * 1000.0);
    }
    starts.sort_by(f64::total_cmp);
    ends.sort_by(f64::total_cmp);
    (starts, ends)
}

fn main() {
    // Dirty pages left by a build just before (the bench's own, often) are written back now,
    // not amid the first rounds' measurements.
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { nix::libc::sync() };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::var("BENCH_ROLLOUT").unwrap_or_default();
    let part = |name: &str| only.is_empty() || only == name;
    rt.block_on(async {
        if part("small") {
            one_host().await;
            ten_by_five().await;
        }
        if part("hundred") {
            hundred_by_one().await;
        }
        if part("budget") {
            budget_rollout().await;
        }
    });
}
