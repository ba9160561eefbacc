//! The command line: clap definitions, logging set-up, exit codes, and dispatch to the
//! commands (one module each). This is the imperative shell; the work lives in the library.

mod agent;
pub mod help;
mod monitor;
mod plan;
mod runtime;
mod status;
mod sync;
mod tree;
mod zkarg;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// How a command ended, mapped to the exit codes (docs/operations.md, "Exit codes").
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1: the command failed (an import, a pass, a sync).
    Failed(String),
    /// Exit 2: usage or configuration error.
    Usage(String),
    /// Exit 3: nothing done (halted, paused, refused).
    Refused(String),
    /// Exit 75 (`EX_TEMPFAIL`): something needed cannot be reached now (a configuration
    /// value's server); running again later may work, so systemd restarts the agent.
    TempFail(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Failed(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Refused(_) => 3,
            Failure::TempFail(_) => 75,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Failed(m) | Failure::Usage(m) | Failure::Refused(m) | Failure::TempFail(m) => {
                m
            }
        }
    }
}

/// Result of a command: an exit code on success paths (0, or e.g. 10 for "changes pending").
pub(crate) type Outcome = Result<u8, Failure>;

/// zkdeployment: converge RPM hosts to a tree kept in ZooKeeper.
#[derive(Debug, Parser)]
#[command(name = "zkdeployment", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent: converge this host on every cluster version change (systemd service).
    // `-z` is the original's --assert-zookeeper-address here, not --zookeeper.
    #[command(mut_arg("zookeeper", |a| a.short(None)))]
    Agent(agent::AgentArgs),
    /// Run one deployment pass now (or show its plan with --dry-run).
    Deploy(agent::DeployArgs),
    /// Nagios check of this host's deployments (one line, plugin exit codes).
    Monitor(monitor::MonitorArgs),
    /// Show the cluster: versions, halt, hosts, locks.
    Status(status::StatusArgs),
    /// End a halt or a pause: set the cluster version (default: the last synced revision), or
    /// with PATHs end those application nodes' halts or pauses.
    #[command(disable_version_flag = true)]
    Resume(status::ResumeArgs),
    /// Pause the cluster: no host starts a pass until `resume`, syncs included; or with
    /// PATHs pause only those application nodes.
    Pause(status::PauseArgs),
    /// Show what a revision of the tree would change on every registered host (writes nothing).
    Plan(plan::PlanArgs),
    /// Copy the tree from git into ZooKeeper and bump the cluster version (cron).
    Sync(sync::SyncArgs),
    /// Work with tree files and the tree in ZooKeeper.
    #[command(subcommand)]
    Tree(tree::TreeCommand),
}

/// The clap definition of the command line, each `--help` ending with the exit codes and the
/// man page ([`help`]); the man pages and completions are generated from it by
/// `examples/docs.rs`.
pub fn command() -> clap::Command {
    help::with_after_help(<Cli as clap::CommandFactory>::command(), &[])
}

/// Checks that `args` (the program name first, as in `argv`) is a command line this program
/// accepts, without running it: `Ok` when it parses or asks for `--help`/`--version`, else
/// clap's message (an unknown flag, a missing argument, a bad value). The documentation test
/// runs every command line the documents show through it.
pub fn check_args<I, T>(args: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::error::ErrorKind;
    match Cli::try_parse_from(args) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let parsed = command()
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let level = match &cli.command {
        Command::Agent(a) if a.verbose() => "debug",
        Command::Agent(_) => "info",
        Command::Deploy(d) if !d.is_dry_run() => "info",
        _ => "warn",
    };
    init_logging(level);
    // Before any thread exists: no git network operation may wait forever (libgit2 itself
    // starts at the first git operation, see `gitauth`).
    crate::gitauth::bound_network(crate::gitauth::DEFAULT_NETWORK_TIMEOUT);
    let outcome = match cli.command {
        Command::Agent(args) => agent::agent(args),
        Command::Deploy(args) => agent::deploy(args),
        Command::Monitor(args) => monitor::run(args),
        Command::Status(args) => status::status(args),
        Command::Resume(args) => status::resume_cmd(args),
        Command::Pause(args) => status::pause_cmd(args),
        Command::Plan(args) => plan::run(args),
        Command::Sync(args) => sync::run(args),
        Command::Tree(cmd) => tree::run(cmd),
    };
    crate::logsink::flush(LOG_FLUSH);
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zkdeployment: {}", failure.message());
            ExitCode::from(failure.code())
        }
    }
}

/// Prints a clap error; the monitor reports usage errors as UNKNOWN (3), everything else as 2
/// (`--help` and `--version` exit 0).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => ExitCode::from(
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                2
            } else {
                0
            },
        ),
        _ if std::env::args().nth(1).as_deref() == Some("monitor") => {
            println!("ZKDEPLOYMENT UNKNOWN - usage error (see zkdeployment monitor --help)");
            ExitCode::from(3)
        }
        _ => ExitCode::from(2),
    }
}

/// How long a command waits at its exit for its log lines to be written (see
/// [`crate::logsink`]).
pub(crate) const LOG_FLUSH: std::time::Duration = std::time::Duration::from_secs(3);

/// Logs to stderr (through [`crate::logsink`], never blocking) at `level` (ZooKeeper's client at `warn`), or as `ZKDEPLOYMENT_LOG` says: a
/// comma-separated list of `LEVEL` and `TARGET=LEVEL` (e.g. `debug,zookeeper_client=info`).
fn init_logging(level: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter: tracing_subscriber::filter::Targets = std::env::var("ZKDEPLOYMENT_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            format!("{level},zookeeper_client=warn")
                .parse()
                .unwrap_or_default()
        });
    let output = tracing_subscriber::fmt::layer()
        .with_writer(crate::logsink::make_writer)
        // No colours: under systemd stderr goes to the journal, where escape sequences would
        // garble every line, and the colouring code would be resident in every agent.
        .with_ansi(false)
        .with_target(false);
    let _ = tracing_subscriber::registry()
        .with(output)
        .with(filter)
        .try_init();
}

/// The runtime for a command: SIGTERM and SIGINT end it, and its ZooKeeper sessions are
/// closed before the process exits, whatever the outcome (see [`mod@runtime`]).
pub(crate) fn runtime() -> Result<runtime::Runtime, Failure> {
    runtime::build(runtime::Signals::Cancel)
}

/// [`runtime()`] for commands that handle SIGTERM and SIGINT themselves (the agent, a deploy
/// pass); their sessions are closed when they return.
pub(crate) fn runtime_own_signals() -> Result<runtime::Runtime, Failure> {
    runtime::build(runtime::Signals::Own)
}
