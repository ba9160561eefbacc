//! `zkdeployment docs DIR` (hidden, used by packaging): writes the man pages (one for the
//! program, one per command) and the shell completions (bash, zsh, fish), generated from the
//! clap definitions so they never drift from the real flags.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};

use super::{Cli, Failure, Outcome};

#[derive(Debug, Args)]
pub struct DocsArgs {
    /// Output directory (gets man/ and completions/).
    dir: PathBuf,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes).map_err(|e| Failure::Failed(format!("{}: {e}", path.display())))
}

pub fn run(args: DocsArgs) -> Outcome {
    let man = args.dir.join("man");
    let completions = args.dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| Failure::Failed(format!("{}: {e}", d.display())))?;
    }
    let cmd = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .map_err(|e| Failure::Failed(e.to_string()))?;
    write(&man.join("zkdeployment.1"), &page)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("zkdeployment-{}", sub.get_name());
        let mut page = Vec::new();
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let sub = sub.clone().name(leaked).version(env!("CARGO_PKG_VERSION"));
        clap_mangen::Man::new(sub)
            .render(&mut page)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        write(&man.join(format!("{name}.1")), &page)?;
    }
    use clap_complete::Shell;
    for (shell, file) in [
        (Shell::Bash, "zkdeployment"),
        (Shell::Zsh, "_zkdeployment"),
        (Shell::Fish, "zkdeployment.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "zkdeployment", &mut out);
        write(&completions.join(file), &out)?;
    }
    Ok(0)
}
