//! `zkdeployment monitor CONFIG [-w S] [-e S] [-z CONN]`: the Nagios check (see
//! [`crate::monitor`]); `zkdeployment monitor --syncer [--tombstone P] [-w S] [-e S]`: the
//! check of the syncer (its tombstone, the age of its last successful run). Prints one line on stdout; exits with the plugin codes; never panics
//! or prints a traceback; finishes within 10 s even when ZooKeeper is down.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::zkarg::ZkArg;
use super::{runtime, Outcome};
use crate::config::load;
use crate::monitor::{
    evaluate, evaluate_syncer, gather, gather_syncer, unknown, with_cert_expiry, Check,
};
use crate::sync::local::DEFAULT_TOMBSTONE;
use crate::zk::TlsFiles;

#[derive(Debug, Args)]
pub(crate) struct MonitorArgs {
    /// The agent's configuration file (not with --syncer).
    #[arg(required_unless_present = "syncer", conflicts_with = "syncer")]
    config: Option<PathBuf>,
    /// Check the syncer instead of the agent: its tombstone and the age of its last
    /// successful sync (local files only; run it where the cron line runs).
    #[arg(long)]
    syncer: bool,
    /// With --syncer: the tombstone the cron line's `sync --tombstone` names (its success
    /// stamp is P.last-success).
    #[arg(long, value_name = "P", requires = "syncer", default_value = DEFAULT_TOMBSTONE)]
    tombstone: PathBuf,
    /// Seconds before WARNING: a step's duration (default 200), or with --syncer the age of
    /// the last successful sync (default 1800).
    #[arg(short = 'w', long = "warn", value_name = "SECONDS")]
    warn: Option<u64>,
    /// Seconds before CRITICAL: a step's duration (default 600), or with --syncer the age of
    /// the last successful sync (default 7200).
    #[arg(short = 'e', long = "error", value_name = "SECONDS")]
    error: Option<u64>,
    #[command(flatten)]
    zk: ZkArg,
}

/// The thresholds' defaults: (warn, error) for a step, and for the syncer.
const STEP_THRESHOLDS: (u64, u64) = (200, 600);
const SYNCER_THRESHOLDS: (u64, u64) = (1800, 7200);

pub(crate) fn run(args: MonitorArgs) -> Outcome {
    let (warn, error) = if args.syncer {
        SYNCER_THRESHOLDS
    } else {
        STEP_THRESHOLDS
    };
    let (warn, error) = (args.warn.unwrap_or(warn), args.error.unwrap_or(error));
    let check = if args.syncer {
        match gather_syncer(&args.tombstone) {
            Ok(observed) => evaluate_syncer(&observed, warn, error),
            Err(check) => check,
        }
    } else {
        check(&args, warn, error)
    };
    println!("{}", check.line(warn, error));
    Ok(check.state.code())
}

fn check(args: &MonitorArgs, warn: u64, error: u64) -> Check {
    let Some(path) = &args.config else {
        return unknown("no configuration file given");
    };
    let config = match load(path) {
        Ok(c) => c,
        Err(e) => return unknown(format!("cannot read the configuration: {e}")),
    };
    let mut opts = config.connect_options(args.zk.with_config(&config));
    opts.connect_timeout = Duration::from_secs(5);
    opts.tls = TlsFiles::resolve(&args.zk.tls.files(), &config.tls);
    let cert = match opts.tls.client_cert() {
        Ok(cert) => cert,
        Err(e) => return unknown(e.to_string()),
    };
    let now = crate::files::now() as i64;
    if let Some(c) = cert.as_ref().filter(|c| c.not_after <= now) {
        // No connection can work with it: say why, not that ZooKeeper is unreachable.
        return with_cert_expiry(unknown(""), c, now);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(_) => return unknown("cannot start the runtime"),
    };
    let check = match rt.block_on(gather(
        &config.host_id,
        &config.run_directory,
        &opts,
        Duration::from_secs(8),
    )) {
        Ok(observed) => evaluate(&observed, warn, error),
        Err(check) => check,
    };
    match &cert {
        Some(c) => with_cert_expiry(check, c, now),
        None => check,
    }
}
