//! A host for agent tests: a ZooKeeper chroot, a filesystem root, a run directory, a config
//! file, and a package manager (the yum 3 fake, or the real dnf sandbox).

use std::path::{Path, PathBuf};

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
