//! Installing and removing one package, whatever it is: an RPM through yum, or a git checkout
//! (a version starting with `git:`, see [`crate::packages::git`]). Switching between the two
//! kinds, in either direction, removes the other first. Used for applications and role
//! controllers alike.

use std::path::Path;

use super::error::StepError;
use super::observe::opt_dir;
use crate::command::CommandError;
use crate::packages::git;
use crate::packages::yum::{Yum, YumError};

/// What a software step ran last, for the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ran {
    /// The command (argv), if one ran.
    pub(crate) command: Vec<String>,
    /// Its exit status.
    pub(crate) exit: Option<i32>,
    /// Its output tail (or the error).
    pub(crate) output: String,
}

impl Ran {
    fn yum_result(
        &mut self,
        program: &str,
        args: &[&str],
        r: Result<(), YumError>,
    ) -> Result<(), StepError> {
        self.command = std::iter::once(program.to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .collect();
        match r {
            Ok(()) => {
                self.exit = Some(0);
                Ok(())
            }
            Err(e) => {
                match &e {
                    YumError::Command(CommandError::Failed { output, .. }) => {
                        self.exit = Some(output.code);
                        self.output = output.tail.clone();
                    }
                    other => self.output = other.to_string(),
                }
                Err(e.into())
            }
        }
    }

    fn git_result<T>(&mut self, dir: &Path, r: Result<T, git::GitError>) -> Result<T, StepError> {
        match r {
            Ok(v) => {
                self.exit.get_or_insert(0);
                Ok(v)
            }
            Err(e) => {
                if let git::GitError::Build(CommandError::Failed { output, .. }) = &e {
                    self.command = vec![dir.join("stage-build").display().to_string()];
                    self.exit = Some(output.code);
                    self.output = output.tail.clone();
                } else {
                    self.output = e.to_string();
                }
                Err(e.into())
            }
        }
    }
}

fn remove_dir(dir: &Path) -> Result<(), StepError> {
    match std::fs::remove_dir_all(dir) {
        Err(source) if source.kind() != std::io::ErrorKind::NotFound => Err(StepError::File {
            path: dir.to_path_buf(),
            source,
        }),
        _ => Ok(()),
    }
}

/// Installs `rpm` at `version` (`None` = any version). `installed` is what
/// [`installed_version`] reported before the pass (an RPM being replaced by a checkout is
/// removed first, and a checkout being replaced by an RPM).
pub(crate) async fn install(
    yum: &mut Yum,
    root: &Path,
    rpm: &str,
    version: Option<&str>,
    installed: Option<String>,
    ran: &mut Ran,
) -> Result<(), StepError> {
    let dir = opt_dir(root, rpm);
    let rpm_installed = installed.filter(|_| !git::is_checkout(&dir));
    match version.filter(|v| git::parse_version(v).is_some()) {
        Some(v) => {
            if rpm_installed.is_some() {
                tracing::info!("replacing the RPM {rpm} by a checkout");
                ran.yum_result(yum.program(), &["-y", "remove", rpm], yum.remove(rpm).await)?;
                remove_dir(&dir)?;
            }
            ran.command = vec!["git".into(), "checkout".into(), v.to_string()];
            let updated = ran.git_result(&dir, git::update(&dir, rpm, v).await)?;
            ran.output = format!(
                "{} at {}{}",
                rpm,
                updated.commit,
                if updated.rebuilt { ", rebuilt" } else { "" }
            );
            Ok(())
        }
        None => {
            if git::is_checkout(&dir) {
                ran.git_result(
                    &dir,
                    git::remove(&dir, rpm).map_err(|e| git::GitError::Io(e.to_string())),
                )?;
            }
            let spec = match version {
                Some(v) => format!("{rpm}-{v}"),
                None => rpm.to_string(),
            };
            let r = yum
                .install_from(rpm, version, rpm_installed)
                .await
                .map(|_| ());
            ran.yum_result(yum.program(), &["-y", "install", &spec], r)
        }
    }
}

/// Removes `rpm`: a checkout is deleted; an RPM is removed with yum, then its `/opt` directory.
pub(crate) async fn uninstall(
    yum: &Yum,
    root: &Path,
    rpm: &str,
    ran: &mut Ran,
) -> Result<(), StepError> {
    let dir = opt_dir(root, rpm);
    if git::is_checkout(&dir) {
        return ran.git_result(
            &dir,
            git::remove(&dir, rpm).map_err(|e| git::GitError::Io(e.to_string())),
        );
    }
    ran.yum_result(yum.program(), &["-y", "remove", rpm], yum.remove(rpm).await)?;
    remove_dir(&dir)
}

/// The installed version of `rpm` as the plan compares it: for a checkout, its recorded
/// version if its current commit was built (else `None`); for anything else, yum's answer.
pub(crate) async fn installed_version(
    yum: &Yum,
    root: &Path,
    rpm: &str,
) -> Result<Option<String>, StepError> {
    let dir = opt_dir(root, rpm);
    if git::is_checkout(&dir) {
        return Ok(git::recorded_version(&dir).filter(|v| git::is_current(&dir, v)));
    }
    Ok(yum.installed_version(rpm).await?)
}
