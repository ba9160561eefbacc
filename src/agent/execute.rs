//! One deployment pass: prepare (discover, observe, plan — nothing changes yet), then walk
//! the plan's steps in order ([`super::steps`]; deployments under node locks through
//! [`super::deploy`]), and finish: on success the status says `done`; on failure the cluster
//! is halted, the host node carries the error and a mail goes out. Every step is reported
//! (status file, host node, `last-pass.json`), and the report's steps are the plan's steps.

use serde_json::{json, Value};

use super::cluster::{cluster_version, halt, ClusterWatch};
use super::deploy::run_node_locked;
use super::discover::{discover_guessing, DiscoverFailure, Discovered, DiscoveryReport, Mode};
use super::error::{Failure, Interrupt, Left, StepError};
use super::inventory::{self, Inventory};
use super::model::Installed;
use super::observe;
use super::pass::{write_host_version, Pass};
use super::plan::{plan, Inputs, Plan, Step};
use super::role::installed_controllers;
use super::rollout::read_fleet_facts;
use super::rollout_rule::plan_rollouts;
use super::session::Agent;
use super::software;
use super::status::{Report, ReportOutcome, StepReport};
use crate::files::now;
use crate::notify::{forget_failure, notify_failure, FailureReport};
use crate::tree::literal::py_str;
use crate::zk::paths::{host_path, INVENTORY};
use crate::zk::role_lock::check_lock_node;
use crate::zk::ZkError;

/// How a pass ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PassOutcome {
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

/// What `deploy --dry-run` shows.
#[derive(Debug, Clone)]
pub(crate) struct DryRun {
    /// The cluster version.
    pub(crate) version: Value,
    /// The plan of the pass that would run now (empty if converged, halted or paused).
    pub(crate) plan: Plan,
    /// Why there is nothing to do, if so: `converged`, `halted`, `paused`.
    pub(crate) reason: Option<&'static str>,
    /// How discovery found the deploy nodes (`None` if it did not run).
    pub(crate) discovery: Option<DiscoveryReport>,
}

impl Agent {
    /// What the host has: its disk, and the installed version of every package the tree
    /// wants here and of its role controller (yum, one query at a time).
    async fn installed(&self, discovered: &Discovered) -> Result<Installed, Interrupt> {
        let root = &self.config.root;
        let mut installed = observe::observe_disk(root).map_err(StepError::from)?;
        let yum = self.yum();
        let controllers = installed_controllers(root).map_err(StepError::from)?;
        if controllers.len() > 1 {
            return Err(StepError::TooManyControllers(controllers).into());
        }
        if let Some(rc) = controllers.into_iter().next() {
            let v = software::installed_version(&yum, root, &rc).await?;
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
            let v = software::installed_version(&yum, root, &rpm).await?;
            installed.versions.insert(rpm, v);
        }
        Ok(installed)
    }

    /// Discovers (from the deployment index at `version` when it may, else by the walk),
    /// observes and plans; changes nothing.
    async fn prepare(
        &self,
        version: &Value,
    ) -> Result<(Discovered, Installed, Plan, DiscoveryReport), Interrupt> {
        let (discovered, discovery) = self.discover(version).await?;
        let root = &self.config.root;
        // How each deployment rolls out depends on the fleet (mixed or not, how many hosts
        // a percentage counts): asked first, answered while yum runs. The request leaves
        // before yum starts: starting a process holds the runtime's one thread until the
        // child has executed its program (tens of milliseconds when a fleet's worth of
        // agents start yum at once on a busy machine), and a request leaves only when this
        // task yields.
        let paths: Vec<&str> = discovered
            .deployments
            .iter()
            .map(|d| d.path.as_str())
            .collect();
        let (facts, installed) = tokio::join!(
            read_fleet_facts(&self.client, &self.mixed, &discovered, &paths),
            async {
                tokio::task::yield_now().await;
                self.installed(&discovered).await
            }
        );
        let (installed, facts) = (installed?, facts?);
        let mut plan = plan(Inputs {
            wanted: &discovered.deployments,
            controller: discovered.controller.as_ref(),
            role: self.host.role.as_deref(),
            installed: &installed,
            after: self.config.after.as_deref(),
        })
        .map_err(StepError::from)?;
        let rollout = plan_rollouts(&discovered, &plan.steps, &facts, |rpm| {
            super::health::has_health_check(root, rpm)
        });
        if let Some(why) = &rollout.mixed {
            tracing::warn!("mixed fleet: {why}");
        }
        plan.apply_rollout(&rollout.nodes, rollout.mixed);
        Ok((discovered, installed, plan, discovery))
    }

