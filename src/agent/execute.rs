//! One deployment pass: prepare (discover, observe, plan — nothing changes yet), then run the
//! steps with a checkpoint before each (a halted or paused cluster, or a stop request, abandons
//! the pass), deployments under per-node locks that skip busy nodes, and finish: record the
//! version on success, halt the cluster on failure. Every step is reported (status file, host
//! node, `last-pass.json`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use super::cluster::{cluster_version, halt, host_path, update_props};
use super::discover::{discover_on, DiscoverFailure, Discovered, Host};
use super::inventory::{self, Inventory};
use super::model::Installed;
use super::observe;
use super::plan::{plan, Step};
use super::role::{check_lock_node, enter, installed_controllers, RoleLockError};
use super::software;
use super::status::{now, Report, RunDir};
use super::steps::record_for;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::notify::{forget_failure, notify_failure, FailureReport};
use crate::packages::yum::Yum;
use crate::tree::literal::py_str;
use crate::zk::{Client, ZkError};

/// The host node property recording when the host last finished a pass successfully (Unix
/// time): with `/hosts` `version-time`, `status` tells how long a version took to roll out.
pub const DEPLOYED_AT: &str = "deployed-at";

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
    /// The metrics of this process.
    pub metrics: Metrics,
    /// True while a pass runs under a role controller (halts do not abandon it).
    pub controlled: bool,
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

/// A failure inside a pass: its message, and whether the cluster was already halted for it.
pub(super) struct Failure {
    pub(super) message: String,
    pub(super) halted: bool,
}

impl Failure {
    pub(super) fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            halted: false,
        }
    }
}

/// Why the steps stopped early.
pub(super) enum Interrupt {
    /// A step failed: the cluster is halted.
    Fail(Failure),
    /// Stopped between steps on purpose.
    Abandon(String),
    /// ZooKeeper failed (the session may be lost): the pass is abandoned and run again once
    /// a session is up; never a reason to halt the cluster.
    Lost(ZkError),
}

impl From<Failure> for Interrupt {
    fn from(f: Failure) -> Interrupt {
        Interrupt::Fail(f)
    }
}

