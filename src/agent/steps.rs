//! The steps of a pass other than deployments: the role controller, undeploying, installing,
//! uninstalling, removing `/etc/<app>`; and the commands and environment of the scripts the
//! agent runs (deploy scripts, role controller scripts, the after hook).

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use super::execute::{Context, Failure};
use super::observe;
use super::plan::Step;
use super::software::{self, Ran};
use super::status::{Report, StepReport};
use crate::command::{run_checked, Cmd, CommandError};
use crate::packages::yum::Yum;
use crate::tree::literal::py_str;

/// The report action name of a step.
pub fn action_of(step: &Step) -> &'static str {
    match step {
        Step::RoleController { .. } => "role-controller",
        Step::Undeploy { .. } => "undeploy",
        Step::Install { .. } => "install",
        Step::Deploy { .. } => "deploy",
        Step::Uninstall { .. } => "uninstall",
        Step::RemoveEtc { .. } => "remove-etc",
    }
}

/// A new report entry for a step.
pub fn record_for(action: &str, step: String) -> StepReport {
    StepReport {
        action: action.into(),
        step,
        command: Vec::new(),
        exit: None,
        duration: 0.0,
        output: String::new(),
    }
}

impl Context {
    /// The environment of every script the agent runs.
    pub(super) fn script_env(
        &self,
        version: &Value,
        props_file: Option<&Path>,
    ) -> Vec<(String, String)> {
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
            ("ZKDEPLOYMENT_VERSION".to_string(), py_str(version)),
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

    /// A command with the scripts' environment.
    pub(super) fn script(
        &self,
        argv: Vec<String>,
        version: &Value,
        props_file: Option<&Path>,
    ) -> Cmd {
        Cmd {
            argv,
            env: self.script_env(version, props_file),
            cwd: None,
        }
    }

    /// Runs a command, recording it; a failure carries the output tail in the record.
    pub(super) async fn run_recorded(
        &self,
        cmd: &Cmd,
        record: &mut StepReport,
    ) -> Result<(), String> {
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

    /// Runs a role controller script (`starting-deployments` / `ending-deployments`) as a step.
    pub(super) async fn role_script(
        &self,
        rc: &str,
        name: &str,
        version: &Value,
        report: &mut Report,
    ) -> Result<(), Failure> {
        let role = self.host.role.clone().unwrap_or_default();
        let script = observe::opt_dir(&self.config.root, rc)
            .join("bin")
            .join(name);
        let cmd = self.script(
            vec![
                script.display().to_string(),
                format!("{}/{role}", super::role::ROLES),
            ],
            version,
            None,
        );
        let mut record = record_for(name, format!("{name} /roles/{role} ({rc})"));
        let clock = Instant::now();
        let r = self.run_recorded(&cmd, &mut record).await;
        record.duration = clock.elapsed().as_secs_f64();
        report.steps.push(record);
        r.map_err(Failure::new)
    }

    /// Runs a step other than a deployment.
    pub(super) async fn run_step(
        &self,
        step: &Step,
        version: &Value,
        yum: &mut Yum,
        report: &mut Report,
    ) -> Result<(), Failure> {
        let root = &self.config.root;
        let clock = Instant::now();
        let mut record = record_for(action_of(step), step.to_string());
        let mut ran = Ran::default();
        let result: Result<(), String> = match step {
            Step::RoleController {
                rpm,
                version: wanted,
                installed,
                remove,
            } => {
                let mut r = Ok(());
                if let Some(old) = remove {
                    tracing::info!("removing the role controller {old}");
                    r = software::uninstall(yum, root, old, &mut ran).await;
                }
                if let (Ok(()), Some(rpm)) = (&r, rpm) {
                    r = software::install(
                        yum,
                        root,
                        rpm,
                        wanted.as_deref(),
                        installed.clone(),
                        &mut ran,
                    )
                    .await;
                }
                r
            }
            Step::Undeploy { rpm, app, path, n } => {
                let script = observe::deploy_script(root, rpm).display().to_string();
                let cmd = self.script(
                    vec![script, "-u".into(), path.clone(), n.to_string()],
                    version,
                    None,
                );
                let r = self.run_recorded(&cmd, &mut record).await;
                r.and_then(|_| {
                    observe::remove_markers(root, app, path, *n).map_err(|e| e.to_string())
                })
            }
            Step::Install {
                rpm,
                version: wanted,
                installed,
            } => {
                let r = software::install(
                    yum,
                    root,
                    rpm,
                    wanted.as_deref(),
                    installed.clone(),
                    &mut ran,
                )
                .await;
                r
            }
            Step::Uninstall { rpm } => {
                let r = software::uninstall(yum, root, rpm, &mut ran).await;
                r
            }
            Step::RemoveEtc { app } => {
                if let Err(e) = observe::remove_etc_dir(root, app) {
                    tracing::error!("Removing '/etc/{app}': {e}");
                }
                Ok(())
            }
            Step::Deploy { .. } => unreachable!("deployments run under locks"),
        };
        // Software steps report what `software` ran; scripts were recorded directly.
        if ran != Ran::default() {
            record.command = ran.command;
            record.exit = ran.exit;
            record.output = ran.output;
        }
        record.duration = clock.elapsed().as_secs_f64();
        report.steps.push(record);
        result.map_err(Failure::new)
    }
}
