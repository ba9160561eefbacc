//! Running external commands: an argument vector (never a shell), an environment and a working
//! directory per command; stdout and stderr merged into a file without a name (in memory
//! where the kernel allows it), streamed to the log line by
//! line as they come, and the tail kept (bounded) for reports and mail. A command that writes
//! faster than that has its older unread output skipped (the log says how many bytes), so
//! neither memory nor the task that keeps the ZooKeeper session pays for it. A command is
//! done when its process exits, whatever it left running.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command as TokioCommand;

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

/// How often the output file is read while the command runs.
const POLL: Duration = Duration::from_millis(100);
/// Most bytes read per poll while the command runs: the reading and the logging run on the
/// task that also keeps the ZooKeeper session, which must get its turn between two polls.
const POLL_BYTES: u64 = 512 * 1024;
/// Output not yet read beyond which the older part is skipped (not logged), so that a
/// command printing faster than the log takes it costs neither memory nor the session.
const BACKLOG_BYTES: u64 = 4 * 1024 * 1024;
/// Output read since the last release before its memory is freed ([`release_read`]).
const RELEASE_BYTES: u64 = 1024 * 1024;
/// One read of the output file.
const CHUNK: usize = 64 * 1024;

/// Runs a command to completion; `Ok` whatever its exit code (see [`run_checked`]).
///
/// The command's stdout and stderr go to one file without a name (opened for appending; a
/// memory file, `output_file`), read here as it grows and freed as it is read, as the
/// original captured output to a temporary file. The command is finished
/// when its PROCESS exits, not when its output ends: a script that leaves a daemon behind
/// (`daemon & exit 0`, an init script that does not close stdout) ends the step at once. What
/// the file holds when the process has exited is the script's output; what a daemon writes
/// later goes to the file nobody reads, and never blocks it or the agent (it holds that
/// file, in memory, until it exits or closes its output, as it held the original's file in
/// `/tmp`).
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
    let (write, mut read) = output_file().map_err(|e| CommandError::Spawn {
        program: program.clone(),
        reason: format!("cannot create a file for its output: {e}"),
    })?;
    let mut command = TokioCommand::new(&program);
    command
        .args(&cmd.argv[1..])
        .stdin(Stdio::null())
        .stdout(write.try_clone().map_err(spawn_err)?)
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
    let started = Instant::now();
    let mut child = command.spawn().map_err(spawn_err)?;
    // `command` holds the parent's copies of the file descriptors: close them now.
    drop(command);
    let mut lines = Lines::default();
    let mut released = 0;
    let mut tail = Tail::default();
    let mut skipped = false;
    let mut emit = |line: String| {
        crate::systemd::progress();
        tracing::info!(target: "output", "  {line}");
        tail.push(&line);
    };
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(spawn_err)?,
            _ = tokio::time::sleep(POLL) => {
                skipped |= skip_backlog(&mut read, &mut lines);
                lines.read(&mut read, &mut emit, POLL_BYTES);
                released = release_read(&read, released, RELEASE_BYTES);
            }
        }
    };
    // Everything the process wrote before it exited, and no more: what a daemon it left
    // writes from now on is not read (nor waited for).
    skipped |= skip_backlog(&mut read, &mut lines);
    let written = {
        use std::io::Seek;
        let end = read.metadata().map(|m| m.len()).unwrap_or(0);
        end.saturating_sub(read.stream_position().unwrap_or(end))
    };
    lines.read(&mut read, &mut emit, written);
    lines.finish(&mut emit);
    // Output skipped unread is earlier output the tail does not hold either.
    tail.dropped |= skipped;
    // All of it freed: a process the command left that still holds the file (a daemon
    // writing to its inherited output) keeps only what it writes from now on.
    release_read(&read, 0, 1);
    drop(read);
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

