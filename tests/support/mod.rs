//! Shared helpers for the integration tests. The test binary (`tests/it/main.rs`) includes them as `mod support`.
//!
//! ZooKeeper:
//! - [`zk_address`]: the server the tests use. `ZKD_TEST_ZK` (`host:port`, set by
//!   `scripts/test.sh`) if set, else one throw-away server started lazily for the whole test
//!   binary (under nextest, where each test is its own process, that is one per test).
//! - [`chroot`]: a fresh, empty, uniquely named node on that server, returned as a connection
//!   string with a chroot (`127.0.0.1:PORT/t-<label>-<uuid>`). Give each test its own.
//! - [`connect`]: a `zookeeper_client::Client` for a connection string (10 s session).
//! - [`ZkServer`]: a server owned by one test, for tests that stop, kill or restart it.
//!
//! The binary under test: [`bin`], and [`run`] / [`run_with`] (blocking) or
//! their `_async` twins (use those from async tests that hold a ZooKeeper session meanwhile:
//! a blocking call stalls a current-thread runtime and with it the session's pings).
//!
//! Servers are spawned from one dedicated thread that never exits, with
//! `PR_SET_PDEATHSIG = SIGKILL`: the JVM dies with the test process even when that is killed
//! (PDEATHSIG fires when the *spawning thread* exits, so spawning from a test's own thread
//! would kill the server as soon as that test's thread ends). [`ZkServer`]'s `Drop` kills it
//! too; the per-binary server, kept in a static that is never dropped, is killed and its
//! directory removed by an `atexit` handler.
//!
//! Needs Java and the Debian package `zookeeper` (`scripts/test.sh` installs them);
//! `ZK_JAR` and `ZK_JAVA` override the jar and the java command.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill as send_signal, Signal};
use nix::unistd::Pid;

/// The environment variable naming a running server to use instead of starting one.
pub const TEST_ZK_ENV: &str = "ZKD_TEST_ZK";
/// ZooKeeper's tickTime for test servers: sessions may be as short as 2 ticks (1 s).
pub const TICK_MS: u32 = 500;
/// The session timeout of [`connect`].
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`run`] and friends let the binary run before killing it.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 5;

// ---------------------------------------------------------------------------------------------
// Spawning from a thread that lives as long as the process.

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// Spawns `cmd` from the dedicated spawner thread, with PDEATHSIG = SIGKILL.
pub fn spawn_with_pdeathsig(mut cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("zk-test-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: `SPAWNER` keeps the sender alive.
                while let Ok((mut cmd, reply)) = rx.recv() {
                    let _ = reply.send(cmd.spawn());
                }
                // Unreachable in practice; park rather than exit (exiting would fire the
                // children's PDEATHSIG).
                loop {
                    std::thread::park();
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    });
    // SAFETY: prctl(2) is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .expect("the spawner thread is gone");
    reply_rx.recv().expect("the spawner thread did not answer")
}

// ---------------------------------------------------------------------------------------------
// A throw-away ZooKeeper server.

/// A standalone ZooKeeper 3.8 on 127.0.0.1, with its own data directory. Killed on drop.
pub struct ZkServer {
    /// The client port on 127.0.0.1 (kept across [`ZkServer::restart`]).
    pub port: u16,
    /// Holds `zoo.cfg`, `data/` and `zk.log`; removed on drop.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl ZkServer {
    /// Starts a server on a free port and waits until it answers `ruok` with `imok`.
    /// Panics with the server's log if it cannot start.
    pub fn start() -> ZkServer {
        let dir = tempfile::Builder::new()
            .prefix("zkd-test-zk-")
            .tempdir()
            .expect("cannot create a temporary directory for ZooKeeper");
        std::fs::create_dir_all(dir.path().join("data")).expect("cannot create dataDir");
        let mut server = ZkServer {
            port: 0,
            dir,
            child: None,
        };
        server.launch(None);
        server
    }

