//! Why a pass stops early. A [`StepError`] fails the pass (the cluster is halted); an
//! [`Interrupt`] says whether the pass failed, was abandoned on purpose, or lost ZooKeeper
//! (then the pass is abandoned and run again once a session is up, never a reason to halt).

use std::path::PathBuf;

use super::plan::PlanError;
use crate::command::CommandError;
use crate::packages::git::GitError;
use crate::packages::yum::YumError;
use crate::zk::ZkError;

/// A failure of a pass: everything that halts the cluster.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// yum (or dnf) failed.
    #[error(transparent)]
    Yum(#[from] YumError),
    /// A git checkout could not be brought up to date or removed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A script (deploy script, role controller script, after hook) failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// A file operation whose error already names its file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A file operation, with the file it was about.
    #[error("{}: {source}", path.display())]
    File {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A path that must be a directory (`/etc/<app>`) is something else.
    #[error("{} exists and is not a directory; move it away so that the agent can create the directory", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The plan cannot be made (inconsistent versions).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The tree is wrong for this host (known before acting).
    #[error("{0}")]
    Tree(String),
    /// More than one role controller is installed.
    #[error("too many installed role controllers: {0:?}")]
    TooManyControllers(Vec<String>),
    /// The role lock node is missing (operators create it).
    #[error("role lock node '{0}' must exist")]
    RoleLockMissing(String),
    /// A host died in the middle of a deployment: its in-flight record was found.
    #[error("{0}")]
    DiedInFlight(String),
    /// The health check did not pass within the node's `health-deadline`
    /// (`Health check failed for PATH N: ...`).
    #[error("{0}")]
    Unhealthy(String),
    /// A deployment failed within its node's failure budget (CONTRACT 15): the host is
    /// quarantined for the node at this cluster version; nothing is halted.
    #[error("{0}")]
    Quarantined(String),
    /// The run directory's `host_version` could not be written (a full or read-only run
    /// directory): the pass fails without halting the cluster, and the next pass tries again.
    #[error("cannot record the host version in {}: {source}", path.display())]
    HostVersion {
        /// The `host_version` file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl StepError {
    /// False for a failure of this host's own disk that no other host shares (the host
    /// version not recorded): the pass fails, the cluster is not halted for it.
    pub(crate) fn halts(&self) -> bool {
        !matches!(
            self,
            StepError::HostVersion { .. } | StepError::Quarantined(_)
        )
    }
}

/// A failed pass: its error, and whether the cluster was already halted for it.
#[derive(Debug)]
pub(crate) struct Failure {
    /// What failed.
    pub(crate) error: StepError,
    /// True if the cluster was halted already (under the node lock, before releasing it).
    pub(crate) halted: bool,
}

/// Why the steps of a pass stopped early.
#[derive(Debug)]
pub(crate) enum Interrupt {
    /// A step failed: the cluster is halted.
    Fail(Failure),
    /// Stopped between steps on purpose (halted or paused cluster, the agent stopping).
    Abandon(String),
    /// ZooKeeper failed (the session may be lost).
    Lost(ZkError),
    /// Every other step ran, but these application nodes are halted or paused (CONTRACT 15):
    /// the host version is not recorded; the host passes again when they are resumed.
    Blocked(Vec<String>),
}

/// An application node a pass leaves undone (CONTRACT 15).
#[derive(Debug, Clone)]
// The records of `Halted` and `Paused` are never read (`deploy.rs` builds them).
#[allow(dead_code)]
pub(crate) enum Left {
    /// This host failed it at this cluster version (within the budget, or beyond it with
    /// `on-failure = 'halt-node'`): the message.
    Failed(String, String),
    /// Halted (the node halt's record).
    Halted(String, serde_json::Value),
    /// Paused (the node pause's record).
    Paused(String, serde_json::Value),
}

impl Left {
    /// The application node's path.
    pub(crate) fn path(&self) -> &str {
        match self {
            Left::Failed(p, _) | Left::Halted(p, _) | Left::Paused(p, _) => p,
        }
    }
}

impl From<StepError> for Failure {
    fn from(error: StepError) -> Failure {
        Failure {
            error,
            halted: false,
        }
    }
}

impl From<Failure> for Interrupt {
    fn from(f: Failure) -> Interrupt {
        Interrupt::Fail(f)
    }
}

impl From<StepError> for Interrupt {
    fn from(e: StepError) -> Interrupt {
        Interrupt::Fail(e.into())
    }
}

impl From<ZkError> for Interrupt {
    fn from(e: ZkError) -> Interrupt {
        Interrupt::Lost(e)
    }
}

impl std::fmt::Display for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Interrupt::Fail(failure) => failure.error.fmt(f),
            Interrupt::Abandon(why) => f.write_str(why),
            Interrupt::Lost(e) => e.fmt(f),
            Interrupt::Blocked(paths) => write!(f, "blocked by {}", paths.join(", ")),
        }
    }
}