/// Skips all but the last [`POLL_BYTES`] of the output not yet read when more than
/// [`BACKLOG_BYTES`] wait, says so in the log, and frees what was skipped.
fn skip_backlog(read: &mut std::fs::File, lines: &mut Lines) -> bool {
    use std::io::{Seek, SeekFrom};
    let (Ok(meta), Ok(at)) = (read.metadata(), read.stream_position()) else {
        return false;
    };
    let backlog = meta.len().saturating_sub(at);
    if backlog <= BACKLOG_BYTES {
        return false;
    }
    let skipped = backlog - POLL_BYTES;
    if read.seek(SeekFrom::Current(skipped as i64)).is_ok() {
        lines.partial.clear();
        tracing::warn!(
            "output: {skipped} bytes not logged (the command writes faster than the log takes)"
        );
        release_read(read, 0, 1);
        return true;
    }
    false
}

/// A file for a command's output, without a name: one handle to append to (the command's
/// stdout and stderr), one to read from (its own offset). A memory file (`memfd`) where the
/// kernel allows it: nothing is made and freed on disk for each command (on ext4 a file's
/// inode costs 0.1 ms and more, and far more while many were freed in the last 30 s, as when a
/// hundred agents share a machine), and what was read is released as the command runs
/// ([`release_read`]). Else an `O_TMPFILE` file in the temporary directory, else a file
/// created there and removed at once.
fn output_file() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(pair) = memory_file() {
        return Ok(pair);
    }
    let dir = std::env::temp_dir();
    let unnamed = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(nix::libc::O_TMPFILE)
        .mode(0o600)
        .open(&dir)
        .and_then(|write| {
            let read = reopen(&write)?;
            Ok((write, read))
        });
    if let Ok(pair) = unnamed {
        return Ok(pair);
    }
    let path = dir.join(format!(
        ".zkdeployment-output-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let write = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let read = std::fs::File::open(&path);
    let _ = std::fs::remove_file(&path);
    Ok((write, read?))
}

/// [`output_file`]'s memory file, if the kernel gives one (and `/proc` is there to open it a
/// second time). Sealed against execution where the kernel knows the flag (else it warns of
/// an executable memory file, or refuses it under `vm.memfd_noexec = 2`).
fn memory_file() -> Option<(std::fs::File, std::fs::File)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let name = c"zkdeployment-output";
    let sealed = MFdFlags::MFD_CLOEXEC | MFdFlags::from_bits_retain(nix::libc::MFD_NOEXEC_SEAL);
    let memory = memfd_create(name, sealed)
        .or_else(|_| memfd_create(name, MFdFlags::MFD_CLOEXEC))
        .ok()?;
    let write = std::fs::File::from(memory);
    let flags = OFlag::from_bits_retain(fcntl(&write, FcntlArg::F_GETFL).ok()?);
    fcntl(&write, FcntlArg::F_SETFL(flags | OFlag::O_APPEND)).ok()?;
    let read = reopen(&write).ok()?;
    Some((write, read))
}

/// A second open file (its own offset) of the unnamed file `write`, through `/proc`: the
/// reader, writable too, to free what was read ([`release_read`]).
fn reopen(write: &std::fs::File) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", write.as_raw_fd()))
}

/// Frees the memory (or disk) of the output already read, once at least `at_least` more bytes
/// were read since `released` (the offset freed up to): a command that writes gigabytes holds
/// about what it wrote since the last poll. Gives the new offset freed up to (unchanged when
/// the file cannot punch holes: the named fallback file's reader is read-only).
fn release_read(read: &std::fs::File, released: u64, at_least: u64) -> u64 {
    use nix::fcntl::{fallocate, FallocateFlags};
    use std::io::Seek;
    let Ok(offset) = (&*read).stream_position() else {
        return released;
    };
    if offset < released + at_least {
        return released;
    }
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    match fallocate(read, flags, 0, offset as i64) {
        Ok(()) => offset,
        Err(_) => released,
    }
}

