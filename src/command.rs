//! Running external commands: an argument vector (never a shell), an environment and a working
//! directory per command; stdout and stderr merged into one pipe read on a thread of its own,
//! streamed to the log (never blocking) line by line as they come, and the tail kept (bounded)
//! for reports and mail. A command is done when its process exits, whatever it left running.
//!
//! The fleet simulator (`benches/fleet_sim`) runs thousands of agents in one process: inside
//! [`simulated`], a task's commands go to a [`Simulator`] instead of processes (yum and the
//! deploy and health scripts become simulated durations); nothing else of the agent changes.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command as TokioCommand;

/// Most bytes of output kept per command (the tail).
pub(crate) const TAIL_BYTES: usize = 16 * 1024;
/// Longest line kept; longer lines are cut (the rest is dropped, memory stays bounded).
const MAX_LINE: usize = 4096;

/// A command to run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cmd {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory (the agent's own if `None`).
    pub(crate) cwd: Option<PathBuf>,
}

impl Cmd {
    /// A command from an argument vector.
    pub(crate) fn new<I, S>(argv: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Cmd::default()
        }
    }

    /// Sets the working directory.
    pub(crate) fn cwd(mut self, dir: impl Into<PathBuf>) -> Cmd {
        self.cwd = Some(dir.into());
        self
    }

    /// The command line as the original logs it: the argv joined by spaces.
    pub(crate) fn display(&self) -> String {
        self.argv.join(" ")
    }
}

/// What a finished command did.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// Exit code (128 + signal number if killed by a signal).
    pub code: i32,
    /// The last [`TAIL_BYTES`] of merged stdout and stderr.
    pub tail: String,
    /// Wall time.
    pub duration: Duration,
}

impl Output {
    /// True on exit code 0.
    pub(crate) fn success(&self) -> bool {
        self.code == 0
    }
}

/// A command that could not be run or that failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CommandError {
    /// The program could not be started.
    #[error("{program}: {reason}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        reason: String,
    },
    /// It ran and exited non-zero (the original's message).
    #[error("Command failed: {command}")]
    Failed {
        /// The argv joined by spaces.
        command: String,
        /// What it did.
        output: Output,
    },
}

/// How long output is still read after the command's process exited (what it wrote just
/// before exiting, still in the pipe). A process it left behind that holds the pipe gets no
/// more reading than that: the pipe is closed and its next write fails.
const DRAIN: Duration = Duration::from_millis(500);
/// One read of the pipe.
const CHUNK: usize = 64 * 1024;
/// How often the reader looks at whether it must stop, while the pipe is quiet.
const WAKE_MS: i32 = 50;

/// What runs a task's commands instead of processes (the fleet simulator's virtual hosts).
pub trait Simulator: Send + Sync {
    /// The command's outcome, after as long as it takes.
    fn run<'a>(
        &'a self,
        cmd: &'a Cmd,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Output> + Send + 'a>>;
}

tokio::task_local! {
    static SIMULATOR: std::sync::Arc<dyn Simulator>;
}

/// Runs `task` with every command it runs (on its own task) going to `simulator`.
pub async fn simulated<F: std::future::Future>(
    simulator: std::sync::Arc<dyn Simulator>,
    task: F,
) -> F::Output {
    SIMULATOR.scope(simulator, task).await
}

/// True on a task inside [`simulated`] (one of many agents sharing the process).
pub(crate) fn is_simulated() -> bool {
    SIMULATOR.try_with(|_| ()).is_ok()
}

