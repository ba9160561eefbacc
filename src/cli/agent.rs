//! `zkdeployment agent` (the long-running service, or one pass with `-1`) and
//! `zkdeployment deploy` (one pass now; `--dry-run [--json]` prints the plan and changes
//! nothing). Exit codes: 0 done or already converged, 1 the pass failed, 2 configuration,
//! 3 halted, paused or abandoned, 75 a configuration value cannot be fetched now (the agent
//! waits a minute first); dry-run: 0 nothing to do, 10 changes pending, 1 no plan. The
//! service (not `--run-once`) waits for ZooKeeper at start-up as long as it takes.

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use serde_json::json;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::Notify;

use super::zkarg::ZkArg;
use super::{runtime, runtime_own_signals, Failure, Outcome};
use crate::agent::cluster::RegisterError;
use crate::agent::daemon::{close, run_forever, start, StartError};
use crate::agent::execute::PassOutcome;
use crate::agent::session::Agent;
use crate::config::{load, Config};

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent's configuration file.
    config: PathBuf,
    /// Run one pass and exit.
    #[arg(short = '1', long = "run-once")]
    run_once: bool,
    /// Log more (debug level).
    #[arg(short, long)]
    verbose: bool,
    /// Refuse to start unless the ZooKeeper host name resolves to ADDR (the original's check).
    #[arg(short = 'z', long = "assert-zookeeper-address", value_name = "ADDR")]
    assert_address: Option<String>,
    #[command(flatten)]
    zk: ZkArg,
}

#[derive(Debug, Args)]
pub(crate) struct DeployArgs {
    /// The agent's configuration file.
    config: PathBuf,
    /// Print the plan; change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// With --dry-run: print the plan as JSON.
    #[arg(long, requires = "dry_run")]
    json: bool,
    /// Run the pass even if the host is already at the cluster version.
    #[arg(long)]
    force: bool,
    /// Find the deploy nodes by walking the whole tree, not from the deployment index.
    #[arg(long)]
    walk: bool,
    #[command(flatten)]
    zk: ZkArg,
}

impl AgentArgs {
    /// `-v` given.
    pub(crate) fn verbose(&self) -> bool {
        self.verbose
    }
}

impl DeployArgs {
    /// `--dry-run` given.
    pub(crate) fn is_dry_run(&self) -> bool {
        self.dry_run
    }
}

fn load_config(path: &std::path::Path) -> Result<Config, Failure> {
    load(path).map_err(|e| {
        if e.is_transient() {
            Failure::TempFail(e.to_string())
        } else {
            Failure::Usage(e.to_string())
        }
    })
}

fn start_error(e: StartError) -> Failure {
    match e {
        StartError::RunDir(_) => Failure::Usage(e.to_string()),
        other => Failure::Failed(other.to_string()),
    }
}

fn pass_exit(outcome: PassOutcome) -> Outcome {
    match outcome {
        PassOutcome::Done | PassOutcome::Converged => Ok(0),
        PassOutcome::Failed(why) => Err(Failure::Failed(format!("the pass failed: {why}"))),
        PassOutcome::Abandoned(why) => {
            Err(Failure::Refused(format!("the pass was abandoned: {why}")))
        }
        PassOutcome::Skipped(v) => Err(Failure::Refused(format!(
            "nothing done: the cluster is {}",
            if v.is_null() {
                "halted (version None)"
            } else {
                "paused (version False)"
            }
        ))),
    }
}

/// Checks the original's `--assert-zookeeper-address`: the first host of the connection
/// string must resolve to ADDR.
fn assert_address(connection: &str, addr: &str) -> Result<(), Failure> {
    let first = connection
        .split('/')
        .next()
        .unwrap_or("")
        .split(',')
        .next()
        .unwrap_or("");
    let host = first.rsplit_once(':').map(|(h, _)| h).unwrap_or(first);
    let resolved: Vec<String> = (host, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip().to_string()).collect())
        .unwrap_or_default();
    if resolved.iter().any(|r| r == addr) || host == addr {
        Ok(())
    } else {
        Err(Failure::Usage(format!(
            "Invalid zookeeper address: {host} resolves to {resolved:?}, not {addr}"
        )))
    }
}

/// How long the agent waits before it exits 75 for a configuration value it cannot fetch
/// now: a restart cycle then lasts over a minute, so an outage of the value's server does
/// not restart the agent every few seconds (the unit sets no start limit).
const TEMPFAIL_DELAY: std::time::Duration = std::time::Duration::from_secs(60);

