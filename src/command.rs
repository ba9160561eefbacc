//! Running external commands: an argument vector (never a shell), an environment and a working
//! directory per command; stdout and stderr merged, streamed to the log line by line as they
//! come, and the tail kept (bounded) for reports and mail.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command as TokioCommand;
use tokio::sync::mpsc;

/// Most bytes of output kept per command (the tail).
pub const TAIL_BYTES: usize = 16 * 1024;
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
    pub cwd: Option<PathBuf>,
}

impl Cmd {
    /// A command from an argument vector.
    pub fn new<I, S>(argv: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Cmd {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Cmd::default()
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Cmd {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Cmd {
        self.cwd = Some(dir.into());
        self
    }

    /// The command line as the original logs it: the argv joined by spaces.
    pub fn display(&self) -> String {
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
    pub fn success(&self) -> bool {
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

impl CommandError {
    /// The output of a failed command, if it ran.
    pub fn output(&self) -> Option<&Output> {
        match self {
            CommandError::Failed { output, .. } => Some(output),
            CommandError::Spawn { .. } => None,
        }
    }
}

/// Runs a command to completion; `Ok` whatever its exit code (see [`run_checked`]).
pub async fn run(cmd: &Cmd) -> Result<Output, CommandError> {
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
    let mut command = TokioCommand::new(&program);
    command
        .args(&cmd.argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    let started = Instant::now();
    let mut child = command.spawn().map_err(spawn_err)?;
    let (tx, mut rx) = mpsc::channel::<String>(64);
    let out = tokio::spawn(forward(child.stdout.take(), tx.clone()));
    let err = tokio::spawn(forward(child.stderr.take(), tx));
    let mut tail = Tail::default();
    while let Some(line) = rx.recv().await {
        crate::systemd::progress();
        tracing::info!(target: "output", "  {line}");
        tail.push(&line);
    }
    let _ = out.await;
    let _ = err.await;
    let status = child.wait().await.map_err(spawn_err)?;
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

/// Runs a command; a non-zero exit is `Command failed: <argv>`.
pub async fn run_checked(cmd: &Cmd) -> Result<Output, CommandError> {
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

async fn forward(stream: Option<impl AsyncRead + Unpin>, tx: mpsc::Sender<String>) {
    let Some(stream) = stream else { return };
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match read_line_bounded(&mut reader, &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\n', '\r'])
                    .to_string();
                if tx.send(line).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// Reads one line but keeps at most [`MAX_LINE`] bytes of it; returns bytes consumed.
async fn read_line_bounded<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(consumed);
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = MAX_LINE.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let n = chunk.len();
        reader.consume(n);
        consumed += n;
        if done {
            return Ok(consumed);
        }
    }
}

/// The last lines of output, bounded by [`TAIL_BYTES`].
#[derive(Debug, Default)]
pub struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
    dropped: bool,
}

impl Tail {
    /// Adds a line, dropping the oldest ones beyond the budget.
    pub fn push(&mut self, line: &str) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line.to_string());
        while self.bytes > TAIL_BYTES && self.lines.len() > 1 {
            let old = self.lines.pop_front().unwrap_or_default();
            self.bytes -= old.len() + 1;
            self.dropped = true;
        }
    }

    /// The kept lines, with a marker if earlier ones were dropped.
    pub fn text(&self) -> String {
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