    /// Discovers the deployments of this host at `version`: with what was discovered ahead
    /// (with the read of the version, by the daemon) when it describes this version, else
    /// from the index (guessing from the last read) or by the walk.
    async fn discover(&self, version: &Value) -> Result<(Discovered, DiscoveryReport), Interrupt> {
        let mode = if self.walk {
            Mode::Walk
        } else {
            Mode::Index(version)
        };
        let ahead = self
            .ahead
            .lock()
            .expect("discovery ahead")
            .take()
            .filter(|(_, snap)| !self.walk && snap.version.as_ref() == Some(version));
        let read_ahead = ahead.is_some();
        let (discovered, snap) = match ahead {
            Some(found) => found,
            None => {
                let guess = std::mem::take(&mut *self.read_guess.lock().expect("read guess"));
                discover_guessing(&self.client, &self.host, mode, &guess)
                    .await
                    .map_err(|e| match e {
                        DiscoverFailure::Zk(e) => Interrupt::Lost(e),
                        DiscoverFailure::Tree(e) => StepError::Tree(e).into(),
                    })?
            }
        };
        let discovery = snap.report();
        tracing::info!(
            "discovery ({:?}{}) read {} nodes, {} deployments",
            discovery.source,
            if read_ahead {
                ", read with the version"
            } else {
                ""
            },
            discovery.reads,
            discovered.deployments.len()
        );
        *self.read_guess.lock().expect("read guess") = snap.next_guess();
        Ok((discovered, discovery))
    }

    /// The plan a pass would run now, without changing anything.
    pub(crate) async fn dry_run(&self, force: bool) -> Result<DryRun, Interrupt> {
        let version = cluster_version(&self.client).await?;
        let reason = match &version {
            Value::Null => Some("halted"),
            Value::Bool(false) => Some("paused"),
            v if *v == self.host_version && !force => Some("converged"),
            _ => None,
        };
        if reason.is_some() {
            return Ok(DryRun {
                version,
                plan: Plan::default(),
                reason,
                discovery: None,
            });
        }
        let (_, _, plan, discovery) = self.prepare(&version).await?;
        Ok(DryRun {
            version,
            plan,
            reason: None,
            discovery: Some(discovery),
        })
    }

    /// Runs one pass for the current cluster version.
    pub(crate) async fn run_pass(&mut self, force: bool) -> Result<PassOutcome, ZkError> {
        let version = cluster_version(&self.client).await?;
        self.run_pass_at(version, force, None).await
    }

