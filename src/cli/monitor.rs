//! `zkdeployment monitor CONFIG [-w S] [-e S] [-z CONN]`: the Nagios check (see
//! [`crate::monitor`]). Prints one line on stdout; exits with the plugin codes; never panics
//! or prints a traceback; finishes within 10 s even when ZooKeeper is down.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::zkarg::ZkArg;
use super::{runtime, Outcome};
use crate::config::load;
use crate::monitor::{evaluate, gather, unknown, with_cert_expiry, Check};
use crate::zk::{ConnectOptions, TlsFiles};

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
    let mut opts = ConnectOptions::new(args.zk.with_config(&config));
    opts.connect_timeout = Duration::from_secs(5);
    opts.session_timeout = config.session_timeout;
    opts.digest = config
        .zookeeper_auth
        .as_ref()
        .map(|s| s.expose().to_string());
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
        Ok(observed) => evaluate(&observed, args.warn, args.error),
        Err(check) => check,
    };
    match &cert {
        Some(c) => with_cert_expiry(check, c, now),
        None => check,
    }
}