    /// `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The JVM's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the JVM has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Graceful stop: SIGTERM, then SIGKILL after 10 s. No-op if not running.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = Pid::from_raw(child.id() as i32);
            let _ = send_signal(pid, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => return,
                    Ok(None) if Instant::now() >= deadline => break,
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Crash: SIGKILL, and wait for the process to be gone. No-op if not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same dataDir (stops it first if it
    /// still runs), and waits until it serves. Persistent nodes survive; sessions survive too
    /// if the clients reconnect within their timeout.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.port;
        self.launch(Some(port));
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("zk.log")
    }

    /// Spawns the JVM (on `fixed_port`, or on a free port retried on a bind race) and waits
    /// until it is ready.
    fn launch(&mut self, fixed_port: Option<u16>) {
        let mut last_failure = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = fixed_port.unwrap_or_else(free_port);
            self.port = port;
            let log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.log_path())
                .expect("cannot open zk.log");
            let dir = self.dir.path().display().to_string();
            let mut cmd = zk_server_command(&[
                "--exec",
                "--port",
                &port.to_string(),
                "--dir",
                &dir,
                "--tick",
                &TICK_MS.to_string(),
            ]);
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone().expect("cannot clone the zk.log handle"))
                .stderr(log);
            let mut child = spawn_with_pdeathsig(cmd).unwrap_or_else(|e| {
                panic!("cannot run {ZK_SERVER_SCRIPT} to start ZooKeeper: {e}")
            });
            let log_start = self.log().len();
            match wait_ready(&mut child, port) {
                Ok(()) => {
                    self.child = Some(child);
                    return;
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = self.log();
                    let this_run = log.get(log_start..).unwrap_or(&log);
                    last_failure = format!(
                        "attempt {attempt} on port {port}: {why}\n--- zk.log ---\n{}",
                        tail(this_run, 40)
                    );
                    if this_run.contains("BindException") {
                        // Another process took the port between our probe and the JVM's bind;
                        // a fixed port may still be held by a server that is shutting down.
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    break;
                }
            }
        }
        panic!("ZooKeeper did not start: {last_failure}");
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The one ZooKeeper launcher, shared with the scripts and the demo.
pub const ZK_SERVER_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/zk-server.sh");

/// `scripts/zk-server.sh ARGS` (its `--exec` modes replace the script by the server's JVM, so
/// the child is the server itself). It checks that Java and ZooKeeper are installed
/// (`ZK_JAR` and `ZK_JAVA` override the jar and the java command), and its message says how
/// to install them.
pub fn zk_server_command(args: &[&str]) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(ZK_SERVER_SCRIPT).args(args);
    cmd
}

/// A port that was free a moment ago (the kernel's choice for 127.0.0.1:0).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind 127.0.0.1:0 to find a free port")
}