    /// Runs one pass for `version`, the cluster version just read ([`cluster_version`]),
    /// with the watches set with that read, if any.
    pub(crate) async fn run_pass_at(
        &mut self,
        version: Value,
        force: bool,
        watch: Option<ClusterWatch>,
    ) -> Result<PassOutcome, ZkError> {
        self.metrics.halted = version.is_null();
        if version.is_null() || version == Value::Bool(false) {
            return Ok(self.skip_pass(version));
        }
        self.update_host_node(|p| {
            p.remove("error");
        })
        .await?;
        let mut pass = Pass::new(self, version.clone(), watch);
        if version == self.host_version && !force {
            // The host version may come from a legacy host node: keep it for the next start.
            if self.run_dir.host_version().as_ref() != Some(&version) {
                let _ = write_host_version(self, &version);
            }
            pass.status("done").await;
            pass.metrics.converged = true;
            pass.write_metrics();
            self.metrics = pass.metrics;
            self.republish_inventory().await;
            return Ok(PassOutcome::Converged);
        }
        pass.metrics.converged = false;
        tracing::info!("{}", "=".repeat(60));
        tracing::info!("Deploying version {}", py_str(&version));
        let started = pass.started;
        let mut basis = None;
        let (result, done_written) = self.run_and_record(&mut pass, &mut basis).await?;
        let (outcome, report_outcome, error) = match result {
            Ok(()) => {
                self.pass_done(&mut pass, &mut basis, done_written).await;
                (PassOutcome::Done, ReportOutcome::Done, None)
            }
            Err(Interrupt::Abandon(why)) => {
                tracing::warn!("Abandoning deployment because {why}");
                ended_abandoned(&mut pass, &format!("abandoned ({why})"), why).await
            }
            Err(Interrupt::Blocked(paths)) => ended_blocked(&mut pass, &paths).await,
            Err(Interrupt::Fail(failure)) => {
                let message = fail(&mut pass, failure).await?;
                (
                    PassOutcome::Failed(message.clone()),
                    ReportOutcome::Error,
                    Some(message),
                )
            }
            Err(Interrupt::Lost(e)) => {
                self.session_lost(&mut pass, &e);
                let (metrics, recorded) = (pass.metrics, pass.recorded);
                self.end_pass(metrics, recorded, &version);
                return Err(e);
            }
        };
        self.publish_inventory(&version, basis, outcome == PassOutcome::Done)
            .await;
        let report = finish(&mut pass, started, report_outcome, error);
        if outcome == PassOutcome::Done {
            pass.metrics.last_success = report.finished;
            pass.metrics.converged = true;
        }
        self.write_pass_end(&mut pass, &report).await;
        let (metrics, recorded) = (pass.metrics, pass.recorded);
        self.end_pass(metrics, recorded, &version);
        Ok(outcome)
    }

    /// A pass at a halted (`null`) or paused (`false`) cluster version: nothing is deployed;
    /// the log and `systemctl status` say why.
    fn skip_pass(&mut self, version: Value) -> PassOutcome {
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
        PassOutcome::Skipped(version)
    }

    /// Runs the pass's plan, leaves the role lock of a pass that did not end well, and
    /// writes the version record left for the final status: the plan's result (a failed
    /// record's write included), and whether that write was made.
    async fn run_and_record(
        &self,
        pass: &mut Pass<'_>,
        basis: &mut Option<(Installed, Vec<Step>)>,
    ) -> Result<(Result<(), Interrupt>, bool), ZkError> {
        let mut result = run_plan(pass, basis).await;
        pass.controlled = false;
        if let Some(lock) = pass.role_lock.take() {
            // The pass did not end well: the request stays, and the role stays locked.
            lock.leave(&self.client, false).await?;
        }
        // The version record left for the final status goes in its write (one write, not
        // two), with the inventory; that write failing fails the pass, as the record's would.
        let mut done_written = false;
        if let (Ok(()), Some(at)) = (&result, pass.record_at.take()) {
            let inventory = self.take_inventory(&pass.version, basis.take(), true);
            match pass.final_done_recording(inventory, at).await {
                Ok(()) => done_written = true,
                Err(e) => result = Err(e),
            }
        }
        Ok((result, done_written))
    }

    /// A pass that ran every step: the final status (unless written with the version
    /// record), the metrics, and the failure last mailed forgotten.
    async fn pass_done(
        &self,
        pass: &mut Pass<'_>,
        basis: &mut Option<(Installed, Vec<Step>)>,
        done_written: bool,
    ) {
        tracing::info!("Done deploying version {}", py_str(&pass.version));
        if !done_written {
            // The inventory goes in the same write as the status (one write, not two).
            let inventory = self.take_inventory(&pass.version, basis.take(), true);
            pass.final_status("done", ReportOutcome::Done, None, inventory)
                .await;
        }
        pass.metrics.passes_done += 1;
        // The failure last mailed is over: if it happens again, that is news worth a mail.
        if let Err(e) = forget_failure(&self.mail_state()) {
            tracing::warn!("cannot forget the failure last mailed: {e}");
        }
    }

