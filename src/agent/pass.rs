//! The state of one pass, apart from the session it runs in: the version it deploys, the
//! properties discovery read, the report entries so far, the metrics as they change, and
//! what the pass holds (the role lock). With it, what every step needs: the status written at
//! each step, the checkpoint between steps, and the commands and environment of the scripts
//! the agent runs (deploy scripts, role controller scripts, the after hook).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::cluster::{cluster_version, ClusterWatch};
use super::discover::DiscoveryReport;
use super::error::{Failure, Interrupt, StepError};
use super::plan::Step;
use super::session::{write_metrics, Agent};
use super::status::{Report, ReportOutcome, StepReport};
use crate::command::{run_checked, Cmd, CommandError};
use crate::files::now;
use crate::metrics::Metrics;
use crate::packages::yum::Yum;
use crate::tree::literal::py_str;
use crate::tree::Props;
use crate::zk::paths::{host_path, DEPLOYED_AT, INVENTORY};
use crate::zk::role_lock::RoleLock;
use crate::zk::ZkError;

/// One pass in progress.
pub(crate) struct Pass<'a> {
    /// The session it runs in.
    pub(crate) agent: &'a Agent,
    /// The cluster version being deployed.
    pub(crate) version: Value,
    /// The watches set with the read of `version`, if the daemon set them: while neither
    /// fired, `version` is the cluster's and a checkpoint needs no request.
    pub(crate) watch: Option<ClusterWatch>,
    /// Unix time the pass started.
    pub(crate) started: f64,
    /// Application node properties, as discovery read them (`ZKDEPLOYMENT_PROPERTIES`).
    pub(crate) properties: BTreeMap<String, Props>,
    /// The yum runner of this pass.
    pub(crate) yum: Yum,
    /// The report entries of the steps run so far, in order.
    pub(crate) steps: Vec<StepReport>,
    /// The process's metrics, updated as the pass goes (handed back to the agent after).
    pub(crate) metrics: Metrics,
    /// True while a role controller runs the pass: halts do not abandon it.
    pub(crate) controlled: bool,
    /// The role lock, from `starting-deployments` to `ending-deployments`.
    pub(crate) role_lock: Option<RoleLock>,
    /// True once the version is recorded as this host's.
    pub(crate) recorded: bool,
    /// The time of the version record left for the final status's write (the plan's last
    /// step: the record and `done` in one write, not two), once that step was reached.
    pub(crate) record_at: Option<Value>,
    /// How discovery found the deploy nodes, once it ran.
    pub(crate) discovery: Option<DiscoveryReport>,
    /// The application nodes left undone (failed within a budget, halted, paused).
    pub(crate) left: Vec<super::error::Left>,
}

impl<'a> Pass<'a> {
    /// A pass of `agent` deploying `version` (read with `watch`, if given).
    pub(crate) fn new(agent: &'a Agent, version: Value, watch: Option<ClusterWatch>) -> Pass<'a> {
        Pass {
            agent,
            version,
            watch,
            started: now(),
            properties: BTreeMap::new(),
            yum: agent.yum(),
            steps: Vec::new(),
            metrics: agent.metrics.clone(),
            controlled: false,
            role_lock: None,
            recorded: false,
            record_at: None,
            discovery: None,
            left: Vec::new(),
        }
    }

    /// Writes the status file, mirrors it on the host node and to systemd.
    ///
    /// The host node's write is sent first and the file written while it is in flight: the
    /// runtime has one thread, so a request (this one, and those made beside it, as before a
    /// deploy script) leaves only once this task yields, and the file's create and rename
    /// take a few tenths of a millisecond on ext4.
    pub(crate) async fn status(&self, text: &str) {
        self.status_with(text, None).await;
    }

    /// [`Self::status`], with the host's `inventory` property set in the same write.
    async fn status_with(&self, text: &str, inventory: Option<Value>) {
        if let Err(e) = self.status_recording(text, inventory, None).await {
            tracing::warn!("cannot update {}: {e}", host_path(&self.agent.host.id));
        }
    }

    /// [`Self::status_with`], with the version record (`version` and `deployed-at`, at
    /// `record_at`) in the same write, if given; the write's error is the caller's.
    async fn status_recording(
        &self,
        text: &str,
        inventory: Option<Value>,
        record_at: Option<&Value>,
    ) -> Result<(), ZkError> {
        write_status(self.agent, &self.version, text, inventory, record_at, true).await
    }

    /// [`Self::status`] as a future that holds no borrow of the pass, so that it goes on
    /// while a step runs (which needs the pass): its host node write is made, and the status
    /// file written, at the future's first poll, before the step starts; the write leaves
    /// when the step first waits.
    pub(crate) fn status_beside(&self, text: &str) -> impl std::future::Future<Output = ()> + 'a {
        let (agent, version, text) = (self.agent, self.version.clone(), text.to_string());
        async move {
            if let Err(e) = write_status(agent, &version, &text, None, None, false).await {
                tracing::warn!("cannot update {}: {e}", host_path(&agent.host.id));
            }
        }
    }

