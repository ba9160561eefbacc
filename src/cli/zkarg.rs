//! The one ZooKeeper connection argument every command takes: `-z/--zookeeper CONN`
//! (`agent` has the long form only: its `-z` is the original's
//! `--assert-zookeeper-address`). Precedence: the flag, then the config file's `zookeeper`
//! (commands with a config file), then `$ZC_ZK_CONNECTION_STRING`, then `zookeeper:2181`.

use clap::Args;

use super::Failure;
use crate::config::Config;
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
        let opts = ConnectOptions::new(self.resolve());
        connect(&opts)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))
    }
}