    /// A pass whose session was lost: the report and the status file say it was abandoned
    /// (nothing is written to ZooKeeper), and the metrics count it.
    fn session_lost(&self, pass: &mut Pass<'_>, e: &ZkError) {
        tracing::warn!("Abandoning deployment: {e}");
        // The report first, then the status (see `Pass::final_status`).
        let report = finish(
            pass,
            pass.started,
            ReportOutcome::Abandoned,
            Some(e.to_string()),
        );
        let _ = self.run_dir.write_report(&report);
        if let Err(io) = self
            .run_dir
            .set_status(&pass.version, &format!("abandoned ({e})"))
        {
            tracing::warn!("cannot write the status file: {io}");
        }
        // No step runs while the session is rebuilt: the agent is idle for the watchdog.
        crate::systemd::busy(false);
        pass.metrics.passes_abandoned += 1;
        pass.write_metrics();
    }

    /// The metrics file and the pass report, at the end of a pass that kept its session.
    async fn write_pass_end(&self, pass: &mut Pass<'_>, report: &Report) {
        // Read for the metrics file alone: a host without one sends no request for it.
        if self.config.metrics_file.is_some() {
            pass.metrics.halted = cluster_version(&self.client)
                .await
                .map(|v| v.is_null())
                .unwrap_or(false);
        }
        pass.write_metrics();
        if let Err(e) = self.run_dir.write_report(report) {
            tracing::warn!("cannot write the pass report: {e}");
        }
    }

    /// Publishes what the host has after a pass (see [`inventory`]): the disk observed again,
    /// the versions known from before the pass and from its install steps (no yum call). In
    /// the host node (property `inventory`) and the run directory (published again by a
    /// restarted agent, whose new host node lacks it). A pass that failed before it was
    /// planned changed nothing, so the last inventory stands. Failures are logged: the
    /// inventory is advice for `plan`, never a reason to fail a pass.
    async fn publish_inventory(
        &self,
        version: &Value,
        basis: Option<(Installed, Vec<Step>)>,
        complete: bool,
    ) {
        if let Some(value) = self.take_inventory(version, basis, complete) {
            self.put_inventory(value).await;
        }
    }

    /// The inventory [`Self::publish_inventory`] publishes, kept in the run directory; `None`
    /// when there is none to publish.
    fn take_inventory(
        &self,
        version: &Value,
        basis: Option<(Installed, Vec<Step>)>,
        complete: bool,
    ) -> Option<Value> {
        let (before, steps) = basis?;
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
                return None;
            }
        };
        let mut known = before.versions.clone();
        if let Some((rc, v)) = &before.controller {
            known.insert(rc.clone(), v.clone());
        }
        let versions = inventory::versions_after(&known, &steps, complete);
        let mut inventory = Inventory::from_installed(&installed, &versions, version, now());
        // Known only here: `zkdeployment plan` says from it whether a health check will run.
        inventory.health = Some(
            installed
                .packages
                .iter()
                .filter(|rpm| super::health::has_health_check(root, rpm))
                .cloned()
                .collect(),
        );
        let value = inventory.to_value();
        let file = self.run_dir.status_path().with_file_name(inventory::FILE);
        let bytes = serde_json::to_vec(&value).expect("serialisable");
        // Not synced: advice for `plan`, published again from here by a restarted agent; a
        // crash that loses it loses nothing the next pass does not write again.
        if let Err(e) = crate::files::write_replacing(&file, &bytes, false) {
            tracing::warn!("cannot write the inventory: {e}");
        }
        Some(value)
    }

    /// Publishes the inventory kept in the run directory, if the host node lacks it.
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
        if let Err(e) = self
            .update_host_node(|p| {
                p.insert(INVENTORY.into(), value.clone());
            })
            .await
        {
            let path = host_path(&self.host.id);
            tracing::warn!("cannot publish the inventory in {path}: {e}");
        }
    }

    /// Takes back what a pass changed in the session: its metrics, and the version it
    /// recorded.
    fn end_pass(&mut self, metrics: crate::metrics::Metrics, recorded: bool, version: &Value) {
        self.metrics = metrics;
        if recorded {
            self.host_version = version.clone();
        }
    }
}

