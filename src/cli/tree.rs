//! `zkdeployment tree check | export | import`: the text format offline and against ZooKeeper.

use std::io::Read;
use std::path::PathBuf;

use clap::Subcommand;

use super::zkarg::protection;
use super::zkarg::{AuthArg, ConfigArg, Settings, ZkArg};
use super::{runtime, Failure, Outcome};
use crate::tree::parse::parse_bytes;
use crate::tree::Node;
use crate::zk::acl::Kind;
use crate::zk::export::export_tree;
use crate::zk::import::{import_tree_with_acl, Trim};

#[derive(Debug, Subcommand)]
pub(crate) enum TreeCommand {
    /// Parse and lint tree files offline; errors and warnings are printed as FILE:LINE: message.
    Check {
        /// Tree files (`.zk`, `.zkx`).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Print the tree (or the subtree at NODE) in the text format.
    Export {
        /// The node to export.
        #[arg(default_value = "/")]
        node: String,
        /// Include ephemeral nodes.
        #[arg(short, long)]
        ephemeral: bool,
        /// Name to give the exported top node.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        zk: ZkArg,
    },
    /// Import a tree file (`-` for stdin) under NODE.
    Import {
        /// The text to import (`-` = standard input).
        file: String,
        /// The node to import under.
        #[arg(default_value = "/")]
        node: String,
        /// Delete existing children that the text does not list (not top-level ones).
        #[arg(long, conflicts_with = "no_trim")]
        trim: bool,
        /// Keep existing children that the text does not list, silently.
        #[arg(long)]
        no_trim: bool,
        /// Print what would change; change nothing.
        #[arg(short = 'n', long)]
        dry_run: bool,
        #[command(flatten)]
        auth: AuthArg,
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        zk: ZkArg,
    },
}

pub(crate) fn run(cmd: TreeCommand) -> Outcome {
    match cmd {
        TreeCommand::Check { paths } => check(&paths),
        TreeCommand::Export {
            node,
            ephemeral,
            name,
            config,
            zk,
        } => {
            check_node_path(&node)?;
            let settings = Settings::resolve(&zk, None, &config)?;
            runtime()?.block_on(async {
                let client = settings.connect().await?;
                super::status::require_chroot(&client, &settings.connection).await?;
                let text = export_tree(&client, &node, ephemeral, name.as_deref())
                    .await
                    .map_err(|e| Failure::Failed(e.to_string()))?;
                print!("{text}");
                Ok(0)
            })
        }
        TreeCommand::Import {
            file,
            node,
            trim,
            no_trim,
            dry_run,
            auth,
            config,
            zk,
        } => {
            check_node_path(&node)?;
            let settings = Settings::resolve(&zk, Some(&auth), &config)?;
            let tree = read_tree(&file)?;
            let trim = match (trim, no_trim) {
                (true, _) => Trim::Yes,
                (_, true) => Trim::No,
                _ => Trim::Report,
            };
            runtime()?.block_on(async {
                let client = settings.connect().await?;
                super::status::require_chroot(&client, &settings.connection).await?;
                let acl = match &settings.auth {
                    Some(id) => Some(protection(&client, id).await?.acl(Kind::Owned)),
                    None => None,
                };
                let node = node.trim_end_matches('/');
                let node = if node.is_empty() { "/" } else { node };
                if !dry_run {
                    // Agents must not answer the imported tree from an index written before.
                    crate::zk::index::invalidate(&client, "tree import")
                        .await
                        .map_err(|e| Failure::Failed(format!("import failed: {e}")))?;
                }
                let done =
                    import_tree_with_acl(&client, &tree, node, trim, dry_run, acl.as_deref())
                        .await
                        .map_err(|e| Failure::Failed(format!("import failed: {e}")))?;
                for line in done.lines {
                    println!("{line}");
                }
                Ok(0)
            })
        }
    }
}

fn check_node_path(node: &str) -> Result<(), Failure> {
    if !node.starts_with('/') {
        return Err(Failure::Usage(format!(
            "NODE must be an absolute path: {node:?}"
        )));
    }
    Ok(())
}

fn read_tree(file: &str) -> Result<Node, Failure> {
    let mut bytes = Vec::new();
    let read = if file == "-" {
        std::io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(file)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map(|_| ())
    };
    read.map_err(|e| Failure::Failed(format!("{file}: {e}")))?;
    parse_bytes(&bytes).map_err(|e| Failure::Failed(format!("{file}:{}: {}", e.line, e.message)))
}

/// Lints the files as one repository, with the code of `sync` (every lint that needs no
/// ZooKeeper): each error printed as FILE:LINE: message.
fn check(paths: &[PathBuf]) -> Outcome {
    let mut failed = false;
    let mut files = Vec::new();
    for path in paths {
        match std::fs::read(path) {
            Err(e) => {
                println!("{}: {e}", path.display());
                failed = true;
            }
            Ok(bytes) => files.push(crate::sync::desired::SourceFile {
                name: path.display().to_string(),
                bytes,
            }),
        }
    }
    match crate::sync::desired::build_all(&files) {
        Ok(desired) => {
            for warning in desired.warnings {
                println!("{warning}");
            }
        }
        Err(errors) => {
            for error in errors {
                println!("{error}");
            }
            failed = true;
        }
    }
    Ok(u8::from(failed))
}
