//! `zkdeployment status [--json]`, `zkdeployment resume [PATH...] [--version V]` and
//! `zkdeployment pause [PATH...] [--reason TEXT] [--force]`: the operator's view of the cluster (see [`crate::overview`]), the end of a
//! halt or a pause (see [`crate::resume`]) and the pause (see [`crate::pause`]).

use clap::Args;

use super::zkarg::protection;
use super::zkarg::{AuthArg, ConfigArg, Settings, ZkArg};
use super::{runtime, Failure, Outcome};
use crate::overview::{describe_pause, read_nodes, Overview};
use crate::pause::{check_path, operator, pause, pause_node, record};
use crate::resume::{check_version, parse_version, resume, resume_nodes, ResumeError};
use crate::summary::Filter;
use crate::sync::HOSTS;
use crate::tree::literal::py_str;
use crate::zk::acl::Kind;
use crate::zk::{call, Client};

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print JSON (stable keys: version, synced, halt, pause, nodes, hosts, locks, semaphores,
    /// warnings, summary).
    #[arg(long)]
    json: bool,
    /// Only hosts whose id or name matches this glob (`*`, `?`); the summary counts them alone.
    #[arg(long, value_name = "GLOB")]
    host: Option<String>,
    /// Only hosts not at the cluster version.
    #[arg(long)]
    behind: bool,
    /// Only hosts whose last pass failed.
    #[arg(long)]
    failed: bool,
    /// Write the summary as Prometheus metrics to FILE (atomically; `-`: standard output)
    /// instead of printing the status (for a textfile collector, from cron).
    #[arg(long, value_name = "FILE")]
    metrics: Option<std::path::PathBuf>,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    zk: ZkArg,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// Application nodes to resume: end each one's halt or pause and clear its failure
    /// records (without PATH: the cluster).
    #[arg(value_name = "PATH", conflicts_with = "version")]
    paths: Vec<String>,
    /// The version to resume at (JSON if it parses, else a string); default: the last synced
    /// revision.
    #[arg(long, value_name = "V")]
    version: Option<String>,
    /// Print the program's version (`--version` takes a value here).
    #[arg(short = 'V', action = clap::ArgAction::Version)]
    print_version: Option<bool>,
    #[command(flatten)]
    auth: AuthArg,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    zk: ZkArg,
}

#[derive(Debug, Args)]
pub(crate) struct PauseArgs {
    /// Application nodes to pause: no host starts a new step of them until `resume PATH`
    /// (without PATH: the cluster).
    #[arg(value_name = "PATH")]
    paths: Vec<String>,
    /// Pause the nodes even in a mixed fleet, whose original agents ignore node pauses.
    #[arg(long, requires = "paths")]
    force: bool,
    /// Why (shown by `status`, `resume` and the syncer's log).
    #[arg(long, value_name = "TEXT")]
    reason: Option<String>,
    #[command(flatten)]
    auth: AuthArg,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    zk: ZkArg,
}

/// `zkdeployment pause`: the cluster version `false` and the pause record, in one write.
pub(crate) fn pause_cmd(args: PauseArgs) -> Outcome {
    let settings = Settings::resolve(&args.zk, Some(&args.auth), &args.config)?;
    let (user, host) = operator();
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let rec = record(&user, &host, crate::files::now(), reason);
    if !args.paths.is_empty() {
        return pause_nodes_cmd(&args, &settings, &rec);
    }
    runtime()?.block_on(async {
        let client = settings.connect().await?;
        require_hosts(&client, &settings.connection).await?;
        let previous = pause(&client, &rec)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?;
        if let Some(prev) = previous.as_ref().and_then(|p| p.as_object()) {
            println!("replaced: {}", describe_pause(prev));
        }
        println!(
            "cluster paused: no host starts a pass until `zkdeployment resume`; syncs import \
             the tree and keep the pause"
        );
        Ok(0)
    })
}

/// `zkdeployment pause PATH...`: a node pause record for each node, refused in a mixed fleet
/// unless `--force`.
fn pause_nodes_cmd(args: &PauseArgs, settings: &Settings, rec: &serde_json::Value) -> Outcome {
    for path in &args.paths {
        check_path(path).map_err(|e| Failure::Usage(e.to_string()))?;
    }
    runtime()?.block_on(async {
        let client = settings.connect().await?;
        require_hosts(&client, &settings.connection).await?;
        let cache = crate::agent::mixed::MixedCache::default();
        let mixed = crate::agent::mixed::mixed_fleet(&client, &cache)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?;
        match mixed {
            Some(why) if !args.force => {
                return Err(Failure::Failed(format!(
                    "the fleet is mixed: {why}; the original's agents ignore node pauses \
                     (pause the cluster instead, or add --force)"
                )))
            }
            Some(why) => eprintln!("zkdeployment: warning: the fleet is mixed ({why}): its original agents ignore node pauses"),
            None => {}
        }
        let root_acl = match &settings.auth {
            Some(identity) => protection(&client, identity).await?.acl(Kind::Owned),
            None => zookeeper_client::Acls::anyone_all().to_vec(),
        };
        for path in &args.paths {
            let previous = pause_node(&client, path, rec, &root_acl)
                .await
                .map_err(|e| match e {
                    crate::pause::PauseError::Zk(z) if z.is_no_auth() => not_authorized(&z, "pause PATH"),
                    e => Failure::Failed(e.to_string()),
                })?;
            if let Some(prev) = previous.as_ref().and_then(|p| p.as_object()) {
                println!("{path}: replaced: {}", describe_pause(prev));
            }
            println!(
                "{path} paused: no host starts a new step of it until `zkdeployment resume {path}`"
            );
        }
        Ok(0)
    })
}

