//! The one ZooKeeper connection argument every command takes: `-z/--zookeeper CONN`, and
//! the `--auth AUTH` argument of the commands that write what the syncer owns (`sync`,
//! `tree import`, `resume`).
//!
//! `-z/--zookeeper CONN`
//! (`agent` has the long form only: its `-z` is the original's
//! `--assert-zookeeper-address`). Precedence: the flag, then the config file's `zookeeper`
//! (commands with a config file), then `$ZC_ZK_CONNECTION_STRING`, then `zookeeper:2181`.

use clap::Args;

use super::Failure;
use crate::config::{auth_flag, Config, Secret};
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

    /// The connection string for a command without a configuration file.
    pub fn resolve(&self) -> String {
        connection_string(self.zookeeper.as_deref(), None)
    }

    /// Connects with the resolved connection string (no configuration file).
    pub async fn connect(&self) -> Result<Client, Failure> {
        self.connect_as(None).await
    }

    /// Connects (no configuration file), adding the digest credentials to the session if
    /// given.
    pub async fn connect_as(&self, auth: Option<&Secret>) -> Result<Client, Failure> {
        let mut opts = ConnectOptions::new(self.resolve());
        opts.digest = auth.map(|s| s.expose().to_string());
        connect(&opts)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))
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
