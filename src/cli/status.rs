//! `zkdeployment status [--json]` and `zkdeployment resume [--version V]`: the operator's view
//! of the cluster (see [`crate::overview`]) and the end of a halt (see [`crate::resume`]).

use clap::Args;

use super::tree::{AuthArg, ZkArg};
use super::{runtime, Failure, Outcome};
use crate::overview::Overview;
use crate::resume::{parse_version, resume, ResumeError};
use crate::sync::HOSTS;
use crate::tree::literal::py_str;
use crate::zk::connect::connection_string;
use crate::zk::{call, Client};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON (stable keys: version, synced, halt, hosts, locks).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    zk: ZkArg,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
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
    zk: ZkArg,
}

pub fn status(args: StatusArgs) -> Outcome {
    runtime()?.block_on(async {
        let client = args.zk.connect().await?;
        require_hosts(&client, &args.zk).await?;
        let overview = Overview::read(&client)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?;
        if args.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&overview).expect("serialisable")
            );
        } else {
            print!("{}", overview.render());
        }
        Ok(0)
    })
}

/// Refuses a cluster without `/hosts`: nothing was ever synced there, or the connection
/// string names the wrong chroot (a missing `/hosts` is not a halted cluster).
async fn require_hosts(client: &Client, zk: &ZkArg) -> Result<(), Failure> {
    match call("stat", HOSTS, client.check_stat(HOSTS)).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Failure::Failed(format!(
            "{HOSTS} does not exist at {}: the cluster is not initialised (no sync has run \
             there) or the connection string names the wrong chroot",
            connection_string(zk.zookeeper.as_deref(), None)
        ))),
        Err(e) => Err(Failure::Failed(e.to_string())),
    }
}

pub fn resume_cmd(args: ResumeArgs) -> Outcome {
    let auth = args.auth.secret()?;
    runtime()?.block_on(async {
        let client = args.zk.connect_as(auth.as_ref()).await?;
        let version = args.version.as_deref().map(parse_version);
        let set = resume(&client, version).await.map_err(|e| match e {
            ResumeError::NullVersion => Failure::Usage(e.to_string()),
            e => Failure::Failed(e.to_string()),
        })?;
        println!("cluster version set to {}; halt cleared", py_str(&set));
        Ok(0)
    })
}
