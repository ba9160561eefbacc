//! The syncer's local guards: the lock file (an exclusive, non-blocking `flock`, so two cron
//! runs never overlap; opened without following a link, and refused unless it is a regular
//! file owned by root or the running user; [`lock_holder`] tells who holds it since when, so that one held too
//! long is reported) and the tombstone (written when a run starts, removed when it ends in
//! success or nothing-to-do, left holding the reason otherwise, for a monitor to alert on),
//! with its success stamp `<tombstone>.last-success` (`TIME REVISION`, rewritten at every run
//! that ends in success or nothing-to-do: `monitor --syncer` checks its age).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

/// Default lock file (the original's).
pub(crate) const DEFAULT_LOCK_FILE: &str = "/var/tmp/zkdeployment_vcs_lock_";
/// Default tombstone: the package's state directory (the original's was under /usr/share).
pub(crate) const DEFAULT_TOMBSTONE: &str = "/var/lib/zkdeployment/sync-tombstone";

/// What the success stamp's name adds to the tombstone's.
pub(crate) const SUCCESS_SUFFIX: &str = ".last-success";
/// What the tombstone says while a run holds the lock (after the run's pid).
pub(crate) const RUNNING_MARK: &str = "acquired lock";

/// The held lock file; released when dropped.
#[derive(Debug)]
pub struct LockFile {
    _lock: Flock<File>,
}

/// Why the lock file cannot be taken. Each names the file: a lock file any local user could
/// have planted is an error, never a quiet "busy".
#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    /// It could not be opened or created.
    #[error("{}: {source}", path.display())]
    Open {
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// It is a symbolic link (never followed).
    #[error("{} is a symbolic link; remove it (a lock file is never opened through a link)", path.display())]
    Link {
        /// The lock file.
        path: PathBuf,
    },
    /// It is not a regular file, or has other hard links (it would be truncated).
    #[error("{} is not a regular file with a single link", path.display())]
    NotFile {
        /// The lock file.
        path: PathBuf,
    },
    /// It belongs to another user, who could hold it and silence every sync.
    #[error(
        "{} is owned by uid {uid}, not by root or this user; remove it, or use --lock-file \
         in a directory only root can write",
        path.display()
    )]
    Owner {
        /// The lock file.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// `flock` failed (not because another process holds it).
    #[error("{}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        source: nix::errno::Errno,
    },
}

/// Takes the lock file without blocking: `Ok(None)` if another process holds it. It is
/// opened without following a link (nor blocking on a FIFO), and must be a regular file
/// owned by root or by the running user.
pub fn lock_file(path: &Path) -> Result<Option<LockFile>, LockFileError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(nix::libc::ELOOP) => LockFileError::Link { path: path.into() },
            _ => LockFileError::Open {
                path: path.into(),
                source,
            },
        })?;
    let meta = file.metadata().map_err(|source| LockFileError::Open {
        path: path.into(),
        source,
    })?;
    if !meta.is_file() || meta.nlink() > 1 {
        return Err(LockFileError::NotFile { path: path.into() });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        let uid = meta.uid();
        return Err(LockFileError::Owner {
            path: path.into(),
            uid,
        });
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let _ = lock.set_len(0);
            let _ = writeln!(&mut *lock, "{}", std::process::id());
            Ok(Some(LockFile { _lock: lock }))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, source)) => Err(LockFileError::Lock {
            path: path.into(),
            source,
        }),
    }
}

/// Who holds a busy lock file, as far as the file tells.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    /// The process id the holder wrote (`unknown` if unreadable).
    pub(crate) pid: String,
    /// Time since the holder took the lock (the file's modification time: the holder
    /// truncates it and writes its pid when it takes the lock).
    pub(crate) age: Duration,
}

/// Reads a busy lock file's holder.
pub(crate) fn lock_holder(path: &Path) -> Holder {
    let pid = std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty() && t.len() < 32)
        .map_or_else(|| "pid unknown".to_string(), |t| format!("pid {t}"));
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    Holder { pid, age }
}

/// The tombstone file.
#[derive(Debug, Clone)]
pub(crate) struct Tombstone {
    path: PathBuf,
}

impl Tombstone {
    /// A tombstone at `path`.
    pub(crate) fn new(path: impl Into<PathBuf>) -> Tombstone {
        Tombstone { path: path.into() }
    }

    /// Writes `text` (creating the directory if needed); failures are logged, not fatal.
    pub(crate) fn write(&self, text: &str) {
        let result = self
            .path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|_| {
                crate::files::write_atomic(&self.path, format!("{}\n", text.trim_end()).as_bytes())
            });
        if let Err(e) = result {
            tracing::warn!("cannot write the tombstone {}: {e}", self.path.display());
        }
    }

    /// The success stamp's path: `<tombstone>.last-success`.
    pub(crate) fn success_path(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(SUCCESS_SUFFIX);
        PathBuf::from(name)
    }

    /// A run ended well at `revision`: the stamp says when, the tombstone goes.
    pub(crate) fn succeeded(&self, revision: &str) {
        let stamp = self.success_path();
        let text = format!("{:.3} {revision}\n", crate::files::now());
        if let Err(e) = crate::files::write_atomic(&stamp, text.as_bytes()) {
            tracing::warn!("cannot write the success stamp {}: {e}", stamp.display());
        }
        self.remove();
    }

    /// The tombstone's content, if there is one (`Ok(None)`: no tombstone).
    pub(crate) fn read(&self) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Ok(Some(text.trim().to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The time (Unix seconds) of the last run that ended well, per the stamp (`Ok(None)`: no
    /// stamp); a stamp that does not start with a time is an `InvalidData` error.
    pub(crate) fn last_success(&self) -> std::io::Result<Option<f64>> {
        let text = match std::fs::read_to_string(self.success_path()) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        text.split_whitespace()
            .next()
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|t| t.is_finite())
            .map(Some)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no time in it"))
    }

    /// Removes it (a run ended well).
    pub(crate) fn remove(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove the tombstone {}: {e}", self.path.display()),
        }
    }
}
