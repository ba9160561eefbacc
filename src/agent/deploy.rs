//! Running the deployments of a pass. Without a role controller each instance runs under its
//! node lock (`/agent-locks/<name>`, kazoo's recipe): a host holds at most one node lock, goes
//! on with another pending node when one is busy, and waits (on watches) only when every
//! pending node is busy. After taking a lock and before the script runs, an in-flight record
//! goes into the lock node's data; it is cleared when the step has ended, so a record found by
//! the next holder means its writer died mid-step, and that host halts the cluster naming it.
//! With a role controller, the role lock covers the whole pass and node locks are not used.
//! A node whose `max-parallel` is above 1 is entered with a lease of its semaphore instead
//! (and canaries under the node lock): see [`super::rollout`]. After a successful deploy
//! script, the package's health check runs while the lock or lease is still held
//! ([`super::health`]).

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::{halt, update_props, update_props_known};
use super::discover::Discovered;
use super::execute::{Context, Failure, Interrupt};
use super::health::{health_script, wait_healthy};
use super::model::{deployed_name, lock_name, marker_base};
use super::observe;
use super::plan::Step;
use super::rollout::{
    canary_key, in_canary_phase, node_settings, record_canary, rollout_plan, semaphore_path,
    NodeRollout,
};
use super::status::{now, Report};
use super::steps::record_for;
use crate::tree::literal::py_str;
use crate::zk::lock::{try_lock, wait_for_any, Held, TryLock};
use crate::zk::semaphore::{self, Lease, TryLease};
use crate::zk::{call_retrying, decode, Client, ZkError};

/// Where the node locks live.
pub const AGENT_LOCKS: &str = "/agent-locks";
/// Longest wait on busy locks before looking again.
const LOCK_RECHECK: Duration = Duration::from_secs(10);

/// How a host entered an application node, or why it could not.
enum Entry {
    /// Its node lock (K = 1, or a canary: then the canary version key).
    Lock { held: Held, canary: Option<String> },
    /// A lease of its semaphore (K > 1).
    Lease { lease: Lease },
    /// Every place is taken: the lock or semaphore, the nodes to watch, and who holds them.
    Busy {
        place: String,
        nodes: Vec<String>,
        who: String,
    },
}

/// The lock node of an application node.
pub fn lock_path(path: &str) -> String {
    format!("{AGENT_LOCKS}/{}", lock_name(path))
}

impl Context {
    /// Runs the deployments under node locks, skipping busy nodes.
    pub(super) async fn run_deploys(
        &mut self,
        version: &Value,
        found: &Discovered,
        mut pending: VecDeque<Step>,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        let identifier = format!("{} ({})", self.host.name, self.host.id);
        let mut waited_since: Option<Instant> = None;
        // The waiting status last written: rewritten only when it changes, so that its age
        // (what the monitor reports) counts from the start of the wait.
        let mut waiting: Option<String> = None;
        let rollout = rollout_plan(
            &self.client,
            &self.config.root,
            found,
            pending.make_contiguous(),
        )
        .await?;
        if let Some(why) = &rollout.mixed {
            tracing::warn!("mixed fleet: {why}");
        }
        while !pending.is_empty() {
            let mut busy = Vec::new();
            let mut holders = Vec::new();
            let mut ran = None;
            // Once per round (entering a node checks again before its script runs).
            self.checkpoint().await?;
            for (i, step) in pending.iter().enumerate() {
                let Step::Deploy { path, .. } = step else {
                    continue;
                };
                let node = rollout.node(path);
                match self.enter(step, &node, &identifier).await? {
                    Entry::Busy { place, nodes, who } => {
                        tracing::info!("{place} is held by {who}; trying another node");
                        busy.extend(nodes);
                        holders.push(format!("{path} held by {who}"));
                    }
                    entry => {
                        if let Some(since) = waited_since.take() {
                            let waited = since.elapsed().as_secs_f64();
                            tracing::info!("waited {waited:.1} s for node locks");
                            self.metrics.lock_wait += waited;
                        }
                        let lock = lock_path(path);
                        let (result, released) = match entry {
                            Entry::Lock { held, canary } => {
                                let result = self
                                    .deploy_locked(version, found, step, &lock, canary, report)
                                    .await;
                                (result, held.release(&self.client).await)
                            }
                            Entry::Lease { lease } => {
                                let sem = semaphore_path(path);
                                let result = self
                                    .deploy_leased(version, found, step, &sem, &lease, report)
                                    .await;
                                (result, lease.release(&self.client).await)
                            }
                            Entry::Busy { .. } => unreachable!("handled above"),
                        };
                        // The step's own outcome first: a failed release only hides it.
                        result?;
                        released?;
                        ran = Some(i);
                        break;
                    }
                }
            }
            match ran {
                Some(i) => {
                    pending.remove(i);
                    waiting = None;
                }
                None => {
                    waited_since.get_or_insert_with(Instant::now);
                    tracing::info!("every pending node is locked by another host; waiting");
                    // The status says what the host waits for, and for whom (not the step
                    // it last ran).
                    let text = waiting_status(&holders);
                    if waiting.as_ref() != Some(&text) {
                        self.status(version, &text).await;
                        waiting = Some(text);
                    }
                    wait_for_any(&self.client, &busy, LOCK_RECHECK).await?;
                }
            }
        }
        Ok(())
    }