pub(crate) fn agent(args: AgentArgs) -> Outcome {
    let config = match load_config(&args.config) {
        Err(Failure::TempFail(message)) => {
            eprintln!(
                "zkdeployment: {message}; trying again: exiting 75 in {} s for systemd to restart the agent",
                TEMPFAIL_DELAY.as_secs()
            );
            // SIGTERM ends the wait at once (exit 143).
            runtime()?.block_on(async { tokio::time::sleep(TEMPFAIL_DELAY).await });
            return Err(Failure::TempFail(message));
        }
        other => other?,
    };
    let config = Config {
        tls: args.zk.tls_files(&config.tls)?,
        ..config
    };
    let connection = args.zk.with_config(&config);
    if let Some(addr) = &args.assert_address {
        assert_address(&connection, addr)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    runtime_own_signals()?.block_on(async move {
        // Until the agent is started, SIGTERM ends it at once (its session closed on the way
        // out): registration may wait out a dead agent's session, and the service waits for
        // ZooKeeper as long as it takes.
        let mut signals = Signals::listen(args.run_once);
        let wait = !args.run_once;
        if wait {
            if let Some(interval) = crate::systemd::watchdog_interval() {
                tokio::spawn(crate::systemd::watchdog(interval));
            }
        }
        let (mut ctx, ready) = tokio::select! {
            started = start_waiting(&config, &connection, &stop, wait) => started?,
            () = signals.recv() => {
                tracing::info!("stopped before the agent had started");
                return Ok(0);
            }
        };
        let wake = Arc::new(Notify::new());
        spawn_signal_handler(signals, stop.clone(), wake.clone());
        if args.run_once {
            let outcome = ctx.run_pass(false).await;
            close(ctx).await;
            return pass_exit(outcome.map_err(|e| Failure::Failed(e.to_string()))?);
        }
        if !ready {
            crate::systemd::notify("READY=1");
        }
        let result = run_forever(&mut ctx, wake).await;
        close(ctx).await;
        result.map_err(|e| Failure::Failed(e.to_string()))?;
        tracing::info!("stopped");
        Ok(0)
    })
}

/// The longest pause between two attempts to reach ZooKeeper at start-up.
const START_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Starts the agent. With `wait` (the service), a ZooKeeper that cannot be reached, or a
/// cluster without `/hosts` yet, is waited for as long as it takes (back-off from 1 s up to
/// [`START_BACKOFF_MAX`]): the service is then ready (`READY=1`), its status says
/// `waiting for ZooKeeper at CONN`, and the watchdog is fed, so systemd never gives up on a
/// host that booted during an outage. Other errors end it. Also returns whether `READY=1` was
/// sent.
async fn start_waiting(
    config: &Config,
    connection: &str,
    stop: &Arc<AtomicBool>,
    wait: bool,
) -> Result<(Agent, bool), Failure> {
    let mut backoff = std::time::Duration::from_secs(1);
    let mut waiting = false;
    loop {
        let error = match start(config.clone(), connection.to_string(), stop.clone(), false).await {
            Ok(agent) => {
                if waiting {
                    tracing::info!("ZooKeeper at {connection} answered; starting");
                }
                return Ok((agent, waiting));
            }
            Err(e) if wait && worth_waiting(&e) => e,
            Err(e) => return Err(start_error(e)),
        };
        if !waiting {
            // Up and doing its job (waiting): a unit still "activating" would hold the boot's
            // multi-user.target, and time out.
            crate::systemd::notify("READY=1");
            waiting = true;
        }
        tracing::warn!(
            "waiting for ZooKeeper at {connection}: {error}; trying again in {} s",
            backoff.as_secs()
        );
        crate::systemd::status(&format!("waiting for ZooKeeper at {connection} ({error})"));
        crate::systemd::progress();
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(START_BACKOFF_MAX);
    }
}

/// Start-up errors that the ensemble's return cures: ZooKeeper cannot be reached or fails,
/// or `/hosts` is not there yet.
fn worth_waiting(e: &StartError) -> bool {
    matches!(
        e,
        StartError::Zk(_)
            | StartError::NoHosts(_)
            | StartError::Register(RegisterError::Zk(_) | RegisterError::NoHosts)
    )
}

/// The SIGTERM, SIGINT and SIGHUP listeners of a command, made once before its start-up and
/// handed on to the handler that follows it: a signal arriving between the two is not lost (a
/// listener made later never sees a signal that came before it).
///
/// SIGHUP never interrupts a step. The service ignores it (and logs that it did); a pass run
/// by hand (`deploy`, `agent --run-once`), whose terminal may go away, takes it as SIGTERM:
/// the step in progress finishes, then the command exits. The commands it runs ignore SIGHUP
/// ([`crate::command`]), so a hang-up does not kill a deploy script either.
struct Signals {
    listeners: Option<(Signal, Signal, Signal)>,
    hup_stops: bool,
}

impl Signals {
    /// Starts listening (inside the runtime). No listeners if they cannot be installed.
    fn listen(hup_stops: bool) -> Signals {
        let listeners = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(term), Ok(int), Ok(hup)) => Some((term, int, hup)),
            _ => None,
        };
        Signals {
            listeners,
            hup_stops,
        }
    }

    /// Resolves on SIGTERM or SIGINT, and on SIGHUP if it stops this command (never, without
    /// listeners).
    async fn recv(&mut self) {
        let Some((term, int, hup)) = &mut self.listeners else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => {
                    if self.hup_stops {
                        return;
                    }
                    tracing::info!("SIGHUP ignored: the agent re-reads nothing and goes on");
                }
            }
        }
    }
}

