//! How each step of a plan runs against the pass ([`Step::run`]): the checkpoint before it,
//! its status, its work, and its report entry ([`Step::execute`]). Deployments under node
//! locks are scheduled by `deploy.rs`, which passes over busy nodes, and run here.

use std::path::Path;
use std::time::Instant;

use super::error::{Interrupt, StepError};
use super::health::{health_script, wait_healthy, Unhealthy};
use super::model::{deployed_name, marker_base};
use super::observe;
use super::pass::{run_recorded, Pass};
use super::plan::Step;
use super::software::{self, Ran};
use super::status::StepReport;
use crate::files::replace_unless_same;
use crate::tree::literal::py_str;
use crate::zk::call_retrying;
use crate::zk::paths::{host_path, role_path, DEPLOYED_AT};
use crate::zk::role_lock::enter;

impl Step {
    /// Runs this step: the checkpoint (a stop request, a halted or paused cluster abandon the
    /// pass first), the role lock entered before `starting-deployments`, the status, the work
    /// with its report entry, and the role lock left after `ending-deployments`. A
    /// deployment under its node lock runs through `deploy::run_node_locked`
    /// instead, which takes the lock and then calls [`Step::execute`].
    pub(crate) async fn run(&self, pass: &mut Pass<'_>) -> Result<(), Interrupt> {
        if self.checkpointed() {
            pass.checkpoint().await?;
        }
        if let Step::StartingDeployments { role, .. } = self {
            pass.status("waiting for the role lock").await;
            let host = &pass.agent.host;
            let stop = &pass.agent.stop;
            pass.role_lock =
                Some(enter(&pass.agent.client, role, &host.id, &host.name, stop).await?);
        }
        if let Some(text) = self.status_text() {
            pass.status(&text).await;
        }
        self.execute(pass).await?;
        if let Step::EndingDeployments { .. } = self {
            if let Some(lock) = pass.role_lock.take() {
                lock.leave(&pass.agent.client, true).await?;
            }
        }
        Ok(())
    }

    /// The work of the step, timed and recorded as one report entry.
    /// A successful deployment of a package with a health check is followed by the check,
    /// recorded as its own `health` entry (the lock or lease still held by the caller).
    pub(crate) async fn execute(&self, pass: &mut Pass<'_>) -> Result<(), Interrupt> {
        self.execute_ready(pass, None).await
    }

    /// [`Step::execute`], with a deployment's script made ready already ([`Step::ready`]).
    pub(crate) async fn execute_ready(
        &self,
        pass: &mut Pass<'_>,
        ready: Option<Result<ReadyScript, StepError>>,
    ) -> Result<(), Interrupt> {
        let clock = Instant::now();
        let mut record = StepReport::of(self);
        let result = self.work(pass, &mut record, ready).await;
        record.duration = clock.elapsed().as_secs_f64();
        pass.record(self, record);
        result?;
        if let (Step::Deploy { rollout, .. }, Some(instance)) = (self, self.instance()) {
            let Instance { rpm, path, n, .. } = instance;
            let root = &pass.agent.config.root;
            let script = health_script(root, rpm);
            if script.is_file() {
                let run_dir = pass.agent.run_dir.status_path().with_file_name("");
                let argv = script_argv(&script, &instance);
                let cmd = pass.script(argv, Some(&properties_file(&run_dir, path)));
                let label = format!("health check {path} {n}");
                pass.status(&label).await;
                let mut check = StepReport {
                    action: "health".into(),
                    step: label,
                    command: Vec::new(),
                    exit: None,
                    duration: 0.0,
                    output: String::new(),
                };
                let clock = Instant::now();
                // Our host node, read on the pass's session: a lost session fails it.
                let client = &pass.agent.client;
                let node = host_path(&pass.agent.host.id);
                let held = || async {
                    call_retrying("stat", &node, || client.check_stat(&node))
                        .await
                        .map(|_| ())
                };
                let healthy =
                    wait_healthy(&cmd, path, n, rollout.health_deadline(), &mut check, held).await;
                check.duration = clock.elapsed().as_secs_f64();
                pass.steps.push(check);
                match healthy {
                    Ok(_) => {}
                    Err(Unhealthy::Failed(why)) => return Err(StepError::Unhealthy(why).into()),
                    Err(Unhealthy::Lost(e)) => return Err(Interrupt::Lost(e)),
                }
            }
        }
        Ok(())
    }

    /// A deployment's script made ready to run (`ready_script`); `None` for other steps.
    pub(crate) fn ready(&self, pass: &Pass<'_>) -> Option<Result<ReadyScript, StepError>> {
        self.instance().map(|d| ready_script(pass, &d))
    }

