//! How each step of a plan runs against the pass ([`Step::run`]): the checkpoint before it,
//! its status, its work, and its report entry ([`Step::execute`]). Deployments under node
//! locks are scheduled by [`super::deploy`], which passes over busy nodes.

use std::time::Instant;

use super::deploy::{deploy_script, Instance};
use super::error::{Interrupt, StepError};
use super::observe;
use super::pass::{run_recorded, Pass};
use super::plan::Step;
use super::software::{self, Ran};
use super::status::StepReport;
use crate::tree::literal::py_str;
use crate::zk::paths::{host_path, role_path, DEPLOYED_AT};
use crate::zk::role_lock::enter;
use crate::zk::update::update_props;

impl Step {
    /// Runs this step: the checkpoint (a stop request, a halted or paused cluster abandon the
    /// pass first), the role lock entered before `starting-deployments`, the status, the work
    /// with its report entry, and the role lock left after `ending-deployments`. A
    /// deployment under its node lock runs through [`super::deploy::run_node_locked`]
    /// instead, which takes the lock and then calls [`Step::execute`].
    pub async fn run(&self, pass: &mut Pass<'_>) -> Result<(), Interrupt> {
        if self.checkpointed() {
            pass.checkpoint().await?;
        }
        if let Step::StartingDeployments { role, .. } = self {
            pass.status("waiting for the role lock").await;
            let host = &pass.agent.host;
            pass.role_lock = Some(enter(&pass.agent.client, role, &host.id, &host.name).await?);
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
    pub async fn execute(&self, pass: &mut Pass<'_>) -> Result<(), Interrupt> {
        let clock = Instant::now();
        let mut record = StepReport::of(self);
        let result = self.work(pass, &mut record).await;
        record.duration = clock.elapsed().as_secs_f64();
        pass.record(self, record);
        result
    }

    /// The work of a step, recorded in `record`.
    async fn work(&self, pass: &mut Pass<'_>, record: &mut StepReport) -> Result<(), Interrupt> {
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
                let mut r = Ok(());
                if let Some(old) = remove {
                    tracing::info!("removing the role controller {old}");
                    r = software::uninstall(&pass.yum, root, old, &mut ran).await;
                }
                if let (Ok(()), Some(rpm)) = (&r, rpm) {
                    r = software::install(
                        &mut pass.yum,
                        root,
                        rpm,
                        version.as_deref(),
                        installed.clone(),
                        &mut ran,
                    )
                    .await;
                }
                r
            }
            Step::StartingDeployments { rpm, role } | Step::EndingDeployments { rpm, role } => {
                let name = self.action();
                let script = observe::opt_dir(root, rpm).join("bin").join(&name);
                let cmd = pass.script(vec![script.display().to_string(), role_path(role)], None);
                run_recorded(&cmd, record).await.map_err(StepError::from)
            }
            Step::Undeploy { rpm, app, path, n } => {
                let script = observe::deploy_script(root, rpm).display().to_string();
                let cmd = pass.script(vec![script, "-u".into(), path.clone(), n.to_string()], None);
                match run_recorded(&cmd, record).await {
                    Ok(()) => observe::remove_markers(root, app, path, *n).map_err(StepError::from),
                    Err(e) => Err(e.into()),
                }
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
                update_props(&agent.client, &host_path(&agent.host.id), |p| {
                    p.insert("version".into(), version.clone());
                    p.insert(DEPLOYED_AT.into(), at.clone());
                })
                .await?;
                pass.recorded = true;
                if let Err(e) = agent.run_dir.set_host_version(&version) {
                    tracing::warn!("cannot write host_version: {e}");
                }
                Ok(())
            }
            Step::After { command } => {
                tracing::info!("Running after hook");
                let cmd = pass.script(command.clone(), None);
                let r = run_recorded(&cmd, record).await;
                if r.is_err() {
                    tracing::error!("FAILED after deploying version {}", py_str(&pass.version));
                }
                r.map_err(StepError::from)
            }
            Step::Deploy {
                rpm,
                app,
                path,
                n,
                subtype,
                ..
            } => {
                let instance = Instance {
                    rpm,
                    app,
                    path,
                    n: *n,
                    subtype: subtype.as_deref(),
                };
                deploy_script(pass, &instance, record).await
            }
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
