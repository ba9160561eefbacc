//! Starting the agent and keeping it running: connect, register the host node, then watch
//! `/hosts` and run a pass whenever it changes. Changes that arrive during a pass are coalesced
//! into at most one further pass (the watch set before the pass fires once). SIGTERM lets the
//! step in progress finish, starts no new one, and ends the loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use super::cluster::{register, watch_cluster_version, RegisterError};
use super::discover::discover_ahead;
use super::execute::PassOutcome;
use super::model::Host;
use super::session::Agent;
use super::status::RunDir;
use crate::config::Config;
use crate::zk::paths::HOSTS;
use crate::zk::{call, connect, ZkError};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The run directory.
    #[error("run-directory: {0}")]
    RunDir(std::io::Error),
    /// ZooKeeper.
    #[error(transparent)]
    Zk(#[from] ZkError),
    /// Registration.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// `/hosts` does not exist at the connection string (a missing chroot included).
    #[error(
        "{HOSTS} does not exist at {0}: the cluster is not initialised (run the syncer \
         first) or the connection string names the wrong chroot"
    )]
    NoHosts(String),
}

/// The host described by a configuration.
pub(crate) fn host_of(config: &Config) -> Host {
    Host {
        id: config.host_id.clone(),
        name: config.host_name.clone(),
        role: config.role.clone(),
    }
}

/// Connects and builds the agent's session; registers the host node and creates the run
/// directory unless `read_only`.
pub async fn start(
    config: Config,
    connection: String,
    stop: Arc<AtomicBool>,
    read_only: bool,
) -> Result<Agent, StartError> {
    let run_dir = if read_only {
        RunDir::existing(&config.run_directory)
    } else {
        RunDir::open(&config.run_directory).map_err(StartError::RunDir)?
    };
    let mut host_version = run_dir.host_version().unwrap_or(Value::Null);
    let client = connect(&config.connect_options(connection.clone())).await?;
    let host = host_of(&config);
    let no_hosts = || StartError::NoHosts(connection.clone());
    if !read_only {
        host_version = register(
            &client,
            &host,
            host_version,
            config.session_timeout + Duration::from_secs(2),
            config.has_identity(),
        )
        .await
        .map_err(|e| match e {
            RegisterError::NoHosts => no_hosts(),
            e => e.into(),
        })?;
    } else if call("stat", HOSTS, client.check_stat(HOSTS))
        .await?
        .is_none()
    {
        return Err(no_hosts());
    }
    Ok(Agent {
        client,
        config,
        host,
        run_dir,
        connection,
        stop,
        host_version,
        metrics: crate::metrics::Metrics::default(),
        walk: false,
        host_node: Default::default(),
        read_guess: Default::default(),
        ahead: Default::default(),
        mixed: Default::default(),
    })
}

/// Gives the memory a pass used (the discovery walk of a big tree) back to the system, so an
/// idle agent stays small. Not for one of the fleet simulator's agents: the heap is the whole
/// process's, shared by thousands of them.
pub(crate) fn release_memory() {
    if crate::command::is_simulated() {
        return;
    }
    // SAFETY: malloc_trim only releases free heap pages; it is safe to call at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Ends the ZooKeeper session and waits (a few seconds at most) until the server has closed
/// it, so that the ephemeral host node goes now rather than a session timeout later (a
/// runtime dropped with the client still open never sends the close).
pub async fn close(ctx: Agent) {
    let mut state = ctx.client.state_watcher();
    drop(ctx);
    let closed = async {
        while !state.state().is_terminated() {
            state.changed().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .is_err()
    {
        tracing::warn!("the ZooKeeper session did not close in time");
    }
}

/// Runs passes on every change of `/hosts` until `stop` is set (then returns Ok). A lost or
/// failing ZooKeeper session does not end the agent: the pass in progress is abandoned, a new
/// session is built (with back-off), the host node registered again, `/hosts` read again and
/// its watch re-armed, so a version bump made during the outage is not missed.
pub async fn run_forever(ctx: &mut Agent, wake: Arc<Notify>) -> Result<(), ZkError> {
    let mut backoff = Duration::from_millis(250);
    loop {
        match serve(ctx, &wake).await {
            Ok(()) => return Ok(()),
            Err(e) => {
                tracing::warn!("{e}; building a new session");
                crate::systemd::status(&format!("{e}; reconnecting"));
            }
        }
        loop {
            if ctx.stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = wake.notified() => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
            match reconnect(ctx).await {
                Ok(()) => {
                    tracing::info!("ZooKeeper session re-established; host node registered again");
                    backoff = Duration::from_millis(250);
                    break;
                }
                Err(e) => tracing::warn!("reconnecting to ZooKeeper failed: {e}"),
            }
        }
    }
}

/// Replaces the session (unless the current one is still usable) and registers again.
async fn reconnect(ctx: &mut Agent) -> Result<(), StartError> {
    if ctx.client.state().is_terminated()
        || call("stat", HOSTS, ctx.client.check_stat(HOSTS))
            .await
            .is_err()
    {
        // The TLS files are read again: a rotated CA, certificate or key takes effect here.
        ctx.client = connect(&ctx.config.connect_options(ctx.connection.clone())).await?;
        *ctx.host_node.get_mut() = None;
    }
    let wait = ctx.config.session_timeout + Duration::from_secs(2);
    let secured = ctx.config.has_identity();
    ctx.host_version = register(
        &ctx.client,
        &ctx.host,
        ctx.host_version.clone(),
        wait,
        secured,
    )
    .await?;
    Ok(())
}

/// The watch-and-pass loop on one session; returns Err when ZooKeeper fails.
async fn serve(ctx: &mut Agent, wake: &Notify) -> Result<(), ZkError> {
    // Whether `/hosts` just changed (a new version, most likely: its pass will want what the
    // index says of this host).
    let mut changed = false;
    loop {
        if ctx.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        // The watch, and the version the pass acts on, read in one round trip; after a
        // change, with the discovery of the pass to come (from the index, at the version
        // `/hosts` then holds): the pass starts one round trip sooner. Its requests go after
        // the version's, on the same session, so they see `/hosts` as it read it, or later.
        let (read, ahead) = if changed && !ctx.walk {
            let guess = ctx.read_guess.lock().expect("read guess").clone();
            let (read, ahead) = tokio::join!(
                watch_cluster_version(&ctx.client),
                discover_ahead(&ctx.client, &ctx.host, &guess)
            );
            (read, ahead.ok().flatten())
        } else {
            (watch_cluster_version(&ctx.client).await, None)
        };
        let (version, effective, watcher) = read?;
        *ctx.ahead.lock().expect("discovery ahead") = ahead;
        tracing::info!(
            "cluster version {}, host version {}",
            crate::tree::literal::py_str(&version),
            crate::tree::literal::py_str(&ctx.host_version)
        );
        match ctx
            .run_pass_at(effective, false, Some(watcher.clone()))
            .await?
        {
            PassOutcome::Abandoned(why) => tracing::warn!("pass abandoned: {why}"),
            PassOutcome::Failed(why) => tracing::error!("pass failed: {why}"),
            _ => {}
        }
        release_memory();
        if ctx.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        changed = false;
        tokio::select! {
            event = watcher.changed() => {
                changed = true;
                if event == zookeeper_client::EventType::Session {
                    return Err(ZkError::Op {
                        op: "watch",
                        path: HOSTS.into(),
                        source: zookeeper_client::Error::SessionExpired,
                    });
                }
            }
            _ = wake.notified() => {}
        }
    }
}
