//! `zkdeployment plan (-u URL -t DIR [-b BRANCH] | --files PATH...) [--json] [--per-host]
//! [-z CONN]`: what a revision of the tree would change on every registered host (see
//! [`crate::fleet`]). The candidate is read and linted exactly as `sync` does (same errors,
//! exit 1); nothing is written. Hosts that only re-run what they have are counted, and named
//! (with every host's steps) only with `--per-host`. Exit codes: 0 no change, 10 changes, 1
//! error (a bad tree, or a host whose pass would fail), 2 usage.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::zkarg::{ConfigArg, Settings, ZkArg};
use super::{runtime, Failure, Outcome};
use crate::fleet::{plan_candidate, render::render};
use crate::sync::desired::{build, is_tree_file, SourceFile, TreeError};
use crate::sync::git;

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Git repository holding the tree (as for `sync`).
    #[arg(
        short = 'u',
        long = "url",
        required_unless_present = "files",
        conflicts_with = "files",
        requires = "dir"
    )]
    url: Option<String>,
    /// Working directory for the checkout (cloned if missing; use another one than sync's).
    #[arg(
        short = 't',
        long = "tree-directory",
        value_name = "DIR",
        requires = "url"
    )]
    dir: Option<PathBuf>,
    /// Branch to plan.
    #[arg(
        short = 'b',
        long = "branch",
        default_value = "master",
        requires = "url"
    )]
    branch: String,
    /// Tree files (`.zk`, `.zkx`) to plan instead of a repository (a pre-merge check).
    #[arg(long, num_args = 1.., value_name = "PATH")]
    files: Vec<PathBuf>,
    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,
    /// Name every host and show its steps, also the hosts that only re-run what they have
    /// (by default those are counted, not listed).
    #[arg(long)]
    per_host: bool,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    zk: ZkArg,
}

/// The candidate's files, read from the command line: named by their file names (as a
/// repository's top-level files are), errors mapped back to the paths given.
fn read_files(paths: &[PathBuf]) -> Result<(Vec<SourceFile>, BTreeMap<String, String>), Failure> {
    let mut files = Vec::new();
    let mut given = BTreeMap::new();
    for path in paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if !is_tree_file(&name) {
            return Err(Failure::Usage(format!(
                "--files {}: not a tree file (.zk or .zkx)",
                path.display()
            )));
        }
        if let Some(other) = given.insert(name.clone(), path.display().to_string()) {
            return Err(Failure::Usage(format!(
                "--files: {} and {other} have the same name {name}",
                path.display()
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| Failure::Usage(format!("--files {}: {e}", path.display())))?;
        files.push(SourceFile { name, bytes });
    }
    Ok((files, given))
}

fn tree_errors(errors: Vec<TreeError>, names: &BTreeMap<String, String>) -> Failure {
    let lines: Vec<String> = errors
        .into_iter()
        .map(|mut e| {
            if let Some(path) = names.get(&e.file) {
                e.file = path.clone();
            }
            e.to_string()
        })
        .collect();
    Failure::Failed(lines.join("\n"))
}

pub(crate) fn run(args: PlanArgs) -> Outcome {
    let settings = Settings::resolve(&args.zk, None, &args.config)?;
    runtime()?.block_on(async {
        let (revision, files, names) = match (&args.url, &args.dir) {
            (Some(url), Some(dir)) => {
                let checkout = git::update(url, dir, &args.branch, git::DEFAULT_BOUND)
                    .await
                    .map_err(|e| Failure::Failed(e.to_string()))?;
                (checkout.revision, checkout.files, BTreeMap::new())
            }
            _ => {
                let (files, names) = read_files(&args.files)?;
                let shown: Vec<&str> = names.values().map(String::as_str).collect();
                (format!("files {}", shown.join(", ")), files, names)
            }
        };
        // Only the merged tree is kept (not the files, nor where each node came from).
        let tree = build(&files).map_err(|e| tree_errors(e, &names))?.tree;
        drop(files);
        let client = settings.connect().await?;
        super::status::require_hosts(&client, &settings.connection).await?;
        let mut doc = plan_candidate(&client, &revision, &tree)
            .await
            .map_err(|e| Failure::Failed(e.to_string()))?;
        drop(tree);
        doc.per_host = args.per_host;
        if !args.per_host {
            doc.plan.only_changes();
        }
        if args.json {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &doc)
                .map_err(|e| Failure::Failed(format!("writing the plan: {e}")))?;
            writeln!(out).map_err(|e| Failure::Failed(format!("writing the plan: {e}")))?;
        } else {
            let text = render(&doc.plan, &doc.revision, &doc.cluster, args.per_host);
            print!("{}", crate::overview::cut_lines(&text));
        }
        if doc.plan.has_failures() {
            let failing: usize = doc.plan.failures.iter().map(|g| g.count).sum();
            return Err(Failure::Failed(format!(
                "the passes of {failing} host(s) would fail"
            )));
        }
        Ok(if doc.plan.has_changes() { 10 } else { 0 })
    })
}
