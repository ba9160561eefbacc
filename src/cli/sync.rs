//! `zkdeployment sync`: the cron-driven syncer (see [`crate::sync`]), with its local lock file
//! and tombstone, and its exit codes (0 done or nothing to do or lock file busy, 1 failed or
//! lock file held longer than `--stale-lock`, 3 refused).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::zkarg::{AuthArg, ConfigArg, Settings, ZkArg};
use super::{runtime, Failure, Outcome};
use crate::sync::local::{
    lock_file, lock_holder, Tombstone, DEFAULT_LOCK_FILE, DEFAULT_TOMBSTONE, RUNNING_MARK,
};
use crate::sync::{self, Options};

#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// Git repository holding the tree (a path, file:// URL, or any URL libgit2 supports).
    #[arg(short = 'u', long = "url")]
    url: String,
    /// Working directory for the checkout (cloned if missing).
    #[arg(short = 't', long = "tree-directory", value_name = "DIR")]
    dir: PathBuf,
    /// Branch to deploy.
    #[arg(short = 'b', long = "branch", default_value = "master")]
    branch: String,
    /// Print the diff that would be applied; change nothing (`-d` is the original's spelling).
    #[arg(short = 'n', long = "dry-run", short_alias = 'd')]
    dry_run: bool,
    /// Sync even if the cluster is halted or hosts have not converged, and re-import an
    /// unchanged revision.
    #[arg(short = 'f', long = "force")]
    force: bool,
    /// Local lock file (an exclusive flock; if busy, exit 0 quietly). A link, or a file of
    /// another user than root or this one, is an error (exit 1): keep it in a directory only
    /// root can write.
    #[arg(long, value_name = "P", default_value = DEFAULT_LOCK_FILE)]
    lock_file: PathBuf,
    /// Tombstone: present while a sync runs, left with the reason if it did not succeed; a
    /// run that ends well writes `P.last-success` (`monitor --syncer` reads both).
    #[arg(long, value_name = "P", default_value = DEFAULT_TOMBSTONE)]
    tombstone: PathBuf,
    /// Seconds the fetch from git may take in all, its three attempts included; a server
    /// that accepts the connection and never answers fails the sync after this long.
    #[arg(long, value_name = "SECONDS", default_value_t = 90,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    git_timeout: u64,
    /// A busy lock file held for longer than this many seconds is reported as a stuck sync
    /// (on stderr, exit 1) instead of skipped quietly.
    #[arg(long, value_name = "SECONDS", default_value_t = STALE_LOCK_SECS)]
    stale_lock: u64,
    /// Leave /hosts writable by everyone when protecting with --auth (or the --config file's
    /// zookeeper-auth): a mixed fleet whose original agents must record halts on /hosts.
    #[arg(long)]
    open_hosts: bool,
    #[command(flatten)]
    auth: AuthArg,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    zk: ZkArg,
}

/// The default `--stale-lock`: well above the longest sync (git bounded by `--git-timeout`,
/// ZooKeeper requests bounded by 30 s each), well below a day of silence.
const STALE_LOCK_SECS: u64 = 3600;

pub(crate) fn run(args: SyncArgs) -> Outcome {
    // Before the runtime starts any thread (a libgit2 global).
    crate::gitauth::bound_network(Duration::from_secs(args.git_timeout));
    let settings = Settings::resolve(&args.zk, Some(&args.auth), &args.config)?;
    if args.open_hosts && settings.auth.is_none() {
        return Err(Failure::Usage(
            "--open-hosts needs credentials: --auth, or zookeeper-auth in the --config file".into(),
        ));
    }
    let Some(_lock) =
        lock_file(&args.lock_file).map_err(|e| Failure::Failed(format!("lock file {e}")))?
    else {
        return lock_busy(&args);
    };
    let tombstone = Tombstone::new(&args.tombstone);
    tombstone.write(&format!("{} {RUNNING_MARK}", std::process::id()));
    let opts = Options {
        url: args.url,
        dir: args.dir,
        branch: args.branch,
        dry_run: args.dry_run,
        force: args.force,
        connection: settings.connection,
        auth: settings.auth,
        tls: settings.tls,
        max_answer: settings.max_answer,
        open_hosts: args.open_hosts,
        git_bound: Duration::from_secs(args.git_timeout),
    };
    let result = runtime()?.block_on(sync::run(&opts));
    match result {
        Ok(sync::Outcome::Applied { revision, writes }) => {
            tracing::info!("synced revision {revision} ({writes} writes)");
            tombstone.succeeded(&revision);
            Ok(0)
        }
        Ok(sync::Outcome::UpToDate { revision }) => {
            tracing::info!("cluster already at revision {revision}");
            tombstone.succeeded(&revision);
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

/// Another sync holds the lock file: nothing to do (exit 0), unless it has held it for over
/// `--stale-lock` (exit 1, naming it).
fn lock_busy(args: &SyncArgs) -> Outcome {
    let holder = lock_holder(&args.lock_file);
    if holder.age > Duration::from_secs(args.stale_lock) {
        return Err(Failure::Failed(format!(
            "another sync ({}) has held the lock file {} for {} s, over --stale-lock {} s: \
             it seems stuck (see that process, and the tombstone)",
            holder.pid,
            args.lock_file.display(),
            holder.age.as_secs(),
            args.stale_lock
        )));
    }
    tracing::info!(
        "another sync holds {}; nothing to do",
        args.lock_file.display()
    );
    Ok(0)
}
