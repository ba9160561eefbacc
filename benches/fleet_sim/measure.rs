//! What the fleet simulator measures: the servers' side (`mntr` counters, CPU and memory of
//! each JVM from `/proc`), samples taken while a scenario runs (outstanding requests, halts),
//! the scripts' journal (first script, hosts done, hand-off gaps, double deploys) and the
//! operator's commands as processes (wall time, peak memory from `wait4`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::host::host_id;
use super::support;
use super::support::ensemble::{Ensemble, SIZE};

/// One server of the ensemble: its client port and its JVM's pid.
#[derive(Debug, Clone)]
pub struct Server {
    port: u16,
    pid: Option<u32>,
}

impl Server {
    fn mntr(&self) -> std::collections::BTreeMap<String, u64> {
        support::four_letter(self.port, "mntr")
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once('\t')?;
                Some((k.to_string(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// `zk_num_alive_connections`.
    pub fn connections(&self) -> u64 {
        self.mntr()
            .get("zk_num_alive_connections")
            .copied()
            .unwrap_or(0)
    }
}

/// The servers (a restarted server has a new pid: read them again after a kill).
pub fn servers(ensemble: &Ensemble) -> Vec<Server> {
    (0..SIZE)
        .map(|i| {
            let cfg = ensemble.dir.path().join((i + 1).to_string());
            Server {
                port: ensemble.ports[i].client,
                pid: pid_with(&cfg.display().to_string()),
            }
        })
        .collect()
}

/// The java process whose command line names `dir`.
fn pid_with(dir: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let text = String::from_utf8_lossy(&cmdline);
        (text.contains("java") && text.contains(dir)).then_some(pid)
    })
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The ensemble's counters at one moment, summed over the servers.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub packets_received: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub watch_fired: u64,
    pub connections: u64,
    pub cpu: f64,
    pub rss_mb: Vec<f64>,
    /// Reads and writes per top-level node (`zk_cnt_<ns>_read_per_namespace`, `_write_`):
    /// `"read hosts"`, `"write agent-locks"`, ...
    pub namespaced: std::collections::BTreeMap<String, u64>,
}

impl Figures {
    pub fn read(servers: &[Server]) -> Figures {
        let mut f = Figures::default();
        for s in servers {
            let m = s.mntr();
            let get = |k: &str| m.get(k).copied().unwrap_or(0);
            f.packets_received += get("zk_packets_received");
            f.bytes_received += get("zk_bytes_received_count");
            f.bytes_sent += get("zk_response_bytes");
            f.connections += get("zk_num_alive_connections");
            f.watch_fired += ["changed", "deleted", "created", "children"]
                .iter()
                .map(|k| get(&format!("zk_sum_node_{k}_watch_count")))
                .sum::<u64>();
            for (key, count) in &m {
                if let Some(ns) = namespace_count(key) {
                    *f.namespaced.entry(ns).or_default() += count;
                }
            }
            if let Some(pid) = s.pid {
                f.cpu += super::fleet::cpu_seconds(pid);
                f.rss_mb.push((rss_mb(pid) * 10.0).round() / 10.0);
            }
        }
        f
    }

    /// The change since `before` (a restarted server's counters start again: its part of
    /// the difference is then what it counted since it started).
    pub fn since(&self, before: &Figures) -> Figures {
        let d = |a: u64, b: u64| a.checked_sub(b).unwrap_or(a);
        Figures {
            packets_received: d(self.packets_received, before.packets_received),
            bytes_received: d(self.bytes_received, before.bytes_received),
            bytes_sent: d(self.bytes_sent, before.bytes_sent),
            watch_fired: d(self.watch_fired, before.watch_fired),
            connections: self.connections,
            cpu: (self.cpu - before.cpu).max(0.0),
            rss_mb: self.rss_mb.clone(),
            namespaced: self
                .namespaced
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        d(*v, before.namespaced.get(k).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
        }
    }

    /// Requests per host by namespace, and the rest (pings, `sync`, session requests):
    /// `{"read hosts": 3.1, ..., "other": 12.0}`. Every server applies every write and
    /// counts it: a write's count is divided by the ensemble's size.
    pub fn per_host(&self, hosts: usize) -> Value {
        let n = hosts as f64;
        let mut out = serde_json::Map::new();
        let mut counted = 0.0;
        for (k, v) in &self.namespaced {
            let v = match k.starts_with("write ") {
                true => *v as f64 / SIZE as f64,
                false => *v as f64,
            };
            counted += v;
            out.insert(k.clone(), serde_json::json!((v / n * 10.0).round() / 10.0));
        }
        let other = (self.packets_received as f64 - counted).max(0.0) / n;
        out.insert(
            "other".into(),
            serde_json::json!((other * 10.0).round() / 10.0),
        );
        Value::Object(out)
    }
}

/// `zk_cnt_<ns>_read_per_namespace` → `read <ns>` (the count of requests, not the bytes).
fn namespace_count(key: &str) -> Option<String> {
    let rest = key.strip_prefix("zk_cnt_")?;
    for kind in ["read", "write"] {
        if let Some(ns) = rest.strip_suffix(&format!("_{kind}_per_namespace")) {
            return Some(format!("{kind} {ns}"));
        }
    }
    None
}

/// What a sampler saw.
#[derive(Debug, Default, Clone)]
pub struct Sampled {
    /// Most outstanding requests on one server.
    pub peak_outstanding: u64,
    /// Times `/hosts` `version` was seen `None` (a halt).
    pub halts: u64,
}

/// Samples the servers and `/hosts` every 100 ms until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Sampled>,
}

impl Sampler {
    pub fn start(client: &zkdeployment::zk::Client, servers: Vec<Server>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, flag) = (client.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut out = Sampled::default();
            let mut halted = false;
            while !flag.load(Ordering::SeqCst) {
                for s in &servers {
                    let o = s
                        .mntr()
                        .get("zk_outstanding_requests")
                        .copied()
                        .unwrap_or(0);
                    out.peak_outstanding = out.peak_outstanding.max(o);
                }
                if let Ok(Ok((data, _))) =
                    tokio::time::timeout(Duration::from_secs(2), client.get_data("/hosts")).await
                {
                    let null = zkdeployment::zk::decode(&data)
                        .get("version")
                        .is_none_or(Value::is_null);
                    if null && !halted {
                        out.halts += 1;
                    }
                    halted = null;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            out
        });
        Sampler { stop, task }
    }

    pub async fn stop(self) -> Sampled {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap_or_default()
    }
}

/// True when host `i`'s status file says `done` at `version`.
pub fn host_done(work: &Path, i: usize, version: &str) -> bool {
    let status = work.join("hosts").join(host_id(i)).join("run/status");
    let text = std::fs::read_to_string(status).unwrap_or_default();
    let fields: Vec<&str> = text.trim_end().splitn(4, ' ').collect();
    fields.len() == 4 && fields[2] == version && fields[3] == "done"
}

/// The scripts of one scenario, in seconds since it began.
#[derive(Debug, Default)]
pub struct Runs {
    /// The first script's start.
    pub first_start: Option<f64>,
    /// Each host's last successful end, sorted.
    done: Vec<f64>,
    /// Starts and ends of every run.
    spans: Vec<(f64, Option<f64>)>,
    /// Scripts run.
    pub count: usize,
    /// Instances (host, node) that ran more than once successfully.
    pub doubles: usize,
}

/// The runs at `revision` of nodes whose path starts with `prefix`.
pub fn runs_of(
    journal: &Mutex<Vec<super::host::Run>>,
    revision: &str,
    prefix: &str,
    t0: Instant,
) -> Runs {
    let runs = journal.lock().unwrap();
    let at = |i: Instant| i.saturating_duration_since(t0).as_secs_f64();
    let mine: Vec<&super::host::Run> = runs
        .iter()
        .filter(|r| r.version == revision && r.path.starts_with(prefix))
        .collect();
    let mut per_host: std::collections::BTreeMap<usize, f64> = Default::default();
    let mut per_instance: std::collections::BTreeMap<(usize, &str), usize> = Default::default();
    for r in &mine {
        if let (true, Some(end)) = (r.ok, r.end) {
            let e = per_host.entry(r.host).or_insert(0.0);
            *e = e.max(at(end));
            *per_instance.entry((r.host, r.path.as_str())).or_default() += 1;
        }
    }
    let mut done: Vec<f64> = per_host.into_values().collect();
    done.sort_by(f64::total_cmp);
    Runs {
        first_start: mine.iter().map(|r| at(r.start)).reduce(f64::min),
        done,
        spans: mine.iter().map(|r| (at(r.start), r.end.map(at))).collect(),
        count: mine.len(),
        doubles: per_instance.values().filter(|n| **n > 1).count(),
    }
}

impl Runs {
    /// When the share `q` of the hosts that ran was done.
    pub fn done_at(&self, q: f64) -> Option<f64> {
        if self.done.is_empty() {
            return None;
        }
        let k = ((q * self.done.len() as f64).ceil() as usize).clamp(1, self.done.len());
        Some(self.done[k - 1])
    }

    /// From a script's end to the start of the next script that waited for a place: each
    /// start after the first is matched to the earliest unmatched end before it;
    /// `[p50, p99, max]` in milliseconds.
    pub fn gaps_ms(&self) -> Value {
        let mut starts: Vec<f64> = self.spans.iter().map(|s| s.0).collect();
        let mut ends: Vec<f64> = self.spans.iter().filter_map(|s| s.1).collect();
        starts.sort_by(f64::total_cmp);
        ends.sort_by(f64::total_cmp);
        let (mut e, mut gaps) = (0, Vec::new());
        for s in starts {
            if e < ends.len() && ends[e] <= s {
                gaps.push((s - ends[e]) * 1000.0);
                e += 1;
            }
        }
        gaps.sort_by(f64::total_cmp);
        let q = |p: f64| {
            gaps.get(((p * gaps.len() as f64) as usize).min(gaps.len().saturating_sub(1)))
                .copied()
        };
        serde_json::json!([q(0.5), q(0.99), gaps.last().copied()])
    }
}

/// A JSON line as `key: value` lines.
pub fn table(line: &Value) -> String {
    line.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("  {k:<20} {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Runs `bin ARGS` as a process: (wall seconds, peak resident MB, exit code). The peak is
/// the process's own `VmHWM`, read every 2 ms until it exits (`wait4`'s `ru_maxrss` would
/// count the bench's memory too: the child starts as a copy of it until it executes).
pub fn timed(bin: &Path, args: &[&str]) -> (f64, f64, i32) {
    let clock = Instant::now();
    let mut child = std::process::Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run zkdeployment");
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0.0_f64;
    let status = loop {
        let hwm = std::fs::read_to_string(&status_file)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
        if let Some(kb) = hwm {
            peak_kb = peak_kb.max(kb);
        }
        if let Some(status) = child.try_wait().expect("wait for zkdeployment") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    (
        clock.elapsed().as_secs_f64(),
        peak_kb / 1024.0,
        status.code().unwrap_or(-1),
    )
}