/// The executor: the plan's steps in order, a run of deployments under node locks together
/// (busy nodes are passed over and taken later).
/// `basis` gets what the host had and the steps, for the inventory.
async fn run_plan(
    pass: &mut Pass<'_>,
    basis: &mut Option<(Installed, Vec<Step>)>,
) -> Result<(), Interrupt> {
    // The status goes out with discovery's first reads (its host node write is not waited for
    // first); the status file says `deploying` before either starts.
    let (_, prepared) = futures::join!(pass.status("deploying"), pass.agent.prepare(&pass.version));
    let (discovered, installed, plan, discovery) = prepared?;
    *basis = Some((installed, plan.steps.clone()));
    pass.properties = discovered.properties;
    pass.discovery = Some(discovery);
    // `got deployments` is not waited for: it goes out ahead of the first step's requests
    // (the server applies a session's requests in order), one round trip less before the
    // host queues for its first node. The yield lets it leave before a step starts a
    // process. A host-node write made before its answer (an install step's status) waits
    // for it (`Agent::host_node` is held through each write), so they land in order.
    let said = pass.status_beside("got deployments");
    let ((), ran) = tokio::join!(said, async {
        tokio::task::yield_now().await;
        run_steps(pass, &plan).await
    });
    ran?;
    ended_with_left(pass)
}

/// A pass that left halted or paused nodes undone: its status `blocked PATH...`.
async fn ended_blocked(
    pass: &mut Pass<'_>,
    paths: &[String],
) -> (PassOutcome, ReportOutcome, Option<String>) {
    let why = format!("blocked by {}", paths.join(", "));
    tracing::warn!("Not recording version {}: {why}", py_str(&pass.version));
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    ended_abandoned(pass, &super::status::blocked_status(&refs), why).await
}

/// A pass that stopped early on purpose: its status `text`, `why` in its report.
async fn ended_abandoned(
    pass: &mut Pass<'_>,
    text: &str,
    why: String,
) -> (PassOutcome, ReportOutcome, Option<String>) {
    pass.final_status(text, ReportOutcome::Abandoned, Some(why.clone()), None)
        .await;
    pass.metrics.passes_abandoned += 1;
    (
        PassOutcome::Abandoned(why.clone()),
        ReportOutcome::Abandoned,
        Some(why),
    )
}

/// A pass whose steps ran, judged by the application nodes it left undone (CONTRACT 15): a
/// node this host failed ends it in error (nothing halted: the budget decided), else a node
/// halted or paused ends it blocked. The metrics say which.
fn ended_with_left(pass: &mut Pass<'_>) -> Result<(), Interrupt> {
    let paths = |pick: fn(&Left) -> bool| -> Vec<String> {
        pass.left
            .iter()
            .filter(|l| pick(l))
            .map(|l| l.path().to_string())
            .collect()
    };
    let failed = paths(|l| matches!(l, Left::Failed(..)));
    let halted = paths(|l| matches!(l, Left::Halted(..)));
    let paused = paths(|l| matches!(l, Left::Paused(..)));
    pass.metrics.quarantined = failed.clone();
    pass.metrics.blocked_halted = halted.clone();
    pass.metrics.blocked_paused = paused.clone();
    let errors: Vec<&str> = pass
        .left
        .iter()
        .filter_map(|l| match l {
            Left::Failed(_, error) => Some(error.as_str()),
            _ => None,
        })
        .collect();
    if !errors.is_empty() {
        return Err(StepError::Quarantined(errors.join("; ")).into());
    }
    let blocked: Vec<String> = halted.into_iter().chain(paused).collect();
    match blocked.is_empty() {
        true => Ok(()),
        false => Err(Interrupt::Blocked(blocked)),
    }
}