    /// Tries to enter `step`'s node: its node lock when K = 1 or while its canaries are not
    /// done, else a lease of its semaphore (K > 1). Never waits for another host.
    async fn enter(
        &self,
        step: &Step,
        node: &NodeRollout,
        identifier: &str,
    ) -> Result<Entry, Interrupt> {
        let Step::Deploy { path, .. } = step else {
            unreachable!("only deployments")
        };
        let lock = lock_path(path);
        let canary = in_canary_phase(&self.client, step, node).await?;
        if node.parallel <= 1 || canary {
            return Ok(match try_lock(&self.client, &lock, identifier).await? {
                TryLock::Busy { holder } => Entry::Busy {
                    nodes: vec![format!("{lock}/{}", holder.name)],
                    place: lock.clone(),
                    who: holder.identifier,
                },
                TryLock::Acquired(held) if canary => {
                    // The canaries may have finished while we took the lock: then the
                    // others hold leases, and so must we.
                    if in_canary_phase(&self.client, step, node).await? {
                        Entry::Lock {
                            held,
                            canary: Some(canary_key(step)),
                        }
                    } else {
                        held.release(&self.client).await?;
                        self.enter_semaphore(path, node, identifier).await?
                    }
                }
                TryLock::Acquired(held) => Entry::Lock { held, canary: None },
            });
        }
        self.enter_semaphore(path, node, identifier).await
    }

    async fn enter_semaphore(
        &self,
        path: &str,
        node: &NodeRollout,
        identifier: &str,
    ) -> Result<Entry, Interrupt> {
        let sem = semaphore_path(path);
        Ok(
            match semaphore::try_acquire(&self.client, &sem, identifier, node.parallel).await? {
                TryLease::Acquired(lease) => Entry::Lease { lease },
                TryLease::Full { holders } => {
                    let named: Vec<&str> = holders
                        .iter()
                        .map(|h| h.identifier.as_str())
                        .filter(|i| !i.is_empty())
                        .collect();
                    Entry::Busy {
                        place: sem.clone(),
                        who: if named.is_empty() {
                            format!("{} lease holders", holders.len())
                        } else {
                            named.join(", ")
                        },
                        nodes: holders.into_iter().map(|h| h.node).collect(),
                    }
                }
            },
        )
    }

    /// Runs the deployments in order without node locks (the role lock is held).
    pub(super) async fn run_deploys_controlled(
        &mut self,
        version: &Value,
        found: &Discovered,
        pending: VecDeque<Step>,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        for step in &pending {
            self.checkpoint().await?;
            self.status(version, &step.to_string()).await;
            if let Err(message) = self.deploy_one(version, found, step, report).await {
                return Err(Interrupt::Fail(Failure::new(message)));
            }
        }
        Ok(())
    }

    /// One deployment with its node lock held: the in-flight record around the script. A
    /// failure halts the cluster before the caller releases the lock.
    async fn deploy_locked(
        &mut self,
        version: &Value,
        found: &Discovered,
        step: &Step,
        lock: &str,
        canary: Option<String>,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        let Step::Deploy { path, n, .. } = step else {
            unreachable!("only deployments")
        };
        // Three independent round trips at once: the checkpoint, the status on the host
        // node, and the lock node's data (the hand-off between hosts is made of these).
        let label = step.to_string();
        let (checked, (), got) = tokio::join!(
            self.checkpoint(),
            self.status(version, &label),
            call_retrying("get", lock, || self.client.get_data(lock)),
        );
        checked?;
        let (data, stat) = got?;
        let lock_props = decode(&data);
        if let Some(Value::Object(rec)) = lock_props.get("in-flight") {
            let ours = rec.get("host").and_then(Value::as_str) == Some(self.host.id.as_str())
                && rec.get("pid").and_then(Value::as_u64) == Some(u64::from(std::process::id()));
            if !ours {
                let field = |k: &str| rec.get(k).map(py_str).unwrap_or_default();
                let message = format!(
                    "{} ({}) died deploying {} {} (version {}) since {}: in-flight record left in {lock}",
                    field("name"),
                    field("host"),
                    field("path"),
                    field("n"),
                    field("version"),
                    field("since"),
                );
                halt(&self.client, &self.host, version, &message).await?;
                clear_in_flight(&self.client, lock).await?;
                return Err(Interrupt::Fail(Failure {
                    message,
                    halted: true,
                }));
            }
        }
        let record = json!({
            "host": self.host.id, "name": self.host.name, "path": path, "n": n,
            "version": version, "pid": std::process::id(), "since": now(),
        });
        // Version-guarded from the data just read (one round trip), and read again after a
        // connection loss or a concurrent write: written exactly once.
        let written = update_props_known(&self.client, lock, &lock_props, stat.version, |p| {
            p.insert("in-flight".into(), record.clone());
        })
        .await?;
        let result = self.deploy_one(version, found, step, report).await;
        if let Err(message) = &result {
            halt(&self.client, &self.host, version, message).await?;
        }
        let clear = |p: &mut crate::tree::Props| {
            p.remove("in-flight");
        };
        match (&canary, &result, &written) {
            // A canary counts once its step (health check included) went well.
            (Some(key), Ok(()), _) => record_canary(&self.client, lock, key, &self.host.id).await?,
            // Only the holder writes the lock node: the version of our own write is current.
            (_, _, Some((props, v))) => {
                update_props_known(&self.client, lock, props, *v, clear).await?;
            }
            _ => clear_in_flight(&self.client, lock).await?,
        }
        result.map_err(|message| {
            Interrupt::Fail(Failure {
                message,
                halted: true,
            })
        })
    }

