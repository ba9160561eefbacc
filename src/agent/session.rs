//! The agent's session state, which outlives passes: the ZooKeeper client, the
//! configuration, who this host is, its run directory, the version it last deployed and the
//! process's metrics. A pass borrows it (`pass::Pass`); the daemon rebuilds its
//! client when ZooKeeper fails.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::Value;

use super::model::Host;
use super::status::RunDir;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::packages::yum::Yum;
use crate::tree::Props;
use crate::zk::paths::host_path;
use crate::zk::update::{update_props_known, update_props_state};
use crate::zk::{Client, ZkError};

/// The agent: what stays from one pass to the next.
pub struct Agent {
    /// The ZooKeeper session.
    pub client: Client,
    /// The configuration.
    pub(crate) config: Config,
    /// Who this host is.
    pub host: Host,
    /// The run directory.
    pub(crate) run_dir: RunDir,
    /// The connection string passed to deploy scripts.
    pub(crate) connection: String,
    /// Set when the agent must stop (SIGTERM): no new step starts.
    pub(crate) stop: Arc<AtomicBool>,
    /// The version this host last deployed.
    pub(crate) host_version: Value,
    /// The metrics of this process.
    pub(crate) metrics: Metrics,
    /// Always walk the tree, never use the deployment index (`deploy --walk`).
    pub(crate) walk: bool,
    /// This host's node as this process last wrote it (properties and data version), so a
    /// status update is one version-guarded write instead of a read and a write. Held
    /// through each write: writes made while one is in flight (a status not waited for,
    /// then a step's) go one after the other, in the order made. Two guarded by the same
    /// version would have one fail and read the node again, and two reads and writes at
    /// once may land in either order.
    pub(crate) host_node: tokio::sync::Mutex<Option<(Props, i32)>>,
    /// Whether the fleet is mixed, as last found (see [`super::mixed::mixed_fleet`]).
    pub(crate) mixed: super::mixed::MixedCache,
    /// What the next discovery reads with the index's root: what the last one read
    /// ([`crate::zk::index::Guess`]).
    pub(crate) read_guess: std::sync::Mutex<crate::zk::index::Guess>,
    /// Discovery made ahead of the next pass, with the read of the cluster version that
    /// starts it ([`super::discover::discover_ahead`]); used by a pass at the version it
    /// describes, else dropped.
    pub(crate) ahead:
        std::sync::Mutex<Option<(super::discover::Discovered, super::discover::Snapshot)>>,
}

impl Agent {
    /// A yum runner for one pass (it remembers whether its cache was cleaned).
    pub(crate) fn yum(&self) -> Yum {
        Yum::new(self.config.yum.clone())
    }

    /// The file remembering the failure last mailed (see [`crate::notify`]).
    pub(crate) fn mail_state(&self) -> PathBuf {
        self.run_dir.status_path().with_file_name("last-mail.json")
    }

    /// Changes this host's node: one write guarded by the data version this process last
    /// wrote (none when the change changes nothing there), else (someone else wrote it, or
    /// nothing is known yet) a read and a write.
    pub async fn update_host_node(&self, change: impl Fn(&mut Props)) -> Result<(), ZkError> {
        let mut known = self.host_node.lock().await;
        let path = host_path(&self.host.id);
        let after = match known.take() {
            Some((props, version)) => {
                update_props_known(&self.client, &path, &props, version, change).await
            }
            None => update_props_state(&self.client, &path, change).await,
        };
        // Unknown after an error: the next write reads first.
        *known = after.as_ref().ok().cloned();
        after.map(|_| ())
    }

    /// Rewrites the metrics file, if one is configured.
    pub(crate) fn write_metrics(&self) {
        write_metrics(&self.config, &self.metrics);
    }
}

/// Rewrites the metrics file `config` names, if any (a failure is logged, not fatal). The TLS
/// client certificate's expiry is read from its file now (a renewed file shows at once).
pub(crate) fn write_metrics(config: &Config, metrics: &Metrics) {
    if let Some(path) = &config.metrics_file {
        let mut metrics = metrics.clone();
        metrics.tls_client_cert_expiry = match config.tls.client_cert() {
            Ok(cert) => cert.map(|c| c.not_after as f64),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        };
        if let Err(e) = metrics.write(path) {
            tracing::warn!("cannot write the metrics file: {e}");
        }
    }
}
