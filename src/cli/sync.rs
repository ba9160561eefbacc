//! `zkdeployment sync`: the cron-driven syncer (see [`crate::sync`]), with its local lock file
//! and tombstone, and its exit codes (0 done or nothing to do or lock file busy,
//! 1 failed, 3 refused).

use std::path::PathBuf;

use clap::Args;

use super::zkarg::ZkArg;
use super::{runtime, Failure, Outcome};
use crate::sync::local::{lock_file, Tombstone, DEFAULT_LOCK_FILE, DEFAULT_TOMBSTONE};
use crate::sync::{self, Options};

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// Git repository holding the tree (a path, file:// URL, or any URL libgit2 supports).
    #[arg(short = 'u', long = "url")]
    url: String,
    /// Working directory for the checkout (cloned if missing).
    #[arg(short = 't', long = "tree-directory", value_name = "DIR")]
    dir: PathBuf,
    /// Branch to deploy.
    #[arg(short = 'b', long = "branch", default_value = "master")]
    branch: String,
    /// Print the diff that would be applied; change nothing.
    #[arg(short = 'd', long = "dry-run")]
    dry_run: bool,
    /// Sync even if the cluster is halted or hosts have not converged, and re-import an
    /// unchanged revision.
    #[arg(short = 'f', long = "force")]
    force: bool,
    /// Local lock file (an exclusive flock; if busy, exit 0 quietly).
    #[arg(long, value_name = "P", default_value = DEFAULT_LOCK_FILE)]
    lock_file: PathBuf,
    /// Tombstone: present while a sync runs, left with the reason if it did not succeed.
    #[arg(long, value_name = "P", default_value = DEFAULT_TOMBSTONE)]
    tombstone: PathBuf,
    #[command(flatten)]
    zk: ZkArg,
}

pub fn run(args: SyncArgs) -> Outcome {
    let Some(_lock) =
        lock_file(&args.lock_file).map_err(|e| Failure::Failed(format!("lock file {e}")))?
    else {
        tracing::info!(
            "another sync holds {}; nothing to do",
            args.lock_file.display()
        );
        return Ok(0);
    };
    let tombstone = Tombstone::new(&args.tombstone);
    tombstone.write(&format!("{} acquired lock", std::process::id()));
    let opts = Options {
        url: args.url,
        dir: args.dir,
        branch: args.branch,
        dry_run: args.dry_run,
        force: args.force,
        connection: args.zk.resolve(),
    };
    let result = runtime()?.block_on(sync::run(&opts));
    match result {
        Ok(sync::Outcome::Applied { revision, writes }) => {
            tracing::info!("synced revision {revision} ({writes} writes)");
            tombstone.remove();
            Ok(0)
        }
        Ok(sync::Outcome::UpToDate { revision }) => {
            tracing::info!("cluster already at revision {revision}");
            tombstone.remove();
            Ok(0)
        }
        Ok(sync::Outcome::DryRun {
            revision,
            lines,
            refusal,
        }) => {
            eprintln!("dry run of revision {revision}, nothing changed");
            if let Some(r) = refusal {
                eprintln!("a real run would refuse: {r}");
            }
            for line in lines {
                println!("{line}");
            }
            tombstone.remove();
            Ok(0)
        }
        Ok(sync::Outcome::Refused(refusal)) => {
            tombstone.write(&format!("refused: {refusal}"));
            Err(Failure::Refused(refusal.to_string()))
        }
        Err(e) => {
            tombstone.write(&format!("sync failed: {e}"));
            Err(Failure::Failed(e.to_string()))
        }
    }
}
