//! `cargo run --release --locked --example docs -- DIR` (used by `scripts/build-rpm.sh`): writes
//! the man pages (one for the program, one per command) and the shell completions (bash, zsh,
//! fish), generated from the clap definitions so they never drift from the real flags. It is
//! a build-time tool, not a command of the binary: the man-page and completion generators
//! then stay out of the agent's binary (whose code is all resident, see README "Agent
//! memory").

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

fn run(dir: &Path) -> Result<(), String> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let cmd = zkdeployment::cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .map_err(|e| e.to_string())?;
    write(&man.join("zkdeployment.1"), &page)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("zkdeployment-{}", sub.get_name());
        let mut page = Vec::new();
        // clap names are &'static str; this tool runs once and exits.
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let sub = sub.clone().name(leaked).version(env!("CARGO_PKG_VERSION"));
        clap_mangen::Man::new(sub)
            .render(&mut page)
            .map_err(|e| e.to_string())?;
        write(&man.join(format!("{name}.1")), &page)?;
    }
    use clap_complete::Shell;
    for (shell, file) in [
        (Shell::Bash, "zkdeployment"),
        (Shell::Zsh, "_zkdeployment"),
        (Shell::Fish, "zkdeployment.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(
            shell,
            &mut zkdeployment::cli::command(),
            "zkdeployment",
            &mut out,
        );
        write(&completions.join(file), &out)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: docs DIR (writes DIR/man/*.1 and DIR/completions/*)");
        return ExitCode::from(2);
    };
    match run(dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("docs: {e}");
            ExitCode::FAILURE
        }
    }
}