impl From<ZkError> for Interrupt {
    fn from(e: ZkError) -> Interrupt {
        Interrupt::Lost(e)
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

/// Prepared pass: what the tree wants, what the host had, and the steps.
struct Prepared {
    discovered: Discovered,
    installed: Installed,
    steps: Vec<Step>,
}

impl Context {
    fn yum(&self) -> Yum {
        Yum::new(self.config.yum.clone())
    }

    /// Discovers, observes and plans; changes nothing.
    async fn prepare(&self) -> Result<Prepared, Interrupt> {
        let fail = |e: String| Failure::new(e);
        let (discovered, snap) =
            discover_on(&self.client, &self.host)
                .await
                .map_err(|e| match e {
                    DiscoverFailure::Zk(e) => Interrupt::Lost(e),
                    DiscoverFailure::Tree(e) => Interrupt::Fail(fail(e)),
                })?;
        tracing::info!(
            "discovery walked {} nodes, {} deployments",
            snap.walked,
            discovered.deployments.len()
        );
        let root = &self.config.root;
        let mut installed = observe::observe_disk(root).map_err(|e| fail(e.to_string()))?;
        let yum = self.yum();
        let controllers = installed_controllers(root).map_err(|e| fail(e.to_string()))?;
        if controllers.len() > 1 {
            return Err(Interrupt::Fail(fail(format!(
                "too many installed role controllers: {controllers:?}"
            ))));
        }
        if let Some(rc) = controllers.into_iter().next() {
            let v = software::installed_version(&yum, root, &rc)
                .await
                .map_err(fail)?;
            installed.controller = Some((rc, v));
        }
        let mut rpms: Vec<String> = discovered
            .deployments
            .iter()
            .map(|d| d.rpm.clone())
            .collect();
        rpms.sort();
        rpms.dedup();
        for rpm in rpms {
            let v = software::installed_version(&yum, root, &rpm)
                .await
                .map_err(fail)?;
            installed.versions.insert(rpm, v);
        }
        let steps = plan(
            &discovered.deployments,
            discovered.controller.as_ref(),
            &installed,
        )
        .map_err(|e| fail(e.to_string()))?;
        Ok(Prepared {
            discovered,
            installed,
            steps,
        })
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
        let prepared = self.prepare().await.map_err(|i| match i {
            Interrupt::Fail(f) => f.message,
            Interrupt::Abandon(why) => why,
            Interrupt::Lost(e) => e.to_string(),
        })?;
        Ok(DryRun {
            version,
            steps: prepared.steps,
            reason: None,
        })
    }

    /// Writes the status file, mirrors it on the host node and to systemd.
    pub(super) async fn status(&self, version: &Value, text: &str) {
        if let Err(e) = self.run_dir.set_status(version, text) {
            tracing::warn!("cannot write the status file: {e}");
        }
        crate::systemd::status(text);
        crate::systemd::busy(!matches!(text, "done" | "error") && !text.starts_with("abandoned"));
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

    /// Counts a finished step and rewrites the metrics file.
    pub(super) fn step_done(&mut self) {
        self.metrics.steps += 1;
        self.write_metrics();
    }

    fn write_metrics(&self) {
        if let Some(path) = &self.config.metrics_file {
            if let Err(e) = self.metrics.write(path) {
                tracing::warn!("cannot write the metrics file: {e}");
            }
        }
    }

    /// A checkpoint between steps: a stop request always abandons; a halted or paused cluster
    /// abandons unless a role controller runs the pass.
    pub(super) async fn checkpoint(&self) -> Result<(), Interrupt> {
        if self.stop.load(Ordering::SeqCst) {
            return Err(Interrupt::Abandon("the agent is stopping".into()));
        }
        if self.controlled {
            return Ok(());
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
        self.metrics.halted = version.is_null();
        if version.is_null() || version == Value::Bool(false) {
            tracing::warn!(
                "Not deploying because cluster version is {}",
                py_str(&version)
            );
            // `systemctl status` says why nothing happens (the status file keeps the last
            // pass's outcome, which the monitor reads).
            crate::systemd::status(if version.is_null() {
                "not deploying: the cluster is halted"
            } else {
                "not deploying: deployments are paused"
            });
            self.write_metrics();
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
            self.republish_inventory().await;
            self.metrics.converged = true;
            self.write_metrics();
            return Ok(PassOutcome::Converged);
        }
        self.metrics.converged = false;
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
        let mut basis = None;
        let result = self.run_steps(&version, &mut report, &mut basis).await;
        self.controlled = false;
        let outcome = match result {
            Ok(()) => self.succeed(&version, &mut report).await?,
            Err(Interrupt::Abandon(why)) => {
                tracing::warn!("Abandoning deployment because {why}");
                self.status(&version, &format!("abandoned ({why})")).await;
                report.outcome = "abandoned".into();
                report.error = Some(why.clone());
                self.metrics.passes_abandoned += 1;
                PassOutcome::Abandoned(why)
            }
            Err(Interrupt::Fail(failure)) => self.fail(&version, failure, &mut report).await?,
            Err(Interrupt::Lost(e)) => {
                tracing::warn!("Abandoning deployment: {e}");
                if let Err(io) = self
                    .run_dir
                    .set_status(&version, &format!("abandoned ({e})"))
                {
                    tracing::warn!("cannot write the status file: {io}");
                }
                // No step runs while the session is rebuilt: the agent is idle for the watchdog.
                crate::systemd::busy(false);
                report.outcome = "abandoned".into();
                report.error = Some(e.to_string());
                report.finished = now();
                self.metrics.last_pass = report.finished;
                self.metrics.pass_duration = report.finished - report.started;
                self.metrics.passes_abandoned += 1;
                self.write_metrics();
                let _ = self.run_dir.write_report(&report);
                return Err(e);
            }
        };
        self.publish_inventory(&version, basis, outcome == PassOutcome::Done)
            .await;
        report.finished = now();
        self.metrics.last_pass = report.finished;
        self.metrics.pass_duration = report.finished - report.started;
        if outcome == PassOutcome::Done {
            self.metrics.last_success = report.finished;
            self.metrics.converged = true;
        }
        self.metrics.halted = cluster_version(&self.client)
            .await
            .map(|v| v.is_null())
            .unwrap_or(false);
        self.write_metrics();
        if let Err(e) = self.run_dir.write_report(&report) {
            tracing::warn!("cannot write the pass report: {e}");
        }
        Ok(outcome)
    }

    /// The steps of a pass: the role controller and undeployments first, then (inside the role
    /// lock when there is a controller) installs and deployments, then uninstalls and
    /// `/etc` clean-up.
    async fn run_steps(
        &mut self,
        version: &Value,
        report: &mut Report,
        basis: &mut Option<(Installed, Vec<Step>)>,
    ) -> Result<(), Interrupt> {
        let prepared = self.prepare().await?;
        *basis = Some((prepared.installed.clone(), prepared.steps.clone()));
        self.status(version, "got deployments").await;
        let mut yum = self.yum();
        let (mut before, mut locked, mut deploys, mut after) =
            (Vec::new(), Vec::new(), VecDeque::new(), Vec::new());
        for step in prepared.steps {
            match step {
                Step::RoleController { .. } | Step::Undeploy { .. } => before.push(step),
                Step::Install { .. } => locked.push(step),
                Step::Deploy { .. } => deploys.push_back(step),
                Step::Uninstall { .. } | Step::RemoveEtc { .. } => after.push(step),
            }
        }
        let controller = prepared
            .discovered
            .controller
            .as_ref()
            .map(|(rpm, _)| rpm.clone());
        if let (Some(_), Some(role)) = (&controller, &self.host.role) {
            // Known before acting: the role lock node exists.
            check_lock_node(&self.client, role)
                .await
                .map_err(|e| match e {
                    RoleLockError::Zk(e) => Interrupt::Lost(e),
                    missing => Interrupt::Fail(Failure::new(missing.to_string())),
                })?;
            // A pass run by a role controller is never abandoned on a halt, from its first
            // step on (the original settles the controller before removing old deployments).
            self.controlled = true;
        }
        for step in &before {
            self.checkpoint().await?;
            self.status(version, &step.to_string()).await;
            self.run_step(step, version, &mut yum, report).await?;
            self.step_done();
        }
        match (&controller, &self.host.role) {
            (Some(rc), Some(role)) => {
                self.status(version, "waiting for the role lock").await;
                let lock = enter(&self.client, role, &self.host)
                    .await
                    .map_err(|e| match e {
                        RoleLockError::Zk(e) => Interrupt::Lost(e),
                        missing => Interrupt::Fail(Failure::new(missing.to_string())),
                    })?;
                let result = self
                    .run_locked(
                        version,
                        &prepared.discovered,
                        rc,
                        locked,
                        deploys,
                        &mut yum,
                        report,
                    )
                    .await;
                lock.leave(&self.client, result.is_ok()).await?;
                result?;
            }
            _ => {
                for step in &locked {
                    self.checkpoint().await?;
                    self.status(version, &step.to_string()).await;
                    self.run_step(step, version, &mut yum, report).await?;
                    self.step_done();
                }
                self.run_deploys(version, &prepared.discovered, deploys, report)
                    .await?;
            }
        }
        for step in &after {
            self.checkpoint().await?;
            self.status(version, &step.to_string()).await;
            self.run_step(step, version, &mut yum, report).await?;
            self.step_done();
        }
        Ok(())
    }

    /// Inside the role lock: `starting-deployments`, installs, deployments,
    /// `ending-deployments`.
    #[allow(clippy::too_many_arguments)]
    async fn run_locked(
        &mut self,
        version: &Value,
        found: &Discovered,
        rc: &str,
        installs: Vec<Step>,
        deploys: VecDeque<Step>,
        yum: &mut Yum,
        report: &mut Report,
    ) -> Result<(), Interrupt> {
        self.status(version, "role start script").await;
        self.role_script(rc, "starting-deployments", version, report)
            .await?;
        for step in &installs {
            self.checkpoint().await?;
            self.status(version, &step.to_string()).await;
            self.run_step(step, version, yum, report).await?;
            self.step_done();
        }
        self.run_deploys_controlled(version, found, deploys, report)
            .await?;
        self.status(version, "role end script").await;
        self.role_script(rc, "ending-deployments", version, report)
            .await?;
        Ok(())
    }

    /// Publishes what the host has after a pass (see [`inventory`]): the disk observed again,
    /// the versions known from before the pass and from its install steps (no yum call). In
    /// the host node (property `inventory`) and the run directory (published again by a
    /// restarted agent). A pass that failed before it was planned changes nothing, so the last
    /// inventory stands. Failures are logged: the inventory is advice for `plan`.
    async fn publish_inventory(
        &self,
        version: &Value,
        basis: Option<(Installed, Vec<Step>)>,
        complete: bool,
    ) {
        let Some((before, steps)) = basis else {
            return;
        };
        let root = &self.config.root;
        let observed = observe::observe_disk(root).and_then(|mut installed| {
            installed.controller = installed_controllers(root)?
                .into_iter()
                .next()
                .map(|rc| (rc, None));
            Ok(installed)
        });
        let installed = match observed {
            Ok(installed) => installed,
            Err(e) => {
                tracing::warn!("cannot take the inventory: {e}");
                return;
            }
        };
        let mut known = before.versions.clone();
        if let Some((rc, v)) = &before.controller {
            known.insert(rc.clone(), v.clone());
        }
        let versions = inventory::versions_after(&known, &steps, complete);
        let inv = Inventory::from_installed(&installed, &versions, version, now());
        let value = inv.to_value();
        let file = self.run_dir.status_path().with_file_name(inventory::FILE);
        if let Err(e) = super::status::write_atomic(
            &file,
            &serde_json::to_vec(&value).expect("serialisable"),
        ) {
            tracing::warn!("cannot write the inventory: {e}");
        }
        self.put_inventory(value).await;
    }

    /// Publishes the inventory kept in the run directory, if the host node lacks it (a
    /// restarted agent registers a fresh host node).
    async fn republish_inventory(&self) {
        let file = self.run_dir.status_path().with_file_name(inventory::FILE);
        let Ok(text) = std::fs::read(&file) else {
            return;
        };
        match serde_json::from_slice::<Value>(&text) {
            Ok(value) if Inventory::from_value(&value).is_ok() => self.put_inventory(value).await,
            _ => tracing::warn!("ignoring {}: not an inventory", file.display()),
        }
    }

    async fn put_inventory(&self, value: Value) {
        let path = host_path(&self.host.id);
        if let Err(e) = update_props(&self.client, &path, |p| {
            p.insert(inventory::PROPERTY.into(), value.clone());
        })
        .await
        {
            tracing::warn!("cannot publish the inventory in {path}: {e}");
        }
    }

    async fn succeed(
        &mut self,
        version: &Value,
        report: &mut Report,
    ) -> Result<PassOutcome, ZkError> {
        let path = host_path(&self.host.id);
        let at = json!(now());
        update_props(&self.client, &path, |p| {
            p.insert("version".into(), version.clone());
            p.insert(DEPLOYED_AT.into(), at.clone());
        })
        .await?;
        self.host_version = version.clone();
        if let Err(e) = self.run_dir.set_host_version(version) {
            tracing::warn!("cannot write host_version: {e}");
        }
        if let Some(after) = self.config.after.clone() {
            tracing::info!("Running after hook");
            let mut record = record_for("after", "after hook".into());
            let clock = std::time::Instant::now();
            let cmd = self.script(after, version, None);
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
        self.metrics.passes_done += 1;
        // The failure last mailed is over: if it happens again, that is news worth a mail.
        if let Err(e) = forget_failure(&self.mail_state()) {
            tracing::warn!("cannot forget the failure last mailed: {e}");
        }
        Ok(PassOutcome::Done)
    }

    /// The file remembering the failure last mailed (see [`crate::notify`]).
    fn mail_state(&self) -> std::path::PathBuf {
        self.run_dir.status_path().with_file_name("last-mail.json")
    }

    async fn fail(
        &mut self,
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
        self.metrics.passes_error += 1;
        // The last step recorded is the failing one only if it did not succeed: a failure that
        // is not a step's (an in-flight record left by a dead holder, a missing role lock)
        // comes after steps that went well, whose command and output would mislead.
        let last = report.steps.last().filter(|s| s.exit != Some(0));
        let mail = FailureReport {
            host_id: self.host.id.clone(),
            host_name: self.host.name.clone(),
            version: version.clone(),
            error: failure.message.clone(),
            step: last.map(|s| s.step.clone()),
            command: last.map(|s| s.command.clone()).filter(|c| !c.is_empty()),
            output: last.map(|s| s.output.clone()).unwrap_or_default(),
            after_hook: last.is_some_and(|s| s.action == "after"),
        };
        notify_failure(&self.config, &mail, &self.mail_state()).await;
        Ok(PassOutcome::Failed(failure.message))
    }
}