    /// The instance a deployment's scripts run for; `None` for other steps.
    fn instance(&self) -> Option<Instance<'_>> {
        let Step::Deploy {
            rpm,
            app,
            path,
            n,
            subtype,
            ..
        } = self
        else {
            return None;
        };
        Some(Instance {
            rpm,
            app,
            path,
            n: *n,
            subtype: subtype.as_deref(),
        })
    }

    /// The work of a step, recorded in `record` (a deployment's script made ready already, if
    /// `ready`).
    async fn work(
        &self,
        pass: &mut Pass<'_>,
        record: &mut StepReport,
        ready: Option<Result<ReadyScript, StepError>>,
    ) -> Result<(), Interrupt> {
        let agent = pass.agent;
        let root = &agent.config.root;
        let mut ran = Ran::default();
        let result: Result<(), StepError> = match self {
            Step::RoleController {
                rpm,
                version,
                installed,
                remove,
            } => {
                let wanted = rpm.as_deref().map(|rpm| (rpm, version.as_deref()));
                let (installed, remove) = (installed.clone(), remove.as_deref());
                role_controller(pass, wanted, installed, remove, &mut ran).await
            }
            Step::StartingDeployments { rpm, role } | Step::EndingDeployments { rpm, role } => {
                let script = observe::opt_dir(root, rpm).join("bin").join(self.action());
                let cmd = pass.script(vec![script.display().to_string(), role_path(role)], None);
                run_recorded(&cmd, record).await.map_err(StepError::from)
            }
            Step::Undeploy { rpm, app, path, n } => {
                undeploy(pass, rpm, app, path, *n, record).await
            }
            Step::Install {
                rpm,
                version,
                installed,
            } => {
                software::install(
                    &mut pass.yum,
                    root,
                    rpm,
                    version.as_deref(),
                    installed.clone(),
                    &mut ran,
                )
                .await
            }
            Step::Uninstall { rpm } => software::uninstall(&pass.yum, root, rpm, &mut ran).await,
            Step::RemoveEtc { app } => {
                if let Err(e) = observe::remove_etc_dir(root, app) {
                    tracing::error!("Removing '/etc/{app}': {e}");
                }
                Ok(())
            }
            Step::RecordVersion => {
                let version = pass.version.clone();
                let at = serde_json::json!(crate::files::now());
                agent
                    .update_host_node(|p| {
                        p.insert("version".into(), version.clone());
                        p.insert(DEPLOYED_AT.into(), at.clone());
                    })
                    .await?;
                pass.mark_recorded()
            }
            Step::After { command } => run_after(pass, command, record).await,
            // Made ready here unless it was beforehand: the properties snapshot, the
            // `.script` marker's temporary file, the command; then run.
            Step::Deploy { .. } => match ready.or_else(|| self.ready(pass)) {
                Some(Ok(ready)) => ready.run(record).await,
                Some(Err(e)) => Err(e),
                // Every deployment has a script to make ready.
                None => Ok(()),
            },
        };
        // Software steps report what `software` ran; scripts were recorded directly.
        if ran != Ran::default() {
            record.command = ran.command;
            record.exit = ran.exit;
            record.output = ran.output;
        }
        result.map_err(Interrupt::from)
    }
}

/// The role controller step: `remove` (the installed controller to remove) uninstalled,
/// then `wanted` (package and version) installed, what ran recorded in `ran`.
async fn role_controller(
    pass: &mut Pass<'_>,
    wanted: Option<(&str, Option<&str>)>,
    installed: Option<String>,
    remove: Option<&str>,
    ran: &mut Ran,
) -> Result<(), StepError> {
    let agent = pass.agent;
    let root = &agent.config.root;
    if let Some(old) = remove {
        tracing::info!("removing the role controller {old}");
        software::uninstall(&pass.yum, root, old, ran).await?;
    }
    if let Some((rpm, version)) = wanted {
        software::install(&mut pass.yum, root, rpm, version, installed, ran).await?;
    }
    Ok(())
}

/// The undeploy step: the deploy script run with `-u` for instance `n` of `path`, recorded
/// in `record`; then the instance's markers removed.
async fn undeploy(
    pass: &mut Pass<'_>,
    rpm: &str,
    app: &str,
    path: &str,
    n: u32,
    record: &mut StepReport,
) -> Result<(), StepError> {
    let root = &pass.agent.config.root;
    let script = observe::deploy_script(root, rpm).display().to_string();
    let cmd = pass.script(
        vec![script, "-u".into(), path.to_string(), n.to_string()],
        None,
    );
    run_recorded(&cmd, record).await?;
    observe::remove_markers(root, app, path, n).map_err(StepError::from)
}

/// The `after` hook: `command` run and recorded in `record`; a failure logged.
async fn run_after(
    pass: &mut Pass<'_>,
    command: &[String],
    record: &mut StepReport,
) -> Result<(), StepError> {
    tracing::info!("Running after hook");
    let cmd = pass.script(command.to_vec(), None);
    let r = run_recorded(&cmd, record).await;
    if r.is_err() {
        tracing::error!("FAILED after deploying version {}", py_str(&pass.version));
    }
    r.map_err(StepError::from)
}

