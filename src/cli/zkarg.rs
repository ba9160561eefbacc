//! The one ZooKeeper connection argument every command takes: `-z/--zookeeper CONN`, and
//! the `--auth AUTH` argument of the commands that write what the syncer owns (`sync`,
//! `tree import`, `resume`).
//!
//! `--tls-ca FILE`, `--tls-cert FILE`, `--tls-key FILE` (every command; see
//! [`crate::zk::tls`]): precedence the flag, then the config file's `zookeeper-tls-*`
//! (commands with a config file), then `$ZKDEPLOYMENT_TLS_CA`, `_CERT`, `_KEY`.
//!
//! `-z/--zookeeper CONN`
//! (`agent` has the long form only: its `-z` is the original's
//! `--assert-zookeeper-address`). Precedence: the flag, then the config file's `zookeeper`
//! (commands with a config file), then `$ZC_ZK_CONNECTION_STRING`, then `zookeeper:2181`.
//!
//! `-c/--config FILE` ([`ConfigArg`]) gives the commands without a configuration file of
//! their own (`status`, `resume`, `plan`, `sync`, `tree export`, `tree import`) the agent's
//! `zookeeper`, `zookeeper-auth` and `zookeeper-tls-*`; explicit flags win ([`Settings`]).

use std::path::PathBuf;

use clap::Args;

use super::Failure;
use crate::config::{auth_flag, load_connection, Config, Identity, ZkSettings};
use crate::zk::acl::Protection;
use crate::zk::connect::connection_string;
use crate::zk::{connect, Client, ConnectOptions, TlsFiles};

/// The `-z/--zookeeper` flag and the `--tls-*` flags.
#[derive(Debug, Args)]
pub(crate) struct ZkArg {
    /// ZooKeeper connection string, `host:port[,host:port][/chroot]` (default: the config
    /// file's `zookeeper` if the command reads one, else $ZC_ZK_CONNECTION_STRING, else
    /// zookeeper:2181).
    #[arg(short = 'z', long = "zookeeper", value_name = "CONN")]
    pub(crate) zookeeper: Option<String>,
    #[command(flatten)]
    pub(crate) tls: TlsArg,
}

/// `--tls-ca`, `--tls-cert`, `--tls-key`.
#[derive(Debug, Args, Default)]
pub(crate) struct TlsArg {
    /// PEM CA bundle the ZooKeeper servers' certificates must chain to; every connection is
    /// then TLS, the server's certificate verified for the host name or IP address of the
    /// connection string (default: the config file's zookeeper-tls-ca, else
    /// $ZKDEPLOYMENT_TLS_CA).
    #[arg(long = "tls-ca", value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,
    /// PEM client certificate presented to ZooKeeper (default: zookeeper-tls-cert, else
    /// $ZKDEPLOYMENT_TLS_CERT).
    #[arg(long = "tls-cert", value_name = "FILE")]
    pub(crate) cert: Option<PathBuf>,
    /// PEM private key of the client certificate (default: zookeeper-tls-key, else
    /// $ZKDEPLOYMENT_TLS_KEY).
    #[arg(long = "tls-key", value_name = "FILE")]
    pub(crate) key: Option<PathBuf>,
}

impl TlsArg {
    /// The flags as given.
    pub(crate) fn files(&self) -> TlsFiles {
        TlsFiles {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
        }
    }
}

impl ZkArg {
    /// The TLS files: each flag, else the configuration's (`file`), else the environment's.
    /// Read and checked now: a file that is missing, unreadable, not PEM, or a key that does
    /// not match its certificate is a usage error (exit 2). The connection reads them again.
    pub(crate) fn tls_files(&self, file: &TlsFiles) -> Result<TlsFiles, Failure> {
        let files = TlsFiles::resolve(&self.tls.files(), file);
        files
            .check_combination()
            .map_err(|e| Failure::Usage(e.to_string()))?;
        if let Err(e) = crate::zk::tls::check_files(&files) {
            return Err(if e.is_config() {
                Failure::Usage(e.to_string())
            } else {
                Failure::Failed(e.to_string())
            });
        }
        Ok(files)
    }

    /// The connection string for a command with a configuration file.
    pub(crate) fn with_config(&self, config: &Config) -> String {
        config.connection(self.zookeeper.as_deref())
    }
}