/// Runs a command to completion; `Ok` whatever its exit code (see [`run_checked`]).
///
/// The command's stdout and stderr are one pipe, read on a thread of its own
/// ([`read_output`]): each line goes to the log (through the log's bounded queue, never
/// blocking) and to a bounded tail for the report and the mail; nothing else is kept. The
/// command is finished when its PROCESS exits, not when its output ends: a script that leaves
/// a daemon behind (`daemon & exit 0`) ends the step at once; what is in the pipe is read for
/// at most [`DRAIN`] more, then the pipe is closed (the daemon's later writes fail with EPIPE
/// and nothing of them is kept anywhere).
pub(crate) async fn run(cmd: &Cmd) -> Result<Output, CommandError> {
    let program = cmd.argv.first().cloned().unwrap_or_default();
    let spawn_err = |e: std::io::Error| CommandError::Spawn {
        program: program.clone(),
        reason: e.to_string(),
    };
    if program.is_empty() {
        return Err(spawn_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        )));
    }
    tracing::info!("{}", cmd.display());
    if let Ok(simulator) = SIMULATOR.try_with(std::sync::Arc::clone) {
        return Ok(simulator.run(cmd).await);
    }
    let (read, write) = output_pipe().map_err(|e| CommandError::Spawn {
        program: program.clone(),
        reason: format!("cannot create a pipe for its output: {e}"),
    })?;
    let mut command = command_for(cmd, write).map_err(spawn_err)?;
    let started = Instant::now();
    let spawned = command.spawn();
    // `command` holds the parent's copies of the write end: close them now (else the
    // reader never sees the end of the output).
    drop(command);
    let mut child = spawned.map_err(spawn_err)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done, tail) = tokio::sync::oneshot::channel();
    let stop_reader = stop.clone();
    std::thread::Builder::new()
        .name("output".into())
        .spawn(move || {
            let _ = done.send(read_output(read, &stop_reader));
        })
        .map_err(spawn_err)?;
    let status = child.wait().await.map_err(spawn_err)?;
    // What the process wrote before it exited is in the pipe: read it, for a bounded time.
    let mut tail = tail;
    let tail = match tokio::time::timeout(DRAIN, &mut tail).await {
        Ok(tail) => tail.unwrap_or_default(),
        Err(_) => {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            tail.await.unwrap_or_default()
        }
    };
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    Ok(Output {
        code,
        tail: tail.text(),
        duration: started.elapsed(),
    })
}

/// The process to start for `cmd`: its output (stdout and stderr) to `write`, no stdin,
/// without systemd's notify variables, killed when dropped, SIGHUP ignored.
fn command_for(cmd: &Cmd, write: std::fs::File) -> std::io::Result<TokioCommand> {
    let mut command = TokioCommand::new(&cmd.argv[0]);
    command
        .args(&cmd.argv[1..])
        .stdin(Stdio::null())
        .stdout(write.try_clone()?)
        .stderr(write);
    // systemd's notify socket belongs to the agent alone.
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        command.env_remove(var);
    }
    for (k, v) in &cmd.env {
        command.env(k, v);
    }
    if let Some(dir) = &cmd.cwd {
        command.current_dir(dir);
    }
    command.kill_on_drop(true);
    // A hang-up of the terminal a pass was started from must not kill its step: the command
    // starts with SIGHUP ignored, as under nohup (a program that wants it installs a handler).
    // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGHUP,
                nix::sys::signal::SigHandler::SigIgn,
            )
            .map(|_| ())
            .map_err(std::io::Error::from)
        });
    }
    Ok(command)
}

/// A pipe for a command's output: the read end (non-blocking, ours) and the write end (the
/// command's stdout and stderr), both closed on exec.
fn output_pipe() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use nix::fcntl::OFlag;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let read = std::fs::File::from(read);
    let flags = OFlag::from_bits_retain(nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_GETFL)?);
    nix::fcntl::fcntl(
        &read,
        nix::fcntl::FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK),
    )?;
    Ok((read, std::fs::File::from(write)))
}

