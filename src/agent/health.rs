//! The health check after a deployment (docs/rollouts.md): when the package has
//! `/opt/<rpm>/bin/zookeeper-health`, it runs with the deploy script's arguments and
//! environment every [`HEALTH_INTERVAL`] until it exits 0, while the caller still holds its
//! node lock or lease. Not passing within the node's `health-deadline` fails the step with
//! `Health check failed for PATH N: <last output line>`. Before each try the caller proves
//! its session alive (a lost session has taken the lock or lease with it): a check never
//! starts once the lock or lease is gone; the step is abandoned instead, as any step whose
//! session is lost, and runs again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::future::Future;

use super::observe;
use super::status::StepReport;
use crate::command::{run, Cmd};
use crate::zk::ZkError;

/// Why a health check did not pass.
#[derive(Debug)]
pub(crate) enum Unhealthy {
    /// Not within the deadline: `Health check failed for PATH N: <last line>`.
    Failed(String),
    /// The session (and the lock or lease with it) was lost before a try.
    Lost(ZkError),
}

/// The health check script's name in `/opt/<rpm>/bin`.
pub(crate) const HEALTH_SCRIPT: &str = "zookeeper-health";
/// Time between two runs of a failing health check.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// The health check script of a package (it may not exist).
pub(crate) fn health_script(root: &Path, rpm: &str) -> PathBuf {
    observe::opt_dir(root, rpm).join("bin").join(HEALTH_SCRIPT)
}

/// True if the package has a health check.
pub(crate) fn has_health_check(root: &Path, rpm: &str) -> bool {
    health_script(root, rpm).is_file()
}

/// Runs the health check `cmd` until it passes or `deadline` has passed, recording the
/// last run in `record`. Each run may take at most what is left of the deadline (at least
/// one interval). `held` is awaited before each run and must prove the lock or lease still
/// held (an error: it is not, and no run starts).
pub(crate) async fn wait_healthy<F, Fut>(
    cmd: &Cmd,
    path: &str,
    n: u32,
    deadline: Duration,
    record: &mut StepReport,
    mut held: F,
) -> Result<u32, Unhealthy>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), ZkError>>,
{
    let started = Instant::now();
    let end = started + deadline;
    let mut tries = 0u32;
    record.command = cmd.argv.clone();
    loop {
        held().await.map_err(Unhealthy::Lost)?;
        tries += 1;
        let left = end
            .saturating_duration_since(Instant::now())
            .max(HEALTH_INTERVAL);
        let last = match tokio::time::timeout(left, run(cmd)).await {
            Ok(Ok(out)) => {
                record.exit = Some(out.code);
                record.output = out.tail.clone();
                if out.success() {
                    tracing::info!("{path} {n} is healthy after {tries} tries");
                    return Ok(tries);
                }
                last_line(&out.tail).unwrap_or_else(|| format!("exited with status {}", out.code))
            }
            Ok(Err(e)) => {
                record.exit = None;
                e.to_string()
            }
            Err(_) => {
                record.exit = None;
                format!("still running after {:.0} s", left.as_secs_f64())
            }
        };
        let now = Instant::now();
        if now >= end {
            return Err(Unhealthy::Failed(format!(
                "Health check failed for {path} {n}: {last}"
            )));
        }
        tracing::info!("{path} {n} not healthy yet: {last}");
        tokio::time::sleep(HEALTH_INTERVAL.min(end - now)).await;
    }
}

/// The last non-empty line of a command's output.
fn last_line(tail: &str) -> Option<String> {
    tail.lines()
        .rev()
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty())
        .map(String::from)
}

#[cfg(test)]
mod tests {
    use super::last_line;

    #[test]
    fn last_lines() {
        assert_eq!(last_line("a\nb\n\n  \n"), Some("b".into()));
        assert_eq!(last_line(""), None);
    }
}