/// The plan's steps, in order (node-locked runs of deployments together, see
/// [`run_node_locked`]).
async fn run_steps(pass: &mut Pass<'_>, plan: &Plan) -> Result<(), Interrupt> {
    if let Some((_, role)) = plan.role_lock() {
        // Known before acting: the role lock node exists. A pass run by a role controller is
        // never abandoned on a halt, from its first step on (the original settles the
        // controller before removing old deployments).
        check_lock_node(&pass.agent.client, role).await?;
        pass.controlled = true;
    }
    let steps = &plan.steps;
    let mut i = 0;
    while i < steps.len() {
        if steps[i].takes_node_lock() {
            let end = steps[i..]
                .iter()
                .position(|s| !s.takes_node_lock())
                .map_or(steps.len(), |k| i + k);
            run_node_locked(pass, &steps[i..end]).await?;
            i = end;
        } else if matches!(steps[i], Step::RecordVersion | Step::After { .. })
            && !pass.left.is_empty()
        {
            // A node left undone: the version is not this host's (and its hook waits).
            i += 1;
        } else if matches!(steps[i], Step::RecordVersion) && i + 1 == steps.len() {
            // The last step: its write is left for the final status's (`Pass::record_at`).
            pass.record(&steps[i], StepReport::of(&steps[i]));
            pass.record_at = Some(serde_json::json!(now()));
            i += 1;
        } else {
            steps[i].run(pass).await?;
            i += 1;
        }
    }
    Ok(())
}

/// The report of the pass, and its end in the metrics.
fn finish(
    pass: &mut Pass<'_>,
    started: f64,
    outcome: ReportOutcome,
    error: Option<String>,
) -> Report {
    let finished = now();
    pass.metrics.last_pass = finished;
    pass.metrics.pass_duration = finished - started;
    Report {
        version: pass.version.clone(),
        outcome,
        started,
        finished,
        steps: std::mem::take(&mut pass.steps),
        error,
        discovery: pass.discovery,
    }
}

/// A failed pass: halts the cluster (unless already done), records the error on the host
/// node, mails it. Returns the message.
async fn fail(pass: &mut Pass<'_>, failure: Failure) -> Result<String, ZkError> {
    let agent = pass.agent;
    let version = pass.version.clone();
    let message = failure.error.to_string();
    tracing::error!("FAILED deploying version {}: {message}", py_str(&version));
    if !failure.halted && failure.error.halts() {
        halt(&agent.client, &agent.host, &version, &message).await?;
    }
    let error = json!(message);
    agent
        .update_host_node(|p| {
            p.insert("error".into(), error.clone());
        })
        .await?;
    pass.final_status("error", ReportOutcome::Error, Some(message.clone()), None)
        .await;
    pass.metrics.passes_error += 1;
    // The last step recorded is the failing one only if it did not succeed: a failure that
    // is not a step's (an in-flight record left by a dead holder, a missing role lock) comes
    // after steps that went well, whose command and output would mislead.
    let last = pass.steps.last().filter(|s| s.exit != Some(0));
    let mail = FailureReport {
        host_id: agent.host.id.clone(),
        host_name: agent.host.name.clone(),
        version: version.clone(),
        error: message.clone(),
        step: last.map(|s| s.step.clone()),
        command: last.map(|s| s.command.clone()).filter(|c| !c.is_empty()),
        output: last.map(|s| s.output.clone()).unwrap_or_default(),
        after_hook: last.is_some_and(|s| s.action == "after"),
    };
    notify_failure(&agent.config, &mail, &agent.mail_state()).await;
    Ok(message)
}
