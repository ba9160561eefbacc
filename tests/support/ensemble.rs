//! A 3-server ZooKeeper ensemble on loopback, owned by one test: three JVMs running
//! `QuorumPeerMain` (started by the same `scripts/zk-server.sh --exec` and PDEATHSIG spawning as
//! [`super::ZkServer`]), each
//! with its own `zoo.cfg` (`server.N=127.0.0.1:PEER:ELECTION`, `tickTime=500` and
//! `syncLimit=2`: quick fail-overs for the fault tests; `initLimit=20`: a restarted server
//! catching up with the leader on a loaded machine (a cold JVM, a snapshot to load and send)
//! may take several seconds, and one that misses the limit is dropped and starts over, for
//! ever; `ZK_TICK_MS`, `ZK_INIT_LIMIT` and `ZK_SYNC_LIMIT` set others), `myid` and data
//! directory under one temporary directory.
//! Killed on drop.
//!
//! [`Ensemble::start`] returns once every server serves and one of them says
//! `Mode: leader`. [`Ensemble::kill`] crashes one server (SIGKILL), [`Ensemble::restart`]
//! starts it again with its data, [`Ensemble::start_stopped`] starts every stopped server
//! again (after killing all three: a whole-ensemble restart), [`Ensemble::leader`] finds the
//! current leader, and [`Ensemble::connect_string`] lists all three client ports.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::{
    four_letter, free_port, spawn_with_pdeathsig, tail, zk_server_command, TICK_MS,
    ZK_SERVER_SCRIPT,
};

/// Servers in the ensemble.
pub const SIZE: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(40);
const START_ATTEMPTS: usize = 3;

/// One server's ports.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// Client port.
    pub client: u16,
    /// Quorum (follower ↔ leader) port.
    pub peer: u16,
    /// Leader election port.
    pub election: u16,
}

/// A running 3-server ensemble.
pub struct Ensemble {
    /// Holds `N/zoo.cfg`, `N/data/myid` and `N/zk.log` for N = 1..=3.
    pub dir: tempfile::TempDir,
    /// The ports of server i (0-based index; its myid is i + 1).
    pub ports: [Ports; SIZE],
    children: [Option<Child>; SIZE],
}