fn spawn_signal_handler(mut signals: Signals, stop: Arc<AtomicBool>, wake: Arc<Notify>) {
    tokio::spawn(async move {
        signals.recv().await;
        tracing::info!("stopping: the step in progress finishes, no new step starts");
        crate::systemd::notify("STOPPING=1");
        crate::systemd::status("stopping: finishing the step in progress");
        stop.store(true, Ordering::SeqCst);
        wake.notify_one();
    });
}

pub(crate) fn deploy(args: DeployArgs) -> Outcome {
    let config = load_config(&args.config)?;
    let config = Config {
        tls: args.zk.tls_files(&config.tls)?,
        ..config
    };
    let connection = args.zk.with_config(&config);
    let stop = Arc::new(AtomicBool::new(false));
    // A dry run stops at once on SIGTERM; a real pass finishes the step in progress.
    let rt = if args.dry_run {
        runtime()?
    } else {
        runtime_own_signals()?
    };
    rt.block_on(async move {
        let starting = start(config, connection, stop.clone(), args.dry_run);
        let mut signals = Signals::listen(true);
        let mut ctx = if args.dry_run {
            starting.await.map_err(start_error)?
        } else {
            tokio::select! {
                started = starting => started.map_err(start_error)?,
                () = signals.recv() => {
                    return Err(Failure::Refused(
                        "nothing done: stopped by a signal before the pass started".into(),
                    ))
                }
            }
        };
        ctx.walk = args.walk;
        if args.dry_run {
            let outcome = dry_run(&ctx, args.force, args.json).await;
            close(ctx).await;
            return outcome;
        }
        spawn_signal_handler(signals, stop, Arc::new(Notify::new()));
        let outcome = ctx.run_pass(args.force).await;
        close(ctx).await;
        pass_exit(outcome.map_err(|e| Failure::Failed(e.to_string()))?)
    })
}

async fn dry_run(ctx: &Agent, force: bool, as_json: bool) -> Outcome {
    let plan = ctx
        .dry_run(force)
        .await
        .map_err(|e| Failure::Failed(e.to_string()))?;
    let steps = &plan.plan.steps;
    if as_json {
        let mut out = json!({"version": plan.version, "host": ctx.host.id, "steps": steps});
        if let Some(why) = &plan.plan.mixed {
            out["mixed-fleet"] = json!(why);
        }
        if let Some(d) = &plan.discovery {
            out["discovery"] = json!(d);
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&out).expect("serialisable")
        );
    } else {
        let version = crate::tree::literal::py_str(&plan.version);
        match plan.reason {
            Some(reason) => println!("nothing to do: version {version}, {reason}"),
            None => {
                if plan.plan.changes_host() {
                    println!("plan for version {version} on {}:", ctx.host.id);
                } else {
                    println!("nothing to do: version {version}; the pass would run:");
                }
                for step in steps {
                    match step {
                        crate::agent::plan::Step::Deploy { rollout, .. } => {
                            println!("  {step} [{}]", rollout.describe())
                        }
                        _ => println!("  {step}"),
                    }
                }
                if let Some(why) = &plan.plan.mixed {
                    println!("mixed fleet: {why}");
                    println!("  {}", crate::agent::rollout::BUDGETS_OFF);
                }
            }
        }
    }
    Ok(if plan.plan.changes_host() { 10 } else { 0 })
}