    /// Writes the pass report so far, then the final status: whoever sees the status of a
    /// finished pass (`done`, `error`, `abandoned …`) finds that pass's report in
    /// `last-pass.json` (the executor writes it once more when the pass has ended). The
    /// host's inventory, if given, goes in the status's write.
    pub(crate) async fn final_status(
        &self,
        text: &str,
        outcome: ReportOutcome,
        error: Option<String>,
        inventory: Option<Value>,
    ) {
        self.write_report_draft(outcome, error);
        self.status_with(text, inventory).await;
    }

    /// The pass report so far, written before a final status (not synced: the executor
    /// writes it again, durably, when the pass has ended).
    fn write_report_draft(&self, outcome: ReportOutcome, error: Option<String>) {
        let report = Report {
            version: self.version.clone(),
            outcome,
            started: self.started,
            finished: now(),
            steps: self.steps.clone(),
            error,
            discovery: self.discovery,
        };
        if let Err(e) = self.agent.run_dir.write_report_draft(&report) {
            tracing::warn!("cannot write the pass report: {e}");
        }
    }

    /// Notes that the pass's version is recorded on the host node: in the pass, and in the
    /// run directory's `host_version`.
    /// A `host_version` that cannot be written fails the pass (the version stays unrecorded
    /// in the session, so the next pass records it again).
    pub(crate) fn mark_recorded(&mut self) -> Result<(), StepError> {
        write_host_version(self.agent, &self.version)?;
        self.recorded = true;
        Ok(())
    }

    /// The final status `done` of a pass whose version record was left for it
    /// ([`Self::record_at`]): the report so far, then one write of the record, the status
    /// and the inventory. An error of that write is the pass's, as the record's own write's
    /// would have been; once it went through, the version is recorded. A `host_version` that
    /// cannot be written fails the pass (the status file does not say `done`).
    pub(crate) async fn final_done_recording(
        &mut self,
        inventory: Option<Value>,
        at: Value,
    ) -> Result<(), Interrupt> {
        self.write_report_draft(ReportOutcome::Done, None);
        // `host_version` is written between the host node's answer and the status file
        // (`write_status`), so whoever sees `done` finds the version recorded there too.
        let version = self.version.clone();
        let record = Some((version.clone(), at));
        self.agent
            .update_host_node(status_change("done", inventory, record))
            .await
            .map_err(Interrupt::Lost)?;
        write_host_version(self.agent, &version).map_err(Failure::from)?;
        self.recorded = true;
        write_status_file(self.agent, &version, "done");
        Ok(())
    }

    /// Rewrites the metrics file.
    pub(crate) fn write_metrics(&self) {
        write_metrics(&self.agent.config, &self.metrics);
    }

    /// Records a step's report entry; a step that changes the host counts in the metrics.
    pub(crate) fn record(&mut self, step: &Step, entry: StepReport) {
        self.steps.push(entry);
        if step.changes_host() {
            self.metrics.steps += 1;
            self.write_metrics();
        }
    }

    /// A checkpoint between steps: a stop request always abandons; a halted or paused cluster
    /// abandons unless a role controller runs the pass. The cluster version is the one the
    /// pass started from while the daemon's watches on it did not fire, else read again.
    pub(crate) async fn checkpoint(&self) -> Result<(), Interrupt> {
        self.stopping()?;
        if self.controlled {
            return Ok(());
        }
        if self.unchanged() {
            return self.judge(&self.version);
        }
        self.judge(&cluster_version(&self.agent.client).await?)
    }

    /// Whether the cluster version is still the one the pass started from, as its watches
    /// say (false without them).
    pub(crate) fn unchanged(&self) -> bool {
        let client = &self.agent.client;
        self.watch.as_ref().is_some_and(|w| w.unchanged(client))
    }

    /// A checkpoint's first half: a stop request abandons the pass.
    pub(crate) fn stopping(&self) -> Result<(), Interrupt> {
        if self.agent.stop.load(Ordering::SeqCst) {
            return Err(Interrupt::Abandon("the agent is stopping".into()));
        }
        Ok(())
    }

    /// A checkpoint's second half, on the cluster version as just read (halt records
    /// counted: [`cluster_version`]): None or paused abandons, unless a role controller runs
    /// the pass.
    pub(crate) fn judge(&self, version: &Value) -> Result<(), Interrupt> {
        match version {
            _ if self.controlled => Ok(()),
            Value::Null => Err(Interrupt::Abandon("cluster version is None".into())),
            Value::Bool(false) => Err(Interrupt::Abandon("cluster is paused".into())),
            _ => Ok(()),
        }
    }

