//! The one ZooKeeper connection argument every command takes: `-z/--zookeeper CONN`, and
//! the `--auth AUTH` argument of the commands that write what the syncer owns (`sync`,
//! `tree import`, `resume`).
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
use crate::config::{auth_flag, load_connection, Config, Secret, ZkSettings};
use crate::zk::connect::connection_string;
use crate::zk::{connect, Client, ConnectOptions};

/// The `-z/--zookeeper` flag.
#[derive(Debug, Args)]
pub struct ZkArg {
    /// ZooKeeper connection string, `host:port[,host:port][/chroot]` (default: the config
    /// file's `zookeeper` if the command reads one, else $ZC_ZK_CONNECTION_STRING, else
    /// zookeeper:2181).
    #[arg(short = 'z', long = "zookeeper", value_name = "CONN")]
    pub zookeeper: Option<String>,
}

impl ZkArg {
    /// The connection string for a command with a configuration file.
    pub fn with_config(&self, config: &Config) -> String {
        config.connection(self.zookeeper.as_deref())
    }
}

/// The `--auth AUTH` flag of the commands that write what the syncer owns.
#[derive(Debug, Args)]
pub struct AuthArg {
    /// Digest credentials `user:password` of the syncer's identity, or file:///PATH (or an
    /// http(s):// URL) giving them, as for the config's zookeeper-auth. Nodes written are
    /// readable by all and writable by this identity only.
    #[arg(long, value_name = "AUTH")]
    pub auth: Option<String>,
}

impl AuthArg {
    /// The credentials, resolved and checked (a bad value is a usage error).
    pub fn secret(&self) -> Result<Option<Secret>, Failure> {
        self.auth
            .as_deref()
            .map(auth_flag)
            .transpose()
            .map_err(|e| Failure::Usage(e.to_string()))
    }
}

/// The `-c/--config FILE` flag.
#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Read `zookeeper`, `zookeeper-auth` and `zookeeper-tls-*` from this configuration file
    /// (the agent's, e.g. /etc/zkdeployment/agent.cfg); -z/--zookeeper and --auth win.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// How a command reaches ZooKeeper: its flags over its `--config FILE`.
#[derive(Debug)]
pub struct Settings {
    /// The connection string.
    pub connection: String,
    /// Digest credentials, if any.
    pub auth: Option<Secret>,
    /// What the configuration file gave (TLS files included), if one was given.
    pub file: Option<ZkSettings>,
}

impl Settings {
    /// Resolves the flags over the configuration file; an unreadable or bad file is a usage
    /// error naming it (one whose value cannot be fetched now: exit 1).
    pub fn resolve(
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
            Some(a) => a.secret()?,
            None => None,
        };
        let connection = connection_string(
            zk.zookeeper.as_deref(),
            file.as_ref().and_then(|f| f.zookeeper.as_deref()),
        );
        let auth = flag.or_else(|| file.as_ref().and_then(|f| f.zookeeper_auth.clone()));
        Ok(Settings {
            connection,
            auth,
            file,
        })
    }

    /// Connects with the connection string and credentials.
    pub async fn connect(&self) -> Result<Client, Failure> {
        if let Some(file) = &self.file {
            file.tls
                .refuse_unsupported(&file.path)
                .map_err(Failure::Usage)?;
        }
        let mut opts = ConnectOptions::new(self.connection.clone());
        opts.digest = self.auth.as_ref().map(|s| s.expose().to_string());
        connect(&opts)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))
    }
}