/// Reads the command's output until its end, or until `stop` is set and the pipe is empty
/// (a process the command left holds it open): each line to the log and to the tail, which
/// is all that is kept. The read end is closed when this returns.
fn read_output(mut pipe: std::fs::File, stop: &std::sync::atomic::AtomicBool) -> Tail {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut tail = Tail::default();
    let mut emit = |line: String| {
        crate::systemd::progress();
        tracing::info!(target: "output", "  {line}");
        tail.push(&line);
    };
    let mut lines = Lines::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                lines.feed(&buf[..n], &mut emit);
                // A daemon writing for ever after the command exited: stop all the same.
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut fd = nix::libc::pollfd {
                    fd: pipe.as_raw_fd(),
                    events: nix::libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { nix::libc::poll(&mut fd, 1, WAKE_MS) };
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    lines.finish(&mut emit);
    tail
}

/// Splits output into lines as it is read, keeping at most [`MAX_LINE`] bytes of each.
#[derive(Debug, Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// Emits the complete lines of `bytes` (and of what was left from before).
    fn feed(&mut self, bytes: &[u8], emit: &mut impl FnMut(String)) {
        for chunk in bytes.split_inclusive(|b| *b == b'\n') {
            let room = MAX_LINE.saturating_sub(self.partial.len());
            let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
            self.partial
                .extend_from_slice(&body[..body.len().min(room)]);
            if chunk.ends_with(b"\n") {
                emit(take_line(&mut self.partial));
            }
        }
    }

    /// Emits a last line without a newline, if any.
    fn finish(&mut self, emit: &mut impl FnMut(String)) {
        if !self.partial.is_empty() {
            emit(take_line(&mut self.partial));
        }
    }
}

fn take_line(buf: &mut Vec<u8>) -> String {
    let line = String::from_utf8_lossy(buf)
        .trim_end_matches(['\n', '\r'])
        .to_string();
    buf.clear();
    line
}

/// True if `pid` is a live process on this machine.
pub(crate) fn pid_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(_) => true,
    }
}

/// Runs a command; a non-zero exit is `Command failed: <argv>`.
pub(crate) async fn run_checked(cmd: &Cmd) -> Result<Output, CommandError> {
    let output = run(cmd).await?;
    if output.success() {
        Ok(output)
    } else {
        tracing::error!("FAILURE");
        Err(CommandError::Failed {
            command: cmd.display(),
            output,
        })
    }
}

/// The last lines of output, bounded by [`TAIL_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    dropped: bool,
}

impl Tail {
    /// Adds a line, dropping the oldest ones beyond the budget.
    pub(crate) fn push(&mut self, line: &str) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line.to_string());
        while self.bytes > TAIL_BYTES && self.lines.len() > 1 {
            let old = self.lines.pop_front().unwrap_or_default();
            self.bytes -= old.len() + 1;
            self.dropped = true;
        }
    }

    /// The kept lines, with a marker if earlier ones were dropped.
    pub(crate) fn text(&self) -> String {
        let mut text = String::new();
        if self.dropped {
            text.push_str("[… earlier output dropped …]\n");
        }
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "current_thread")]
    async fn a_daemon_left_writing_for_ever_ends_nothing_and_keeps_nothing() {
        // A process left behind with the output pipe as its stdout, writing without end.
        let pidfile = std::env::temp_dir().join(format!("zkd-daemon-{}", uuid::Uuid::new_v4()));
        let script = format!(
            "(yes daemon-output) & echo $! > {}; echo last",
            pidfile.display()
        );
        let cmd = super::Cmd::new(["sh", "-c", &script]);
        let output = tokio::time::timeout(std::time::Duration::from_secs(20), super::run(&cmd))
            .await
            .expect("the step ends when the script exits")
            .unwrap();
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _ = std::fs::remove_file(&pidfile);
        assert!(output.tail.len() <= super::TAIL_BYTES + 64);
        // Our end is closed: the daemon's next write fails (SIGPIPE), nothing is held for it.
        let gone = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            nix::sys::wait::waitpid(
                nix::unistd::Pid::from_raw(pid),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            )
            .is_ok_and(|s| s != nix::sys::wait::WaitStatus::StillAlive)
                || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
        });
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        assert!(gone, "the daemon still writes to a pipe someone reads");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn output_written_before_exit_is_all_read() {
        let cmd = super::Cmd::new(["sh", "-c", "seq 1 3; printf tail"]);
        let output = super::run(&cmd).await.unwrap();
        assert_eq!(output.tail, "1\n2\n3\ntail\n");
    }
}