    /// The environment of every script the agent runs.
    fn script_env(&self, props_file: Option<&Path>) -> Vec<(String, String)> {
        let agent = self.agent;
        let home = std::env::var("HOME")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "/root".into());
        let mut env = vec![
            (
                "ZC_ZK_CONNECTION_STRING".to_string(),
                agent.connection.clone(),
            ),
            ("HOME".to_string(), home),
            ("ZKDEPLOYMENT_VERSION".to_string(), py_str(&self.version)),
            ("ZKDEPLOYMENT_HOST_ID".to_string(), agent.host.id.clone()),
            (
                "ZKDEPLOYMENT_HOST_NAME".to_string(),
                agent.host.name.clone(),
            ),
            (
                "ZKDEPLOYMENT_ROOT".to_string(),
                agent.config.root.display().to_string(),
            ),
        ];
        if let Some(role) = &agent.host.role {
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

    /// A command with the scripts' environment.
    pub(crate) fn script(&self, argv: Vec<String>, props_file: Option<&Path>) -> Cmd {
        Cmd {
            argv,
            env: self.script_env(props_file),
            cwd: None,
        }
    }
}

/// Runs a command, recording it in `record`; a failure carries the output tail in the record.
pub(crate) async fn run_recorded(cmd: &Cmd, record: &mut StepReport) -> Result<(), CommandError> {
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
            Err(e)
        }
    }
}

/// The status `text` of a pass of `agent` at `version`: the host node's write (with the
/// inventory and the version record, if given) made first, the status file written while it
/// is in flight (with `send_first`, once the task yielded so that it left: see
/// [`Pass::status`]), and systemd told. With the version record, the status file waits for
/// the write's answer and for `host_version`, and is not written if the write failed.
async fn write_status(
    agent: &Agent,
    version: &Value,
    text: &str,
    inventory: Option<Value>,
    record_at: Option<&Value>,
    send_first: bool,
) -> Result<(), ZkError> {
    let Some(at) = record_at else {
        return send_status(agent, version, text, inventory, send_first)
            .await
            .await;
    };
    // The version record: recorded on the host node, then in `host_version`, then the
    // status said (a status `done` whose version `host_version` does not hold yet would be
    // seen by whoever reads the two files in between).
    let record = Some((version.clone(), at.clone()));
    agent
        .update_host_node(status_change(text, inventory, record))
        .await?;
    if write_host_version(agent, version).is_ok() {
        write_status_file(agent, version, text);
    }
    Ok(())
}

/// A host-node write's answer, to await.
type Sent<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ZkError>> + Send + 'a>>;

/// [`write_status`] without a version record, up to the host node's answer: the write made,
/// the status file written while it is in flight (with `send_first`, once the task yielded
/// so that it left), and the answer given back to await.
async fn send_status<'a>(
    agent: &'a Agent,
    version: &Value,
    text: &str,
    inventory: Option<Value>,
    send_first: bool,
) -> Sent<'a> {
    let mut mirrored = Box::pin(agent.update_host_node(status_change(text, inventory, None)));
    let first = futures::poll!(mirrored.as_mut());
    if first.is_pending() && send_first {
        tokio::task::yield_now().await;
    }
    write_status_file(agent, version, text);
    match first {
        std::task::Poll::Ready(done) => Box::pin(futures::future::ready(done)),
        std::task::Poll::Pending => mirrored,
    }
}

/// The change of the host node's properties a status makes: `status`, and the `inventory`
/// and the version record (`version`, `deployed-at`), if given.
fn status_change(
    text: &str,
    inventory: Option<Value>,
    record: Option<(Value, Value)>,
) -> impl Fn(&mut Props) + Send + 'static {
    let status = json!(text);
    move |p| {
        p.insert("status".into(), status.clone());
        if let Some(value) = &inventory {
            p.insert(INVENTORY.into(), value.clone());
        }
        if let Some((version, at)) = &record {
            p.insert("version".into(), version.clone());
            p.insert(DEPLOYED_AT.into(), at.clone());
        }
    }
}

/// Writes the run directory's `host_version`; a failure is logged and given back (it fails
/// the pass: a restarted agent would otherwise deploy from an older version).
pub(super) fn write_host_version(agent: &Agent, version: &Value) -> Result<(), StepError> {
    agent.run_dir.set_host_version(version).map_err(|source| {
        let path = agent.run_dir.host_version_path();
        tracing::error!("cannot write {}: {source}", path.display());
        StepError::HostVersion { path, source }
    })
}

/// Writes the status file, and tells systemd.
fn write_status_file(agent: &Agent, version: &Value, text: &str) {
    if let Err(e) = agent.run_dir.set_status(version, text) {
        tracing::warn!("cannot write the status file: {e}");
    }
    crate::systemd::status(text);
    crate::systemd::busy(!matches!(text, "done" | "error") && !text.starts_with("abandoned"));
}