    /// Runs the deploy script of one instance and writes its `.script` marker.
    pub(super) async fn deploy_one(
        &mut self,
        version: &Value,
        found: &Discovered,
        step: &Step,
        report: &mut Report,
    ) -> Result<(), String> {
        let Step::Deploy {
            rpm,
            app,
            path,
            n,
            subtype,
            ..
        } = step
        else {
            unreachable!("only deployments")
        };
        let root = self.config.root.clone();
        let etc = observe::etc_dir(&root, app);
        let props_file = properties_file(&self.run_dir.status_path().with_file_name(""), path);
        let props_dir = props_file
            .parent()
            .expect("in the run directory")
            .to_path_buf();
        let props = found.properties.get(path).cloned().unwrap_or_default();
        let mut record = record_for("deploy", step.to_string());
        let mut health = None;
        let clock = Instant::now();
        // Each failure names the path that failed (a read-only run directory is not /etc).
        let mut result = std::fs::create_dir_all(&etc)
            .map_err(|e| format!("{}: {e}", etc.display()))
            .and_then(|_| {
                std::fs::create_dir_all(&props_dir)
                    .map_err(|e| format!("{}: {e}", props_dir.display()))
            })
            .and_then(|_| {
                super::status::write_replacing(
                    &props_file,
                    &serde_json::to_vec_pretty(&props).unwrap_or_default(),
                    false,
                )
                .map_err(|e| e.to_string()) // names the file already
            });
        if result.is_ok() {
            let mut argv = vec![observe::deploy_script(&root, rpm).display().to_string()];
            if let Some(s) = subtype {
                argv.extend(["-r".to_string(), s.clone()]);
            }
            argv.extend([path.clone(), n.to_string()]);
            let cmd = self.script(argv, version, Some(&props_file));
            result = self.run_recorded(&cmd, &mut record).await;
            health = Some(cmd);
        }
        if result.is_ok() {
            result =
                observe::write_script_marker(&root, app, rpm, path, *n).map_err(|e| e.to_string());
            let marker = etc.join(deployed_name(path, *n));
            if result.is_ok() && !marker.exists() {
                tracing::warn!(
                    "the deploy script of {rpm} did not create {}",
                    marker.display()
                );
            }
        }
        record.duration = clock.elapsed().as_secs_f64();
        report.steps.push(record);
        let script = health_script(&root, rpm);
        if let (Ok(()), Some(mut cmd), true) = (&result, health, script.is_file()) {
            // Still holding the lock or lease: the next host starts when this one is healthy.
            cmd.argv[0] = script.display().to_string();
            let deadline = node_settings(found, path).health_deadline;
            self.status(version, &format!("health check {path} {n}"))
                .await;
            let mut check = record_for("health", format!("health check {path} {n}"));
            let clock = Instant::now();
            result = wait_healthy(
                &cmd,
                path,
                *n,
                Duration::from_secs_f64(deadline),
                &mut check,
            )
            .await
            .map(|_| ());
            check.duration = clock.elapsed().as_secs_f64();
            report.steps.push(check);
        }
        self.step_done();
        result
    }
}

/// The status of a host waiting for node locks: the first few nodes and their holders.
fn waiting_status(holders: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = format!(
        "waiting for node locks: {}",
        holders[..holders.len().min(SHOWN)].join(", ")
    );
    if holders.len() > SHOWN {
        text.push_str(&format!(" and {} more", holders.len() - SHOWN));
    }
    text
}

/// Removes the in-flight record from a lock node.
async fn clear_in_flight(client: &Client, lock: &str) -> Result<(), ZkError> {
    update_props(client, lock, |p| {
        p.remove("in-flight");
    })
    .await
    .map(|_| ())
}

/// Path of the properties snapshot of an application node in the run directory
/// (`ZKDEPLOYMENT_PROPERTIES`).
pub fn properties_file(run_dir: &Path, path: &str) -> std::path::PathBuf {
    run_dir
        .join("properties")
        .join(format!("{}.json", marker_base(path)))
}
