//! A host for agent tests: a ZooKeeper chroot, a filesystem root, a run directory, a config
//! file, and a package manager (the yum 3 fake, or the real dnf sandbox).
//!
//! Also: the agent as a background process ([`TestHost::spawn`], [`Spawned`]), waiting on
//! files and ZooKeeper by polling ([`wait_for`], [`wait_for_async`],
//! [`TestHost::wait_status`]), and snapshots for "nothing changed" checks ([`dir_snapshot`],
//! [`TestHost::zk_stats`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use zkdeployment::tree::parse::parse;
use zkdeployment::zk::import::{import_tree, Trim};
use zkdeployment::zk::{decode, Client};

use super::rpm::{FakeYum, Sandbox};
use super::Run;

/// The package manager of a test host.
pub enum Pm {
    /// The yum 3 fake.
    Fake(FakeYum),
    /// Real dnf in an installroot.
    Dnf(Sandbox),
}

/// One test host (several may share a chroot).
pub struct TestHost {
    /// Connection string (with the test's chroot).
    pub conn: String,
    /// A client on that chroot.
    pub client: Client,
    /// Host id.
    pub id: String,
    /// Host name.
    pub name: String,
    /// Role, if any.
    pub role: Option<String>,
    /// Scratch directory (run directory, config, logs).
    pub dir: tempfile::TempDir,
    /// The package manager.
    pub pm: Pm,
    /// Extra config lines.
    pub extra: String,
}

impl TestHost {
    /// A host with the fake yum on a fresh chroot.
    pub async fn fake(label: &str) -> TestHost {
        let conn = super::chroot(label).await;
        TestHost::on(&conn, "h1", Pm::Fake(FakeYum::new())).await
    }

    /// A host on an existing chroot.
    pub async fn on(conn: &str, id: &str, pm: Pm) -> TestHost {
        let client = super::connect(conn).await;
        let dir = tempfile::tempdir().unwrap();
        TestHost {
            conn: conn.to_string(),
            client,
            id: id.to_string(),
            name: format!("{id}.example.com"),
            role: None,
            dir,
            pm,
            extra: String::new(),
        }
    }

    /// The filesystem root the agent works in.
    pub fn root(&self) -> PathBuf {
        match &self.pm {
            Pm::Fake(f) => f.fs(),
            Pm::Dnf(s) => s.root(),
        }
    }

    /// The yum command.
    pub fn yum(&self) -> String {
        match &self.pm {
            Pm::Fake(f) => f.yum_path(),
            Pm::Dnf(s) => s.yum_path(),
        }
    }

    /// The run directory.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// Writes the config file and returns its path.
    pub fn config(&self) -> PathBuf {
        let path = self.dir.path().join("agent.cfg");
        let mut text = format!(
            "[zkdeployment]\nhost-id = {}\nhost-name = {}\nrun-directory = {}\nroot = {}\nyum = {}\nzookeeper = {}\n",
            self.id,
            self.name,
            self.run_dir().display(),
            self.root().display(),
            self.yum(),
            self.conn
        );
        if let Some(role) = &self.role {
            text.push_str(&format!("role = {role}\n"));
        }
        text.push_str(&self.extra);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Imports tree text at `/` (trimmed) and sets the cluster version.
    pub async fn tree(&self, text: &str, version: Value) {
        let root = parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        import_tree(&self.client, &root, "/", Trim::Yes, false)
            .await
            .unwrap();
        self.set_version(version).await;
    }

    /// Sets `/hosts` `version` (creating `/hosts`), keeping its other properties.
    pub async fn set_version(&self, version: Value) {
        let mut props = match self.client.get_data("/hosts").await {
            Ok((data, _)) => decode(&data),
            Err(_) => {
                let open = zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all());
                self.client.create("/hosts", b"{}", &open).await.unwrap();
                Default::default()
            }
        };
        props.insert("version".into(), version);
        self.client
            .set_data("/hosts", &serde_json::to_vec(&props).unwrap(), None)
            .await
            .unwrap();
    }

    /// `/hosts` properties.
    pub async fn hosts(&self) -> serde_json::Map<String, Value> {
        let (data, _) = self.client.get_data("/hosts").await.unwrap();
        decode(&data)
    }