/// The protection owned by `identity` on `client`'s session (x509: the id the server
/// reports for its certificate).
pub(crate) async fn protection(
    client: &Client,
    identity: &Identity,
) -> Result<Protection, Failure> {
    match identity {
        Identity::Digest(s) => Ok(Protection::new(s.expose())),
        Identity::X509 => Protection::x509(client)
            .await
            .map_err(|e| Failure::Failed(e.to_string())),
    }
}

/// The `--auth AUTH` flag of the commands that write what the syncer owns.
#[derive(Debug, Args)]
pub(crate) struct AuthArg {
    /// Digest credentials `user:password` of the syncer's identity, or file:///PATH (or an
    /// http(s):// URL) giving them, as for the config's zookeeper-auth; or `x509`: the TLS
    /// client certificate (--tls-cert) is the identity. Nodes written are readable by all and
    /// writable by this identity only.
    #[arg(long, value_name = "AUTH")]
    pub(crate) auth: Option<String>,
}

impl AuthArg {
    /// The identity, resolved and checked (a bad value is a usage error).
    pub(crate) fn identity(&self) -> Result<Option<Identity>, Failure> {
        match self.auth.as_deref().map(str::trim) {
            None => Ok(None),
            Some("x509") => Ok(Some(Identity::X509)),
            Some(value) => auth_flag(value)
                .map(|s| Some(Identity::Digest(s)))
                .map_err(|e| Failure::Usage(e.to_string())),
        }
    }
}

/// The `-c/--config FILE` flag.
#[derive(Debug, Args)]
pub(crate) struct ConfigArg {
    /// Read `zookeeper`, `zookeeper-auth` and `zookeeper-tls-*` from this configuration file
    /// (the agent's, e.g. /etc/zkdeployment/agent.cfg); -z/--zookeeper and --auth win.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

/// How a command reaches ZooKeeper: its flags over its `--config FILE`.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The connection string.
    pub(crate) connection: String,
    /// The identity (`--auth`, else the file's `zookeeper-auth`), if any.
    pub(crate) auth: Option<Identity>,
    /// The TLS files: each flag, else the file's, else the environment's (checked).
    pub(crate) tls: TlsFiles,
    /// The file's `jute-maxbuffer`, else ZooKeeper's default.
    pub(crate) max_answer: usize,
}

impl Settings {
    /// Resolves the flags over the configuration file; an unreadable or bad file is a usage
    /// error naming it (one whose value cannot be fetched now: exit 1).
    pub(crate) fn resolve(
        zk: &ZkArg,
        auth: Option<&AuthArg>,
        config: &ConfigArg,
    ) -> Result<Settings, Failure> {
        let file = match &config.config {
            None => None,
            Some(path) => Some(load_connection(path).map_err(|e| {
                if e.is_transient() {
                    Failure::Failed(e.to_string())
                } else {
                    Failure::Usage(e.to_string())
                }
            })?),
        };
        let flag = match auth {
            Some(a) => a.identity()?,
            None => None,
        };
        let connection = connection_string(
            zk.zookeeper.as_deref(),
            file.as_ref().and_then(|f| f.zookeeper.as_deref()),
        );
        let auth = flag.or_else(|| file.as_ref().and_then(ZkSettings::identity));
        let tls = zk.tls_files(&file.as_ref().map(|f| f.tls.clone()).unwrap_or_default())?;
        if matches!(auth, Some(Identity::X509)) && tls.cert.is_none() {
            return Err(Failure::Usage(
                "--auth x509 needs a client certificate: --tls-ca, --tls-cert and --tls-key".into(),
            ));
        }
        let max_answer = file
            .as_ref()
            .and_then(|f| f.jute_maxbuffer)
            .unwrap_or(crate::zk::DEFAULT_JUTE_MAXBUFFER);
        Ok(Settings {
            connection,
            auth,
            tls,
            max_answer,
        })
    }

    /// Connects with the connection string, the TLS files and the identity's credentials.
    pub(crate) async fn connect(&self) -> Result<Client, Failure> {
        let mut opts = ConnectOptions::new(self.connection.clone());
        opts.tls = self.tls.clone();
        opts.max_answer = self.max_answer;
        opts.digest = self
            .auth
            .as_ref()
            .and_then(Identity::digest)
            .map(|s| s.expose().to_string());
        connect(&opts)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))
    }
}