/// Splits output into lines as it is read, keeping at most [`MAX_LINE`] bytes of each.
#[derive(Debug, Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// Reads what the file holds now, at most `limit` bytes, and emits complete lines. The
    /// buffer is sized to what is there (most commands write a few lines, or nothing by a
    /// poll: a 64 KiB buffer zeroed for each read cost the agent page faults at every pass).
    fn read(&mut self, file: &mut std::fs::File, emit: &mut impl FnMut(String), limit: u64) {
        use std::io::{Read, Seek};
        let there = file
            .metadata()
            .ok()
            .zip(file.stream_position().ok())
            .map_or(limit, |(meta, at)| meta.len().saturating_sub(at));
        let mut left = limit.min(there);
        if left == 0 {
            return;
        }
        let mut buf = vec![0u8; usize::try_from(left).unwrap_or(CHUNK).min(CHUNK)];
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            let n = match file.read(&mut buf[..want]) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            left -= n as u64;
            for chunk in buf[..n].split_inclusive(|b| *b == b'\n') {
                let room = MAX_LINE.saturating_sub(self.partial.len());
                let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
                self.partial
                    .extend_from_slice(&body[..body.len().min(room)]);
                if chunk.ends_with(b"\n") {
                    emit(take_line(&mut self.partial));
                }
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

#[cfg(test)]
mod tests {
    use super::{output_file, release_read};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    #[test]
    fn the_output_file_has_no_name_and_two_offsets() {
        let (mut write, mut read) = output_file().unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", write.as_raw_fd())).unwrap();
        assert!(
            link.to_string_lossy().ends_with(" (deleted)"),
            "the output file has a name: {}",
            link.display()
        );
        // In memory: nothing made on disk.
        assert!(link.to_string_lossy().starts_with("/memfd:"), "{link:?}");
        write.write_all(b"one\n").unwrap();
        let mut got = String::new();
        read.read_to_string(&mut got).unwrap();
        assert_eq!(got, "one\n");
        write.write_all(b"two\n").unwrap();
        got.clear();
        read.read_to_string(&mut got).unwrap();
        assert_eq!(got, "two\n", "the reader keeps its own offset");
    }

    #[test]
    fn output_already_read_is_freed_as_the_command_runs() {
        use std::os::unix::fs::MetadataExt;
        let (mut write, mut read) = output_file().unwrap();
        let mib = 1024 * 1024;
        for i in 0..3u8 {
            write.write_all(&vec![b'a' + i; mib]).unwrap();
        }
        let blocks = |f: &std::fs::File| f.metadata().unwrap().blocks();
        let full = blocks(&read);
        assert!(full >= 3 * 2048, "{full} blocks for 3 MiB");
        // Less than a mebibyte read: nothing freed yet.
        let mut got = vec![0; mib / 2];
        read.read_exact(&mut got).unwrap();
        assert_eq!(release_read(&read, 0, super::RELEASE_BYTES), 0);
        assert_eq!(blocks(&read), full);
        let mut got = vec![0; 2 * mib];
        read.read_exact(&mut got).unwrap();
        let freed = release_read(&read, 0, super::RELEASE_BYTES);
        assert_eq!(freed, (2 * mib + mib / 2) as u64);
        assert!(
            blocks(&read) <= full / 3 + 8,
            "{} of {full} blocks still held",
            blocks(&read)
        );
        // What was not read yet is intact, and the command's writes go on at the end.
        write.write_all(b"end").unwrap();
        let mut rest = Vec::new();
        read.read_to_end(&mut rest).unwrap();
        assert_eq!(rest.len(), mib / 2 + 3);
        assert!(rest[..mib / 2].iter().all(|b| *b == b'c'));
        assert!(rest.ends_with(b"end"));
        assert_eq!(
            release_read(&read, freed, super::RELEASE_BYTES),
            freed,
            "freed again below the threshold"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_daemon_left_holding_the_output_keeps_none_of_what_was_read() {
        use std::os::unix::fs::MetadataExt;
        // 3 MB of output, and a process left behind with the output as its stdout.
        let cmd = super::Cmd::new([
            "sh",
            "-c",
            "sleep 30 & echo $!; head -c 3000000 /dev/zero | tr '\\0' x; echo",
        ]);
        let output = super::run(&cmd).await.unwrap();
        let pid: i32 = output.tail.lines().next().unwrap().trim().parse().unwrap();
        let held = std::fs::metadata(format!("/proc/{pid}/fd/1")).map(|m| m.blocks());
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let held = held.unwrap();
        assert!(
            held <= 64,
            "the daemon's output holds {held} blocks of 512 bytes"
        );
    }
}