pub(crate) fn status(args: StatusArgs) -> Outcome {
    let settings = Settings::resolve(&args.zk, None, &args.config)?;
    runtime()?.block_on(async {
        let client = settings.connect().await?;
        require_hosts(&client, &settings.connection).await?;
        let mut overview = Overview::read(&client)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?;
        let filter = Filter {
            host: args.host.clone(),
            behind: args.behind,
            failed: args.failed,
        };
        overview.select(&filter, crate::files::now());
        if let Some(path) = &args.metrics {
            let mut text = overview.summary.metrics(overview.version.is_null());
            text.push_str(&crate::overview::node_metrics(&overview.nodes));
            if path.as_os_str() == "-" {
                print!("{text}");
            } else {
                crate::files::write_atomic(path, text.as_bytes())
                    .map_err(|e| Failure::Failed(format!("--metrics: {e}")))?;
            }
        } else if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&overview).expect("serialisable")
            );
        } else {
            print!("{}", crate::overview::cut_lines(&overview.render()));
        }
        Ok(0)
    })
}

/// Refuses a cluster without `/hosts`: nothing was ever synced there, or the connection
/// string names the wrong chroot (a missing `/hosts` is not a halted cluster).
/// Refuses a session whose chroot does not exist (under a chroot, `/` is the chroot node):
/// the connection string names the wrong chroot, or the cluster is not initialised there.
pub(super) async fn require_chroot(client: &Client, connection: &str) -> Result<(), Failure> {
    match call("stat", "/", client.check_stat("/")).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Failure::Failed(format!(
            "the chroot of {connection} does not exist: the cluster is not initialised there \
             or the connection string names the wrong chroot"
        ))),
        Err(e) => Err(Failure::Failed(e.to_string())),
    }
}

pub(super) async fn require_hosts(client: &Client, connection: &str) -> Result<(), Failure> {
    match call("stat", HOSTS, client.check_stat(HOSTS)).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Failure::Failed(format!(
            "{HOSTS} does not exist at {}: the cluster is not initialised (no sync has run \
             there) or the connection string names the wrong chroot",
            connection
        ))),
        Err(e) => Err(Failure::Failed(e.to_string())),
    }
}

pub(crate) fn resume_cmd(args: ResumeArgs) -> Outcome {
    let version = args.version.as_deref().map(parse_version);
    if let Some(v) = &version {
        check_version(v).map_err(|e| Failure::Usage(e.to_string()))?;
    }
    for path in &args.paths {
        check_path(path).map_err(|e| Failure::Usage(e.to_string()))?;
    }
    let settings = Settings::resolve(&args.zk, Some(&args.auth), &args.config)?;
    if !args.paths.is_empty() {
        return resume_nodes_cmd(&args.paths, &settings);
    }
    runtime()?.block_on(async {
        let client = settings.connect().await?;
        require_hosts(&client, &settings.connection).await?;
        let resumed = resume(&client, version).await.map_err(|e| match e {
            ResumeError::NullVersion | ResumeError::BlankVersion => Failure::Usage(e.to_string()),
            e => Failure::Failed(e.to_string()),
        })?;
        println!(
            "cluster version set to {}; halt cleared",
            py_str(&resumed.version)
        );
        if let Some(p) = resumed.pause.as_ref().and_then(|p| p.as_object()) {
            println!("ended: {}", describe_pause(p));
        }
        // What was cleared, so that a halt recorded after the operator looked is seen.
        for record in &resumed.cleared {
            match record.as_object() {
                Some(halt) => {
                    let (who, error) = crate::overview::describe_halt(halt);
                    println!("cleared: {who}: {error}");
                }
                None => println!("cleared: {record}"),
            }
        }
        still_in_force(&client, &resumed.version).await?;
        Ok(0)
    })
}

/// Prints the node halts and pauses (and nodes with failures) still in force after a
/// cluster resume, each with the command that ends it.
async fn still_in_force(client: &Client, version: &serde_json::Value) -> Result<(), Failure> {
    let nodes = read_nodes(client, version)
        .await
        .map_err(|e| Failure::Failed(e.to_string()))?;
    for node in nodes {
        println!("still in force: node {}", node.describe());
        println!(
            "  end with: zkdeployment resume {}",
            shell_words::quote(&node.path)
        );
    }
    Ok(())
}

/// A refusal for want of permission, saying which identity the command needs.
fn not_authorized(e: &crate::zk::ZkError, command: &str) -> Failure {
    Failure::Failed(format!(
        "{e}: on a protected tree `{command}` needs the operator's identity (--auth, the syncer's credentials)"
    ))
}

/// `zkdeployment resume PATH...`: ends each node's halt or pause, clears its failure
/// records, and wakes the agents.
fn resume_nodes_cmd(paths: &[String], settings: &Settings) -> Outcome {
    runtime()?.block_on(async {
        let client = settings.connect().await?;
        require_hosts(&client, &settings.connection).await?;
        let resumed = resume_nodes(&client, paths).await.map_err(|e| match e {
            ResumeError::Zk(z) if z.is_no_auth() => not_authorized(&z, "resume PATH"),
            e => Failure::Failed(e.to_string()),
        })?;
        for node in resumed {
            let c = &node.cleared;
            let mut what = Vec::new();
            if let Some(h) = c.halt.as_ref().and_then(|h| h.as_object()) {
                let (who, error) = crate::overview::describe_halt(h);
                what.push(format!("ended the halt ({who}: {error})"));
            }
            if let Some(p) = c.pause.as_ref().and_then(|p| p.as_object()) {
                what.push(format!("ended the pause ({})", describe_pause(p)));
            }
            what.push(format!("cleared {} failure record(s)", c.failures));
            println!("{}: {}", node.path, what.join("; "));
        }
        Ok(0)
    })
}