impl Ensemble {
    /// Starts three servers and waits for a leader (retrying with new ports on a bind race).
    pub fn start() -> Ensemble {
        let mut last = String::new();
        for attempt in 1..=START_ATTEMPTS {
            match Ensemble::try_start() {
                Ok(ensemble) => return ensemble,
                Err(why) => {
                    last = format!("attempt {attempt}: {why}");
                    if !why.contains("BindException") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        panic!("the ZooKeeper ensemble did not start: {last}");
    }

    fn try_start() -> Result<Ensemble, String> {
        let dir = tempfile::Builder::new()
            .prefix("zkd-test-ensemble-")
            .tempdir()
            .expect("cannot create a temporary directory for the ensemble");
        let ports = std::array::from_fn(|_| Ports {
            client: free_port(),
            peer: free_port(),
            election: free_port(),
        });
        let mut ensemble = Ensemble {
            dir,
            ports,
            children: [None, None, None],
        };
        ensemble.write_configs();
        for i in 0..SIZE {
            ensemble.launch(i);
        }
        match ensemble.wait_ready() {
            Ok(()) => Ok(ensemble),
            Err(why) => {
                for i in 0..SIZE {
                    ensemble.kill(i);
                }
                Err(format!("{why}\n{}", ensemble.logs()))
            }
        }
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn connect_string(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index (0-based) of the server that says `Mode: leader`, waiting up to 30 s for
    /// an election to finish.
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for i in 0..SIZE {
                if self.children[i].is_some() && self.mode(i).as_deref() == Some("leader") {
                    return i;
                }
            }
            if Instant::now() >= deadline {
                panic!("no leader after 30 s\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What `srvr` says server i is (`leader`, `follower`), if it serves.
    pub fn mode(&self, i: usize) -> Option<String> {
        four_letter(self.ports[i].client, "srvr")
            .lines()
            .find_map(|l| l.strip_prefix("Mode: ").map(|m| m.trim().to_string()))
    }

    /// True while server i's JVM runs.
    pub fn is_running(&mut self, i: usize) -> bool {
        match self.children[i].as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Crashes server i (SIGKILL) and waits for the JVM to be gone. No-op if not running.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts server i again with its data and waits until it serves (as leader or follower).
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.launch(i);
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.mode(i).is_none() {
            if Instant::now() >= deadline {
                panic!("server {} did not rejoin\n{}", i + 1, self.logs());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts every server that is not running (with its data) and waits until all three
    /// serve with a leader. Panics if they do not.
    #[allow(dead_code)] // used by the soak (tests/soak/), a binary of its own
    pub fn start_stopped(&mut self) {
        for i in 0..SIZE {
            if !self.is_running(i) {
                self.children[i] = None;
                self.launch(i);
            }
        }
        if let Err(why) = self.wait_ready() {
            panic!("the ensemble did not come back: {why}\n{}", self.logs());
        }
    }

    /// The server's answer to a four-letter command (`mntr`, `cons`), "" if it does not serve.
    #[allow(dead_code)] // used by the soak (tests/soak/), a binary of its own
    pub fn four_letter(&self, i: usize, word: &str) -> String {
        four_letter(self.ports[i].client, word)
    }

    /// The tails of the three logs (for failure messages), without the lines of the `srvr`
    /// polls that wait for them.
    pub fn logs(&self) -> String {
        (0..SIZE)
            .map(|i| {
                let log =
                    std::fs::read_to_string(self.server_dir(i).join("zk.log")).unwrap_or_default();
                let log: Vec<&str> = log
                    .lines()
                    .filter(|l| !l.contains("Processing srvr command"))
                    .collect();
                format!("--- server {} ---\n{}", i + 1, tail(&log.join("\n"), 40))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn server_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join((i + 1).to_string())
    }

    fn write_configs(&self) {
        let servers: String = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("server.{}=127.0.0.1:{}:{}\n", i + 1, p.peer, p.election))
            .collect();
        for i in 0..SIZE {
            let dir = self.server_dir(i);
            let data = dir.join("data");
            std::fs::create_dir_all(&data).expect("cannot create dataDir");
            std::fs::write(data.join("myid"), format!("{}\n", i + 1)).expect("myid");
            let (tick, init, sync) = limits();
            let config = format!(
                "tickTime={tick}\n\
                 initLimit={init}\n\
                 syncLimit={sync}\n\
                 dataDir={}\n\
                 clientPort={}\n\
                 clientPortAddress=127.0.0.1\n\
                 maxClientCnxns=0\n\
                 4lw.commands.whitelist=*\n\
                 admin.enableServer=false\n\
                 forceSync=no\n\
                 {servers}",
                data.display(),
                self.ports[i].client,
            );
            std::fs::write(dir.join("zoo.cfg"), config).expect("cannot write zoo.cfg");
        }
    }

    fn launch(&mut self, i: usize) {
        let dir = self.server_dir(i);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("zk.log"))
            .expect("cannot open zk.log");
        let heap = std::env::var("ZK_HEAP").unwrap_or_else(|_| "192m".into());
        let mut cmd =
            zk_server_command(&["--exec", "--quorum", "--dir", &dir.display().to_string()]);
        cmd.env("ZK_HEAP", heap)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cannot clone the zk.log handle"))
            .stderr(log);
        let child = spawn_with_pdeathsig(cmd)
            .unwrap_or_else(|e| panic!("cannot run {ZK_SERVER_SCRIPT} to start ZooKeeper: {e}"));
        self.children[i] = Some(child);
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for i in 0..SIZE {
                if !self.is_running(i) {
                    return Err(format!("server {} exited during startup", i + 1));
                }
            }
            let modes: Vec<Option<String>> = (0..SIZE).map(|i| self.mode(i)).collect();
            if modes.iter().all(Option::is_some)
                && modes.iter().any(|m| m.as_deref() == Some("leader"))
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no serving ensemble after {READY_TIMEOUT:?}: {modes:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Ensemble {
    fn drop(&mut self) {
        for i in 0..SIZE {
            self.kill(i);
        }
    }
}

/// `tickTime`, `initLimit` and `syncLimit`: 500 ms, 20 and 2 unless `ZK_TICK_MS`,
/// `ZK_INIT_LIMIT` or `ZK_SYNC_LIMIT` say otherwise.
fn limits() -> (u32, u32, u32) {
    let var = |name: &str, default: u32| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (
        var("ZK_TICK_MS", TICK_MS),
        var("ZK_INIT_LIMIT", 20),
        var("ZK_SYNC_LIMIT", 2),
    )
}
