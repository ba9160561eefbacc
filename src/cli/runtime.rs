//! The runtime every command runs on, and the way out of it: whatever the command's end
//! (success, error, or SIGTERM / SIGINT), its ZooKeeper sessions are closed on the server
//! before the process exits (see [`crate::zk::session`]).

use std::future::Future;

use super::Failure;
use crate::zk::session::close_all;

/// How a command treats SIGTERM and SIGINT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signals {
    /// The signal ends the command at once: its work is dropped, its sessions closed, and the
    /// process exits 143 (SIGTERM) or 130 (SIGINT).
    Cancel,
    /// The command handles the signals itself (the agent, a deploy pass: the step in progress
    /// finishes); its sessions are closed when it returns.
    Own,
}

/// A single-threaded tokio runtime that closes sessions on the way out.
pub(crate) struct Runtime {
    rt: tokio::runtime::Runtime,
    signals: Signals,
}

/// A runtime for a command.
pub(crate) fn build(signals: Signals) -> Result<Runtime, Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Failed(format!("cannot start the runtime: {e}")))?;
    Ok(Runtime { rt, signals })
}

impl Runtime {
    /// Runs `work`, then closes every ZooKeeper session it opened.
    pub(crate) fn block_on<T>(&self, work: impl Future<Output = T>) -> T {
        self.rt.block_on(async {
            let ended = match self.signals {
                Signals::Own => Ok(work.await),
                Signals::Cancel => until_signal(work).await,
            };
            // `work` is dropped here, and with it the clients it held.
            close_all().await;
            match ended {
                Ok(value) => value,
                Err(code) => {
                    crate::logsink::flush(super::LOG_FLUSH);
                    eprintln!("zkdeployment: stopped by a signal");
                    std::process::exit(code);
                }
            }
        })
    }
}

/// `Ok(output)`, or `Err(exit code)` if SIGTERM or SIGINT came first.
async fn until_signal<T>(work: impl Future<Output = T>) -> Result<T, i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Ok(work.await);
    };
    tokio::select! {
        value = work => Ok(value),
        _ = term.recv() => Err(143),
        _ = int.recv() => Err(130),
    }
}