    /// Runs `zkdeployment deploy CONFIG ARGS` with extra environment.
    pub async fn deploy_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let config = self.config();
        let mut all = vec!["deploy", config.to_str().unwrap()];
        all.extend_from_slice(args);
        super::run_with_async(&all, None, env).await
    }

    /// Runs `zkdeployment deploy CONFIG ARGS`.
    pub async fn deploy(&self, args: &[&str]) -> Run {
        self.deploy_env(args, &[]).await
    }

    /// The status file's text.
    pub fn status(&self) -> String {
        std::fs::read_to_string(self.run_dir().join("status")).unwrap_or_default()
    }

    /// The status text (4th field).
    pub fn status_text(&self) -> String {
        self.status()
            .splitn(4, ' ')
            .nth(3)
            .unwrap_or("")
            .to_string()
    }

    /// The last pass report.
    pub fn report(&self) -> Value {
        let text = std::fs::read_to_string(self.run_dir().join("last-pass.json"))
            .unwrap_or_else(|_| "null".into());
        serde_json::from_str(&text).unwrap()
    }

    /// Lines of `opt/<rpm>/deploy.log` (the test payload's log).
    pub fn deploy_log(&self, rpm: &str) -> Vec<String> {
        std::fs::read_to_string(self.root().join("opt").join(rpm).join("deploy.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Files under `ROOT/etc/<app>`, sorted.
    pub fn etc(&self, app: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.root().join("etc").join(app))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// True if `ROOT/<rel>` exists.
    pub fn exists(&self, rel: &str) -> bool {
        self.root().join(rel.trim_start_matches('/')).exists()
    }

    /// The host node's properties (None if not registered).
    pub async fn host_node(&self) -> Option<serde_json::Map<String, Value>> {
        let (data, _) = self
            .client
            .get_data(&format!("/hosts/{}", self.id))
            .await
            .ok()?;
        Some(decode(&data))
    }

    /// The yum calls so far.
    pub fn yum_calls(&self) -> Vec<String> {
        match &self.pm {
            Pm::Fake(f) => f.calls(),
            Pm::Dnf(s) => s.calls(),
        }
    }

    /// `host_version` file content.
    pub fn host_version(&self) -> Option<String> {
        std::fs::read_to_string(self.run_dir().join("host_version")).ok()
    }

    /// Path of a file in the scratch dir.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Reads a file into lines (empty if missing).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `json!` shorthand for versions.
pub fn v(s: &str) -> Value {
    json!(s)
}

// ---------------------------------------------------------------------------------------------
// Running the agent as a child process, waiting on files, and snapshots for "nothing changed".

/// A `zkdeployment` process started by [`TestHost::spawn`]: its merged output goes to a file
/// (read it at any time with [`Spawned::output`]); killed if dropped while running.
pub struct Spawned {
    /// The process.
    pub child: tokio::process::Child,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Spawned {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process already exited")
    }

    /// Its output so far (stdout and stderr, as written).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// True while it runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Crashes it as a dying host would: SIGKILL to the process, then to every descendant it
    /// had (its deploy script and the script's children), found through `/proc` before the
    /// kill. Waits for the process itself to be gone.
    pub async fn kill_tree(&mut self) {
        let root = self.pid();
        let mut family = vec![root];
        let mut i = 0;
        while i < family.len() {
            family.extend(children_of(family[i]));
            i += 1;
        }
        for pid in family {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait().await;
    }

    /// Waits for it to exit (at most `limit`) and returns its exit code (128 + N for signal N).
    pub async fn wait(&mut self, limit: Duration) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(-1),
            Ok(Err(e)) => panic!("cannot wait for the agent: {e}"),
            Err(_) => panic!(
                "the agent still runs after {limit:?}\n--- output ---\n{}",
                self.output()
            ),
        }
    }
}

impl TestHost {
    /// Starts `zkdeployment SUBCOMMAND CONFIG ARGS` (`agent` or `deploy`) in the background with
    /// extra environment; its output goes to a file in the scratch directory.
    pub fn spawn(&self, subcommand: &str, args: &[&str], env: &[(&str, &str)]) -> Spawned {
        let log = self.log_file(subcommand);
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = self.command(subcommand, args, env, out.into(), err.into());
        Spawned { child, log }
    }

    /// As [`spawn`](Self::spawn), but its stdout and stderr are a pipe read by a `cat` that
    /// copies it to the log file: stopping that `cat` (SIGSTOP) makes a log reader that
    /// stalls, as a stuck journald does. Also gives the `cat` (it exits at the end of the
    /// output, when the process and whatever inherited its output are gone).
    #[allow(dead_code)] // used by the soak (tests/soak/), a binary of its own
    pub fn spawn_relayed(
        &self,
        subcommand: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (Spawned, std::process::Child) {
        let log = self.log_file(subcommand);
        let out = std::fs::File::create(&log).unwrap();
        let mut relay = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(out)
            .spawn()
            .expect("start cat");
        let pipe = std::os::fd::OwnedFd::from(relay.stdin.take().unwrap());
        let err = pipe.try_clone().unwrap();
        let child = self.command(subcommand, args, env, pipe.into(), err.into());
        (Spawned { child, log }, relay)
    }

    /// A new log file's path in the scratch directory.
    fn log_file(&self, subcommand: &str) -> PathBuf {
        self.dir.path().join(format!(
            "{subcommand}-{}.log",
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// Starts `zkdeployment SUBCOMMAND CONFIG ARGS` with its output to `out` and `err`.
    fn command(
        &self,
        subcommand: &str,
        args: &[&str],
        env: &[(&str, &str)],
        out: std::process::Stdio,
        err: std::process::Stdio,
    ) -> tokio::process::Child {
        tokio::process::Command::new(super::bin())
            .arg(subcommand)
            .arg(self.config())
            .args(args)
            .env_remove("ZC_ZK_CONNECTION_STRING")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    }

    /// Waits until the status file names `version` (as the status file writes it) with one
    /// of `texts` as its status, and returns that status.
    pub async fn wait_status(&self, version: &str, texts: &[&str], limit: Duration) -> String {
        wait_for(&format!("status {version} {texts:?}"), limit, || {
            let status = self.status();
            let fields: Vec<&str> = status.splitn(4, ' ').collect();
            (fields.len() == 4 && fields[2] == version && texts.contains(&fields[3]))
                .then(|| fields[3].to_string())
        })
        .await
    }

    /// Every node of the chroot with (mzxid, pzxid, data version, children version).
    pub async fn zk_stats(&self) -> BTreeMap<String, (i64, i64, i32, i32)> {
        let mut out = BTreeMap::new();
        let mut queue = vec!["/".to_string()];
        while let Some(path) = queue.pop() {
            let Some(stat) = self.client.check_stat(&path).await.unwrap() else {
                continue;
            };
            out.insert(
                path.clone(),
                (stat.mzxid, stat.pzxid, stat.version, stat.cversion),
            );
            for child in self.client.list_children(&path).await.unwrap_or_default() {
                queue.push(if path == "/" {
                    format!("/{child}")
                } else {
                    format!("{path}/{child}")
                });
            }
        }
        out
    }
}

/// Polls `check` every 20 ms until it gives a value; panics after `limit`.
pub async fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every entry under `dir` (relative path → kind, content for files, modification time), for
/// "nothing changed" checks. A missing `dir` is empty.
pub fn dir_snapshot(dir: &Path) -> BTreeMap<String, (String, Vec<u8>, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut queue = vec![dir.to_path_buf()];
    while let Some(at) = queue.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let (kind, content) = if meta.is_dir() {
                queue.push(path.clone());
                ("dir", Vec::new())
            } else if meta.file_type().is_symlink() {
                (
                    "link",
                    std::fs::read_link(&path)
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes(),
                )
            } else {
                ("file", std::fs::read(&path).unwrap())
            };
            out.insert(rel, (kind.to_string(), content, meta.modified().ok()));
        }
    }
    out
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `PID (COMM) STATE PPID ...`: COMM may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// The pid of a process that has exited (reaped).
pub fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// [`wait_for`] with an async check (ZooKeeper reads).
pub async fn wait_for_async<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Unix time now, as a float.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `n` hosts `h1`..`hN` on one fresh chroot, each with its own fake yum and root.
pub async fn fleet(label: &str, n: usize) -> Vec<TestHost> {
    let conn = super::chroot(label).await;
    let mut hosts = Vec::new();
    for i in 1..=n {
        hosts.push(TestHost::on(&conn, &format!("h{i}"), Pm::Fake(FakeYum::new())).await);
    }
    hosts
}

/// The ids of `hosts`.
pub fn ids(hosts: &[TestHost]) -> Vec<&str> {
    hosts.iter().map(|h| h.id.as_str()).collect()
}

/// Runs one pass on every host at once, with the same extra environment.
pub async fn deploy_all(hosts: &[TestHost], env: &[(&str, &str)]) -> Vec<Run> {
    futures::future::join_all(hosts.iter().map(|h| h.deploy_env(&[], env))).await
}

/// Puts `script` as the health check (`opt/foo/bin/zookeeper-health`) into every version of
/// package foo in the host's fake repository.
pub fn add_foo_health_check(h: &TestHost, script: &str) {
    let Pm::Fake(fake) = &h.pm else {
        panic!("fake yum only")
    };
    let repo = fake.state().join("repo/foo");
    let mut found = 0;
    for payload in std::fs::read_dir(&repo).unwrap() {
        let bin = payload.unwrap().path().join("opt/foo/bin");
        if bin.is_dir() {
            let file = bin.join("zookeeper-health");
            std::fs::write(&file, script).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
            found += 1;
        }
    }
    assert!(found > 0, "no payload of foo in {}", repo.display());
}
