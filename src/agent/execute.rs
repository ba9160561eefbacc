//! One deployment pass: prepare (discover, observe, plan — nothing changes yet), then run the
//! steps with a checkpoint before each (a halted or paused cluster, or a stop request, abandons
//! the pass), deployments under per-node locks that skip busy nodes, and finish: record the
//! version on success, halt the cluster on failure. Every step is reported (status file, host
//! node, `last-pass.json`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cluster::{cluster_version, halt, host_path, update_props};
use super::discover::{discover_on, Discovered, Host};
use super::model::{deployed_name, lock_name, marker_base};
use super::observe;
use super::plan::{plan, Step};
use super::status::{now, Report, RunDir, StepReport};
use crate::command::{run_checked, Cmd, CommandError};
use crate::config::Config;
use crate::packages::yum::{Yum, YumError};
use crate::tree::literal::py_str;
use crate::zk::lock::{try_lock, wait_for_any, TryLock};
use crate::zk::{call, decode, encode, Client, ZkError};

/// Where the node locks live.
pub const AGENT_LOCKS: &str = "/agent-locks";
/// Longest wait on busy locks before looking again.
const LOCK_RECHECK: Duration = Duration::from_secs(10);

/// Everything a pass needs.
pub struct Context {
    /// The ZooKeeper session.
    pub client: Client,
    /// The configuration.
    pub config: Config,
    /// Who this host is.
    pub host: Host,
    /// The run directory.
    pub run_dir: RunDir,
    /// The connection string passed to deploy scripts.
    pub connection: String,
    /// Set when the agent must stop (SIGTERM): no new step starts.
    pub stop: Arc<AtomicBool>,
    /// The version this host last deployed.
    pub host_version: Value,
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq)]
pub enum PassOutcome {
    /// The host already was at the cluster version; nothing ran.
    Converged,
    /// All steps ran; the host is at the cluster version.
    Done,
    /// A step failed; the cluster is halted.
    Failed(String),
    /// Stopped between steps (halted or paused cluster, or the agent is stopping).
    Abandoned(String),
    /// Not started: the cluster is halted (`None`) or paused (`False`).
    Skipped(Value),
}

/// A failure inside a pass: the message, and the command output that goes with it.
struct Failure {
    message: String,
    halted: bool,
}

impl Failure {
    fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            halted: false,
        }
    }
}

enum Interrupt {
    Fail(Failure),
    Abandon(String),
}

impl From<Failure> for Interrupt {
    fn from(f: Failure) -> Interrupt {
        Interrupt::Fail(f)
    }
}

impl From<ZkError> for Interrupt {
    fn from(e: ZkError) -> Interrupt {
        Interrupt::Fail(Failure::new(e.to_string()))
    }
}

/// What `deploy --dry-run` shows.
#[derive(Debug, Clone)]
pub struct DryRun {
    /// The cluster version.
    pub version: Value,
    /// The steps a pass would run now (empty if converged, halted or paused).
    pub steps: Vec<Step>,
    /// Why there is nothing to do, if so: `converged`, `halted`, `paused`.
    pub reason: Option<&'static str>,
}

/// Prepared pass: what the tree wants and the steps.
struct Prepared {
    discovered: Discovered,
    steps: Vec<Step>,
}

impl Context {
    fn yum(&self) -> Yum {
        Yum::new(self.config.yum.clone())
    }

    /// Discovers, observes and plans; changes nothing.
    async fn prepare(&self) -> Result<Prepared, Failure> {
        let (discovered, snap) = discover_on(&self.client, &self.host)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        tracing::info!(
            "discovery walked {} nodes, {} deployments",
            snap.walked,
            discovered.deployments.len()
        );
        let mut installed =
            observe::observe_disk(&self.config.root).map_err(|e| Failure::new(e.to_string()))?;
        let mut rpms: Vec<String> = discovered
            .deployments
            .iter()
            .map(|d| d.rpm.clone())
            .collect();
        rpms.sort();
        rpms.dedup();
        installed.versions = observe::installed_versions(&self.yum(), &rpms)
            .await
            .map_err(|e| Failure::new(e.to_string()))?;
        let steps =
            plan(&discovered.deployments, &installed).map_err(|e| Failure::new(e.to_string()))?;
        Ok(Prepared { discovered, steps })
    }