/// The instance a deploy script runs for.
pub(crate) struct Instance<'s> {
    /// The package.
    pub(crate) rpm: &'s str,
    /// The application name.
    pub(crate) app: &'s str,
    /// The application node path.
    pub(crate) path: &'s str,
    /// The instance number.
    pub(crate) n: u32,
    /// The subtype (`-r`).
    pub(crate) subtype: Option<&'s str>,
}

/// A deploy script made ready to run (`ready_script`): its properties snapshot written,
/// its `.script` marker's temporary file written, its command built. Dropped without running,
/// the marker's temporary file is removed.
pub(crate) struct ReadyScript {
    cmd: crate::command::Cmd,
    marker: Option<observe::ScriptMarker>,
    /// The `.deployed` marker the script is expected to create.
    deployed: std::path::PathBuf,
    rpm: String,
}

/// Everything before a deploy script of one instance starts, made on this
/// host's disk alone. A holder of a node lock makes it while its checkpoint and in-flight
/// record are in flight ([`Step::ready`]), so that none of it lies between two hosts' (or
/// two nodes') scripts; the properties snapshot may then be written for a step the
/// checkpoint abandons, which no one reads before it is written again.
fn ready_script(pass: &Pass<'_>, d: &Instance<'_>) -> Result<ReadyScript, StepError> {
    let root = &pass.agent.config.root;
    let etc = observe::etc_dir(root, d.app);
    let run_dir = pass.agent.run_dir.status_path().with_file_name("");
    let props_file = properties_file(&run_dir, d.path);
    let props_dir = props_file.parent().unwrap_or(&run_dir).to_path_buf();
    let props = pass.properties.get(d.path).cloned().unwrap_or_default();
    // Each failure names the path that failed (a read-only run directory is not /etc).
    if std::fs::metadata(&etc).is_ok_and(|m| !m.is_dir()) {
        return Err(StepError::NotADirectory { path: etc });
    }
    std::fs::create_dir_all(&etc).map_err(|source| StepError::File {
        path: etc.clone(),
        source,
    })?;
    std::fs::create_dir_all(&props_dir).map_err(|source| StepError::File {
        path: props_dir.clone(),
        source,
    })?;
    // Names the file already. Not synced: rewritten before every deploy script anyway, and
    // an fsync costs milliseconds between two hosts' deploy scripts; not rewritten when it
    // holds these properties already.
    replace_unless_same(
        &props_file,
        &serde_json::to_vec_pretty(&props).unwrap_or_default(),
    )?;
    let argv = script_argv(&observe::deploy_script(root, d.rpm), d);
    let cmd = pass.script(argv, Some(&props_file));
    // The `.script` marker is written first and synced while the script runs (its first
    // poll starts it), so that its fsync is not between this script and the next; it takes
    // its place only once the script went well.
    let marker = observe::ScriptMarker::prepare(root, d.app, d.rpm, d.path, d.n)?;
    Ok(ReadyScript {
        cmd,
        marker: Some(marker),
        deployed: etc.join(deployed_name(d.path, d.n)),
        rpm: d.rpm.to_string(),
    })
}

impl ReadyScript {
    /// Runs the script (recorded in `record`) and puts
    /// its `.script` marker in place once it went well.
    pub(crate) async fn run(mut self, record: &mut StepReport) -> Result<(), StepError> {
        let script_marker = self.marker.take().expect("a ready script runs once");
        let mut run = std::pin::pin!(run_recorded(&self.cmd, record));
        let first = futures::poll!(run.as_mut());
        let synced = script_marker.sync();
        let ran = match first {
            std::task::Poll::Ready(ran) => ran,
            std::task::Poll::Pending => run.await,
        };
        // The script's failure first, then the marker's.
        match ran.map_err(StepError::from).and_then(|()| Ok(synced?)) {
            Ok(()) => script_marker.commit()?,
            Err(e) => {
                script_marker.discard();
                return Err(e);
            }
        }
        if !self.deployed.exists() {
            tracing::warn!(
                "the deploy script of {} did not create {}",
                self.rpm,
                self.deployed.display()
            );
        }
        Ok(())
    }
}

impl Drop for ReadyScript {
    fn drop(&mut self) {
        if let Some(marker) = self.marker.take() {
            marker.discard();
        }
    }
}

/// `SCRIPT [-r SUBTYPE] PATH N`: the deploy script's arguments (the health check takes the
/// same).
fn script_argv(script: &Path, d: &Instance<'_>) -> Vec<String> {
    let mut argv = vec![script.display().to_string()];
    if let Some(s) = d.subtype {
        argv.extend(["-r".to_string(), s.to_string()]);
    }
    argv.extend([d.path.to_string(), d.n.to_string()]);
    argv
}

/// Path of the properties snapshot of an application node in the run directory
/// (`ZKDEPLOYMENT_PROPERTIES`).
pub(crate) fn properties_file(run_dir: &Path, path: &str) -> std::path::PathBuf {
    run_dir
        .join("properties")
        .join(format!("{}.json", marker_base(path)))
}