/// The server's answer to a four-letter command, or "" if there is none.
pub fn four_letter(port: u16, word: &str) -> String {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream.write_all(word.as_bytes()).is_err() {
        return String::new();
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// The server's count of requests received (`mntr` `zk_packets_received`).
#[allow(dead_code)] // not every test binary counts requests
pub fn packets_received(port: u16) -> i64 {
    let mntr = four_letter(port, "mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_packets_received in mntr:\n{mntr}"))
}

/// The requests the server has received from session `sid` so far (its connection's
/// `recved` in `cons`), or `None` when `cons` does not list it.
#[allow(dead_code)] // not every test binary counts requests
pub fn session_received(port: u16, sid: i64) -> Option<i64> {
    let cons = four_letter(port, "cons");
    let sid = format!("sid=0x{sid:x},");
    let line = cons.lines().find(|l| l.contains(&sid))?;
    line.split(['(', ','])
        .find_map(|f| f.strip_prefix("recved="))
        .and_then(|n| n.parse().ok())
}

fn wait_ready(child: &mut Child, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(format!("the JVM exited during startup ({status})")),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot poll the JVM: {e}")),
        }
        if four_letter(port, "ruok") == "imok" && four_letter(port, "srvr").contains("Mode: ") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("not ready after {READY_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// The server shared by the tests of one binary, and per-test chroots on it.

static SHARED: OnceLock<ZkServer> = OnceLock::new();

extern "C" fn kill_shared_server() {
    if let Some(server) = SHARED.get() {
        if let Some(pid) = server.pid() {
            let pid = Pid::from_raw(pid as i32);
            let _ = send_signal(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
        }
        let _ = std::fs::remove_dir_all(server.dir.path());
    }
}

/// The ZooKeeper the tests use: `$ZKD_TEST_ZK` if set (e.g. by `scripts/test.sh`), else a
/// server started on first use and shared by every test of this binary.
pub fn zk_address() -> String {
    if let Ok(address) = std::env::var(TEST_ZK_ENV) {
        let address = address.trim();
        if !address.is_empty() {
            return address.to_string();
        }
    }
    SHARED
        .get_or_init(|| {
            let server = ZkServer::start();
            // SAFETY: registering a plain `extern "C" fn` with atexit(3).
            unsafe {
                nix::libc::atexit(kill_shared_server);
            }
            server
        })
        .connect_string()
}

/// The process id of the server [`zk_address`] started, if it started one.
#[allow(dead_code)] // for the rollout bench (the server's CPU)
pub fn shared_server_pid() -> Option<u32> {
    SHARED.get().and_then(ZkServer::pid)
}

/// Creates an empty node `/t-<label>-<uuid>` (open ACL) on [`zk_address`] and returns the
/// connection string rooted there: `ADDRESS/t-<label>-<uuid>`. Characters of `label` other
/// than ASCII letters, digits, `-` and `_` become `_`.
pub async fn chroot(label: &str) -> String {
    let address = match tokio::task::spawn_blocking(zk_address).await {
        Ok(address) => address,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("zk_address() failed: {e}"),
    };
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let node = format!("/t-{label}-{}", uuid::Uuid::new_v4().simple());
    let client = connect(&address).await;
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client
        .create(&node, b"", &open)
        .await
        .unwrap_or_else(|e| panic!("cannot create the test chroot {node} on {address}: {e}"));
    format!("{address}{node}")
}

/// Splits a connection string into its hosts and its chroot path (`"/"` if none).
pub fn split_chroot(conn: &str) -> (&str, &str) {
    match conn.find('/') {
        Some(i) => (&conn[..i], &conn[i..]),
        None => (conn, "/"),
    }
}

/// Connects with a 10 s session timeout; panics with a clear message on failure.
pub async fn connect(conn: &str) -> zookeeper_client::Client {
    let connecting = zookeeper_client::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .connect(conn);
    match tokio::time::timeout(SESSION_TIMEOUT * 3, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("cannot connect to ZooKeeper at {conn}: {e}"),
        Err(_) => panic!(
            "cannot connect to ZooKeeper at {conn}: no session after {:?}",
            SESSION_TIMEOUT * 3
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Running the binary under test.

/// The `zkdeployment` binary built for this test run.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_zkdeployment"))
}

/// What a finished command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The exit code; 128 + N if killed by signal N (as a shell reports it).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from_output(output: std::process::Output) -> Run {
        Run {
            code: exit_code(output.status),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Panics, showing stdout and stderr, unless the exit code is `code`.
    #[track_caller]
    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "unexpected exit code\n{self}");
        self
    }

    /// Panics, showing stdout and stderr, unless the command exited 0.
    #[track_caller]
    pub fn assert_ok(&self) -> &Run {
        self.assert_code(0)
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Runs the binary with `args`, stdin empty.
pub fn run(args: &[&str]) -> Run {
    run_with(args, None, &[])
}

/// Runs the binary with `args`, optional `stdin` and extra environment variables.
/// `ZC_ZK_CONNECTION_STRING` is removed from the inherited environment (pass it in `envs`).
pub fn run_with(args: &[&str], stdin: Option<&str>, envs: &[(&str, &str)]) -> Run {
    run_program(bin(), args, stdin, envs)
}

/// Runs any program like [`run_with`] does: blocking, killed after [`RUN_TIMEOUT`].
pub fn run_program(
    program: impl AsRef<OsStr>,
    args: &[&str],
    stdin: Option<&str>,
    envs: &[(&str, &str)],
) -> Run {
    let program = program.as_ref().to_owned();
    let mut cmd = Command::new(&program);
    cmd.args(args)
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .envs(envs.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e}"));
    let pid = Pid::from_raw(child.id() as i32);
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let text = text.to_owned();
        std::thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(RUN_TIMEOUT) {
        Ok(output) => output,
        Err(_) => {
            let _ = send_signal(pid, Signal::SIGKILL);
            panic!("{program:?} {args:?} still running after {RUN_TIMEOUT:?}: killed");
        }
    };
    Run::from_output(output.unwrap_or_else(|e| panic!("cannot wait for {program:?}: {e}")))
}

/// [`run`] for async tests.
pub async fn run_async(args: &[&str]) -> Run {
    run_with_async(args, None, &[]).await
}

/// Runs the binary with `args`, feeding `stdin` (async).
pub async fn run_stdin_async(args: &[&str], stdin: &str) -> Run {
    run_with_async(args, Some(stdin), &[]).await
}

/// [`run_with`] for async tests (tokio::process; the child is killed if the future is dropped).
pub async fn run_with_async(args: &[&str], stdin: Option<&str>, envs: &[(&str, &str)]) -> Run {
    let program = bin();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(args)
        .env_remove("ZC_ZK_CONNECTION_STRING")
        .envs(envs.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e}"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let text = text.to_owned();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = pipe.write_all(text.as_bytes()).await;
        });
    }
    match tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(output)) => Run::from_output(output),
        Ok(Err(e)) => panic!("cannot wait for {program:?}: {e}"),
        Err(_) => panic!("{program:?} {args:?} still running after {RUN_TIMEOUT:?}: killed"),
    }
}

/// Reads a whole file (helper for assertions).
pub fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    let mut text = String::new();
    File::open(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text
}
pub mod agent;
pub mod ensemble;
pub mod git;
pub mod proxy;
pub mod rpm;
pub mod smtp;

/// A tool a test needs is missing: the test fails when `CI` is set (CI must run the real
/// thing); elsewhere it prints why it is skipped, and the caller returns.
pub fn missing_tool(why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("CI is set but {why}");
    }
    eprintln!("SKIPPED: {why}");
}
pub mod tls;