    /// The plan a pass would run now, without changing anything.
    pub async fn dry_run(&self, force: bool) -> Result<DryRun, String> {
        let version = cluster_version(&self.client)
            .await
            .map_err(|e| e.to_string())?;
        let reason = match &version {
            Value::Null => Some("halted"),
            Value::Bool(false) => Some("paused"),
            v if *v == self.host_version && !force => Some("converged"),
            _ => None,
        };
        if reason.is_some() {
            return Ok(DryRun {
                version,
                steps: Vec::new(),
                reason,
            });
        }
        let prepared = self.prepare().await.map_err(|f| f.message)?;
        Ok(DryRun {
            version,
            steps: prepared.steps,
            reason: None,
        })
    }

    /// Writes the status file and mirrors it on the host node.
    async fn status(&self, version: &Value, text: &str) {
        if let Err(e) = self.run_dir.set_status(version, text) {
            tracing::warn!("cannot write the status file: {e}");
        }
        let status = json!(text);
        let path = host_path(&self.host.id);
        if let Err(e) = update_props(&self.client, &path, |p| {
            p.insert("status".into(), status.clone());
        })
        .await
        {
            tracing::warn!("cannot update {path}: {e}");
        }
    }

    /// A checkpoint between steps.
    async fn checkpoint(&self) -> Result<(), Interrupt> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(Interrupt::Abandon("the agent is stopping".into()));
        }
        match cluster_version(&self.client).await? {
            Value::Null => Err(Interrupt::Abandon("cluster version is None".into())),
            Value::Bool(false) => Err(Interrupt::Abandon("cluster is paused".into())),
            _ => Ok(()),
        }
    }

    /// Runs one pass for the current cluster version.
    pub async fn run_pass(&mut self, force: bool) -> Result<PassOutcome, ZkError> {
        let version = cluster_version(&self.client).await?;
        if version.is_null() || version == Value::Bool(false) {
            tracing::warn!(
                "Not deploying because cluster version is {}",
                py_str(&version)
            );
            return Ok(PassOutcome::Skipped(version));
        }
        let path = host_path(&self.host.id);
        update_props(&self.client, &path, |p| {
            p.remove("error");
        })
        .await?;
        if version == self.host_version && !force {
            // The host version may come from a legacy host node: keep it for the next start.
            if self.run_dir.host_version().as_ref() != Some(&version) {
                if let Err(e) = self.run_dir.set_host_version(&version) {
                    tracing::warn!("cannot write host_version: {e}");
                }
            }
            self.status(&version, "done").await;
            return Ok(PassOutcome::Converged);
        }
        tracing::info!("{}", "=".repeat(60));
        tracing::info!("Deploying version {}", py_str(&version));
        let started = now();
        let mut report = Report {
            version: version.clone(),
            outcome: String::new(),
            started,
            finished: 0.0,
            steps: Vec::new(),
            error: None,
        };
        self.status(&version, "deploying").await;
        let result = self.run_steps(&version, &mut report).await;
        let outcome = match result {
            Ok(()) => self.succeed(&version, &mut report).await?,
            Err(Interrupt::Abandon(why)) => {
                tracing::warn!("Abandoning deployment because {why}");
                self.status(&version, &format!("abandoned ({why})")).await;
                report.outcome = "abandoned".into();
                report.error = Some(why.clone());
                PassOutcome::Abandoned(why)
            }
            Err(Interrupt::Fail(failure)) => self.fail(&version, failure, &mut report).await?,
        };
        report.finished = now();
        if let Err(e) = self.run_dir.write_report(&report) {
            tracing::warn!("cannot write the pass report: {e}");
        }
        Ok(outcome)
    }

    async fn run_steps(&mut self, version: &Value, report: &mut Report) -> Result<(), Interrupt> {
        let prepared = self.prepare().await?;
        self.status(version, "got deployments").await;
        let mut yum = self.yum();
        let mut deploys = VecDeque::new();
        for step in &prepared.steps {
            if let Step::Deploy { .. } = step {
                deploys.push_back(step.clone());
                continue;
            }
            if !deploys.is_empty() {
                self.run_deploys(
                    version,
                    &prepared.discovered,
                    std::mem::take(&mut deploys),
                    report,
                )
                .await?;
            }
            self.checkpoint().await?;
            self.status(version, &step.to_string()).await;
            self.run_step(step, version, &mut yum, report).await?;
        }
        if !deploys.is_empty() {
            self.run_deploys(version, &prepared.discovered, deploys, report)
                .await?;
        }
        Ok(())
    }

    /// Runs a step other than a deployment (for the cluster version `version`).
    async fn run_step(
        &self,
        step: &Step,
        version: &Value,
        yum: &mut Yum,
        report: &mut Report,
    ) -> Result<(), Failure> {
        let root = &self.config.root;
        let clock = Instant::now();
        let mut record = StepReport {
            action: action_of(step).into(),
            step: step.to_string(),
            command: Vec::new(),
            exit: None,
            duration: 0.0,
            output: String::new(),
        };
        let result: Result<(), String> = match step {
            Step::Undeploy { rpm, app, path, n } => {
                let cmd = self
                    .script_cmd(rpm, &["-u".into(), path.clone(), n.to_string()], None)
                    .env("ZKDEPLOYMENT_VERSION", py_str(version));
                let r = self.run_recorded(&cmd, &mut record).await;
                r.and_then(|_| {
                    observe::remove_markers(root, app, path, *n).map_err(|e| e.to_string())
                })
            }
            Step::Install {
                rpm,
                version,
                installed,
            } => {
                record.command = vec![
                    self.config.yum.clone(),
                    "-y".into(),
                    "install".into(),
                    spec(rpm, version),
                ];
                let r = yum
                    .install_from(rpm, version.as_deref(), installed.clone())
                    .await
                    .map(|_| ());
                record_yum(&mut record, r)
            }
            Step::Uninstall { rpm } => {
                record.command = vec![
                    self.config.yum.clone(),
                    "-y".into(),
                    "remove".into(),
                    rpm.clone(),
                ];
                let r = record_yum(&mut record, yum.remove(rpm).await);
                let dir = observe::opt_dir(root, rpm);
                r.and_then(|_| match std::fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        Err(format!("{}: {e}", dir.display()))
                    }
                    _ => Ok(()),
                })
            }
            Step::RemoveEtc { app } => match observe::remove_etc_dir(root, app) {
                Ok(_) => Ok(()),
                Err(e) => {
                    tracing::error!("Removing '/etc/{app}': {e}");
                    Ok(())
                }
            },
            Step::Deploy { .. } => unreachable!("deployments run under locks"),
        };
        record.duration = clock.elapsed().as_secs_f64();
        report.steps.push(record);
        result.map_err(Failure::new)
    }

    /// Runs a command, recording it; a failure carries the output tail in the record.
    async fn run_recorded(&self, cmd: &Cmd, record: &mut StepReport) -> Result<(), String> {
        record.command = cmd.argv.clone();
        match run_checked(cmd).await {
            Ok(out) => {
                record.exit = Some(out.code);
                record.output = out.tail;
                Ok(())
            }
            Err(e) => {
                if let CommandError::Failed { output, .. } = &e {
                    record.exit = Some(output.code);
                    record.output = output.tail.clone();
                }
                Err(e.to_string())
            }
        }
    }

    fn script_cmd(&self, rpm: &str, args: &[String], props_file: Option<&std::path::Path>) -> Cmd {
        let script = observe::deploy_script(&self.config.root, rpm);
        let mut argv = vec![script.display().to_string()];
        argv.extend(args.iter().cloned());
        let mut cmd = Cmd::new(argv);
        for (k, v) in self.script_env(props_file) {
            cmd = cmd.env(k, v);
        }
        cmd
    }

    fn script_env(&self, props_file: Option<&std::path::Path>) -> Vec<(String, String)> {
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "/root".into());
        let mut env = vec![
            (
                "ZC_ZK_CONNECTION_STRING".to_string(),
                self.connection.clone(),
            ),
            ("HOME".to_string(), home),
            ("ZKDEPLOYMENT_HOST_ID".to_string(), self.host.id.clone()),
            ("ZKDEPLOYMENT_HOST_NAME".to_string(), self.host.name.clone()),
            (
                "ZKDEPLOYMENT_ROOT".to_string(),
                self.config.root.display().to_string(),
            ),
        ];
        if let Some(role) = &self.host.role {
            env.push(("ZKDEPLOYMENT_ROLE".to_string(), role.clone()));
        }
        if let Some(p) = props_file {
            env.push((
                "ZKDEPLOYMENT_PROPERTIES".to_string(),
                p.display().to_string(),
            ));
        }
        env
    }

    /// Runs the deployments, each under its node lock: a busy node is skipped for another
    /// pending one; only when every pending node is busy does the agent wait (on watches).
    async fn run_deploys(
        &self,
        version: &Value,
        found: &Discovered,
        mut pending: VecDeque<Step>,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        let identifier = format!("{} ({})", self.host.name, self.host.id);
        let props_dir = self.run_dir.status_path().with_file_name("properties");
        std::fs::create_dir_all(&props_dir)
            .map_err(|e| Failure::new(format!("{}: {e}", props_dir.display())))?;
        let mut waited_since: Option<Instant> = None;
        while !pending.is_empty() {
            let mut busy = Vec::new();
            let mut ran = None;
            for (i, step) in pending.iter().enumerate() {
                let Step::Deploy { path, .. } = step else {
                    continue;
                };
                self.checkpoint().await?;
                let lock_path = format!("{AGENT_LOCKS}/{}", lock_name(path));
                match try_lock(&self.client, &lock_path, &identifier).await? {
                    TryLock::Busy { holder } => {
                        tracing::info!(
                            "{lock_path} is held by {}; trying another node",
                            holder.identifier
                        );
                        busy.push(format!("{lock_path}/{}", holder.name));
                    }
                    TryLock::Acquired(held) => {
                        if let Some(since) = waited_since.take() {
                            tracing::info!(
                                "waited {:.1} s for node locks",
                                since.elapsed().as_secs_f64()
                            );
                        }
                        let result = self
                            .deploy_locked(version, found, step, &lock_path, &props_dir, report)
                            .await;
                        if let Err(Interrupt::Fail(f)) = &result {
                            if !f.halted {
                                halt(&self.client, &self.host, version, &f.message).await?;
                            }
                        }
                        held.release(&self.client).await?;
                        result.map_err(|e| match e {
                            Interrupt::Fail(mut f) => {
                                f.halted = true;
                                Interrupt::Fail(f)
                            }
                            other => other,
                        })?;
                        ran = Some(i);
                        break;
                    }
                }
            }
            match ran {
                Some(i) => {
                    pending.remove(i);
                }
                None => {
                    waited_since.get_or_insert_with(Instant::now);
                    tracing::info!("every pending node is locked by another host; waiting");
                    wait_for_any(&self.client, &busy, LOCK_RECHECK).await?;
                }
            }
        }
        Ok(())
    }

    /// One deployment, with its node lock held: the in-flight record, the script, the markers.
    async fn deploy_locked(
        &self,
        version: &Value,
        found: &Discovered,
        step: &Step,
        lock_path: &str,
        props_dir: &std::path::Path,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        let Step::Deploy {
            rpm,
            app,
            path,
            n,
            subtype,
            ..
        } = step
        else {
            unreachable!()
        };
        self.checkpoint().await?;
        self.status(version, &step.to_string()).await;
        let (data, stat) = call("get", lock_path, self.client.get_data(lock_path)).await?;
        let mut lock_props = decode(&data);
        if let Some(Value::Object(rec)) = lock_props.get("in-flight") {
            let ours = rec.get("host").and_then(Value::as_str) == Some(self.host.id.as_str())
                && rec.get("pid").and_then(Value::as_u64) == Some(std::process::id() as u64);
            if !ours {
                let message = format!(
                    "{} ({}) died deploying {} {} (version {}) since {}: in-flight record left in {lock_path}",
                    rec.get("name").map(py_str).unwrap_or_default(),
                    rec.get("host").map(py_str).unwrap_or_default(),
                    rec.get("path").map(py_str).unwrap_or_default(),
                    rec.get("n").map(py_str).unwrap_or_default(),
                    rec.get("version").map(py_str).unwrap_or_default(),
                    rec.get("since").map(py_str).unwrap_or_default(),
                );
                halt(&self.client, &self.host, version, &message).await?;
                lock_props.remove("in-flight");
                call(
                    "set",
                    lock_path,
                    self.client.set_data(lock_path, &encode(&lock_props), None),
                )
                .await?;
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
        lock_props.insert("in-flight".into(), record);
        call(
            "set",
            lock_path,
            self.client
                .set_data(lock_path, &encode(&lock_props), Some(stat.version)),
        )
        .await?;

        let root = &self.config.root;
        let etc = observe::etc_dir(root, app);
        let mut step_report = StepReport {
            action: "deploy".into(),
            step: step.to_string(),
            command: Vec::new(),
            exit: None,
            duration: 0.0,
            output: String::new(),
        };
        let clock = Instant::now();
        let props_file = props_dir.join(format!("{}.json", marker_base(path)));
        let props = found.properties.get(path).cloned().unwrap_or_default();
        let mut result = std::fs::create_dir_all(&etc)
            .map_err(|e| format!("{}: {e}", etc.display()))
            .and_then(|_| {
                super::status::write_atomic(
                    &props_file,
                    &serde_json::to_vec_pretty(&props).unwrap_or_default(),
                )
                .map_err(|e| e.to_string())
            });
        if result.is_ok() {
            let mut args = Vec::new();
            if let Some(s) = subtype {
                args.extend(["-r".to_string(), s.clone()]);
            }
            args.extend([path.clone(), n.to_string()]);
            let mut cmd = self.script_cmd(rpm, &args, Some(&props_file));
            cmd = cmd.env("ZKDEPLOYMENT_VERSION", py_str(version));
            result = self.run_recorded(&cmd, &mut step_report).await;
        }
        if result.is_ok() {
            result =
                observe::write_script_marker(root, app, rpm, path, *n).map_err(|e| e.to_string());
            if result.is_ok() && !etc.join(deployed_name(path, *n)).exists() {
                tracing::warn!(
                    "the deploy script of {rpm} did not create {}",
                    etc.join(deployed_name(path, *n)).display()
                );
            }
        }
        step_report.duration = clock.elapsed().as_secs_f64();
        report.steps.push(step_report);
        if let Err(message) = result {
            halt(&self.client, &self.host, version, &message).await?;
            clear_in_flight(&self.client, lock_path).await?;
            return Err(Interrupt::Fail(Failure {
                message,
                halted: true,
            }));
        }
        clear_in_flight(&self.client, lock_path).await?;
        Ok(())
    }

    async fn succeed(
        &mut self,
        version: &Value,
        report: &mut Report,
    ) -> Result<PassOutcome, ZkError> {
        let path = host_path(&self.host.id);
        update_props(&self.client, &path, |p| {
            p.insert("version".into(), version.clone());
        })
        .await?;
        self.host_version = version.clone();
        if let Err(e) = self.run_dir.set_host_version(version) {
            tracing::warn!("cannot write host_version: {e}");
        }
        if let Some(after) = self.config.after.clone() {
            tracing::info!("Running after hook");
            let mut record = StepReport {
                action: "after".into(),
                step: "after hook".into(),
                command: Vec::new(),
                exit: None,
                duration: 0.0,
                output: String::new(),
            };
            let clock = Instant::now();
            let cmd = Cmd {
                argv: after,
                env: self.script_env(None),
                cwd: None,
            }
            .env("ZKDEPLOYMENT_VERSION", py_str(version));
            let r = self.run_recorded(&cmd, &mut record).await;
            record.duration = clock.elapsed().as_secs_f64();
            report.steps.push(record);
            if let Err(message) = r {
                tracing::error!("FAILED after deploying version {}", py_str(version));
                return self.fail(version, Failure::new(message), report).await;
            }
        }
        tracing::info!("Done deploying version {}", py_str(version));
        self.status(version, "done").await;
        report.outcome = "done".into();
        Ok(PassOutcome::Done)
    }

    async fn fail(
        &self,
        version: &Value,
        failure: Failure,
        report: &mut Report,
    ) -> Result<PassOutcome, ZkError> {
        tracing::error!(
            "FAILED deploying version {}: {}",
            py_str(version),
            failure.message
        );
        if !failure.halted {
            halt(&self.client, &self.host, version, &failure.message).await?;
        }
        let error = json!(failure.message);
        update_props(&self.client, &host_path(&self.host.id), |p| {
            p.insert("error".into(), error.clone());
        })
        .await?;
        self.status(version, "error").await;
        report.outcome = "error".into();
        report.error = Some(failure.message.clone());
        Ok(PassOutcome::Failed(failure.message))
    }
}

/// Records the outcome of a yum step: exit 0, or the failing yum command's exit status and
/// output tail (or, when yum succeeded but the check after it failed, the message).
fn record_yum(record: &mut StepReport, result: Result<(), YumError>) -> Result<(), String> {
    match result {
        Ok(()) => {
            record.exit = Some(0);
            Ok(())
        }
        Err(e) => {
            match &e {
                YumError::Command(CommandError::Failed { output, .. }) => {
                    record.exit = Some(output.code);
                    record.output = output.tail.clone();
                }
                other => record.output = other.to_string(),
            }
            Err(e.to_string())
        }
    }
}

async fn clear_in_flight(client: &Client, lock_path: &str) -> Result<(), ZkError> {
    update_props(client, lock_path, |p| {
        p.remove("in-flight");
    })
    .await
    .map(|_| ())
}

fn spec(rpm: &str, version: &Option<String>) -> String {
    match version {
        Some(v) => format!("{rpm}-{v}"),
        None => rpm.to_string(),
    }
}

fn action_of(step: &Step) -> &'static str {
    match step {
        Step::Undeploy { .. } => "undeploy",
        Step::Install { .. } => "install",
        Step::Deploy { .. } => "deploy",
        Step::Uninstall { .. } => "uninstall",
        Step::RemoveEtc { .. } => "remove-etc",
    }
}
