//! TLS for the tests: certificates made at test time with the `openssl` command ([`Pki`]), and
//! a standalone ZooKeeper serving TLS beside a plain port ([`TlsZk`]): Debian's `zookeeper`
//! with Netty (`NettyServerCnxnFactory`, `secureClientPort`, PEM key and trust stores,
//! `ssl.clientAuth=want`, the x509 authentication provider), started by
//! `scripts/zk-server.sh --exec --quorum` with the zoo.cfg written here (the script puts
//! Netty's jars on the class path). Killed on drop.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A directory of certificates and keys.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    /// An empty directory.
    pub fn new() -> Pki {
        Pki {
            dir: tempfile::Builder::new()
                .prefix("zkd-pki-")
                .tempdir()
                .unwrap(),
        }
    }

    /// `DIR/name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("the openssl command is needed (scripts/lib.sh installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A CA: `NAME.pem` (certificate) and `NAME.key`.
    pub fn ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "30",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    /// A certificate signed by CA `ca` for `subject` (`/CN=x/O=y`), valid for `days` (negative:
    /// expired that many days ago), with the extensions `ext` (an `openssl x509 -extfile`
    /// body): `NAME.crt` and `NAME.key` (PKCS#8).
    fn signed(&self, ca: &str, name: &str, subject: &str, days: i64, ext: &str) {
        let (key, csr, crt, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        std::fs::write(self.path(&extfile), ext).unwrap();
        self.openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            subject,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            &days.to_string(),
            "-extfile",
            &extfile,
            "-out",
            &crt,
        ]);
    }

    /// A server certificate for `san` (`IP:127.0.0.1`, `DNS:zk.example`): `NAME.crt`,
    /// `NAME.key`, and `NAME.pem` (key and certificate, ZooKeeper's PEM key store).
    pub fn server(&self, ca: &str, name: &str, san: &str) -> PathBuf {
        let ext = format!(
            "subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature,keyAgreement\n"
        );
        self.signed(ca, name, &format!("/CN={name}"), 30, &ext);
        let key = std::fs::read_to_string(self.path(&format!("{name}.key"))).unwrap();
        let crt = std::fs::read_to_string(self.path(&format!("{name}.crt"))).unwrap();
        let pem = self.path(&format!("{name}.pem"));
        std::fs::write(&pem, format!("{key}{crt}")).unwrap();
        pem
    }

    /// A client certificate with subject `subject`, valid for `days`: (`NAME.crt`,
    /// `NAME.key`).
    pub fn client(&self, ca: &str, name: &str, subject: &str, days: i64) -> (PathBuf, PathBuf) {
        let ext = "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyAgreement\n";
        self.signed(ca, name, subject, days, ext);
        (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        )
    }
}

/// A standalone ZooKeeper with a plain port and a TLS port on 127.0.0.1.
pub struct TlsZk {
    /// The plain port.
    pub plain: u16,
    /// The TLS port.
    pub tls: u16,
    /// zoo.cfg, data/, zk.log.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl TlsZk {
    /// Starts a server whose key store is `keystore` (key and certificate, PEM) and whose
    /// trust store (the CA of client certificates) is `trust`.
    pub fn start(keystore: &Path, trust: &Path) -> TlsZk {
        let dir = tempfile::Builder::new()
            .prefix("zkd-tls-zk-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        let mut zk = TlsZk {
            plain: free_port(),
            tls: free_port(),
            dir,
            child: None,
        };
        zk.launch(keystore, trust);
        zk
    }

    /// `127.0.0.1:TLS_PORT`.
    pub fn tls_conn(&self) -> String {
        format!("127.0.0.1:{}", self.tls)
    }

    /// `127.0.0.1:PLAIN_PORT`.
    pub fn plain_conn(&self) -> String {
        format!("127.0.0.1:{}", self.plain)
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("zk.log")).unwrap_or_default()
    }

    /// Stops it (SIGKILL; the data directory stays) and starts it again on the same ports with
    /// another key store and trust store.
    pub fn restart_with(&mut self, keystore: &Path, trust: &Path) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.launch(keystore, trust);
    }

    fn launch(&mut self, keystore: &Path, trust: &Path) {
        let d = self.dir.path().display().to_string();
        let cfg = format!(
            "tickTime={tick}\ndataDir={d}/data\nclientPort={plain}\nclientPortAddress=127.0.0.1\n\
             secureClientPort={tls}\nsecureClientPortAddress=127.0.0.1\nmaxClientCnxns=0\n\
             4lw.commands.whitelist=*\nadmin.enableServer=false\nforceSync=no\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n\
             ssl.keyStore.location={ks}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={ts}\nssl.trustStore.type=PEM\nssl.clientAuth=want\n",
            tick = super::TICK_MS,
            plain = self.plain,
            tls = self.tls,
            ks = keystore.display(),
            ts = trust.display(),
        );
        std::fs::write(self.dir.path().join("zoo.cfg"), cfg).unwrap();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("zk.log"))
            .unwrap();
        let mut cmd = super::zk_server_command(&["--exec", "--quorum", "--dir", &d]);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut child = super::spawn_with_pdeathsig(cmd).expect("cannot start ZooKeeper");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the TLS ZooKeeper exited ({status}):\n{}", self.log());
            }
            let ready = super::four_letter(self.plain, "srvr").contains("Mode: ")
                && std::net::TcpStream::connect(("127.0.0.1", self.tls)).is_ok();
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the TLS ZooKeeper is not ready after 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.child = Some(child);
    }
}

impl Drop for TlsZk {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}
