//! `zkdeployment monitor CONFIG [-w S] [-e S] [-z CONN]`: the Nagios check (see
//! [`crate::monitor`]). Prints one line on stdout; exits with the plugin codes; never panics
//! or prints a traceback; finishes within 10 s even when ZooKeeper is down.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::zkarg::ZkArg;
use super::{runtime, Outcome};
use crate::config::load;
use crate::monitor::{evaluate, gather, unknown, Check};
use crate::zk::ConnectOptions;

#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// The agent's configuration file.
    config: PathBuf,
    /// Seconds a step may take before WARNING.
    #[arg(
        short = 'w',
        long = "warn",
        value_name = "SECONDS",
        default_value_t = 200
    )]
    warn: u64,
    /// Seconds a step may take before CRITICAL.
    #[arg(
        short = 'e',
        long = "error",
        value_name = "SECONDS",
        default_value_t = 600
    )]
    error: u64,
    #[command(flatten)]
    zk: ZkArg,
}

pub fn run(args: MonitorArgs) -> Outcome {
    let check = check(&args);
    println!("{}", check.line(args.warn, args.error));
    Ok(check.state.code())
}

fn check(args: &MonitorArgs) -> Check {
    let config = match load(&args.config) {
        Ok(c) => c,
        Err(e) => return unknown(format!("cannot read the configuration: {e}")),
    };
    if let Err(e) = config.tls.refuse_unsupported(&config.path) {
        return unknown(e);
    }
    let mut opts = ConnectOptions::new(args.zk.with_config(&config));
    opts.connect_timeout = Duration::from_secs(5);
    opts.session_timeout = config.session_timeout;
    opts.digest = config
        .zookeeper_auth
        .as_ref()
        .map(|s| s.expose().to_string());
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(_) => return unknown("cannot start the runtime"),
    };
    match rt.block_on(gather(
        &config.host_id,
        &config.run_directory,
        &opts,
        Duration::from_secs(8),
    )) {
        Ok(observed) => evaluate(&observed, args.warn, args.error),
        Err(check) => check,
    }
}
