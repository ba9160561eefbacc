//! `cargo run --release --locked --example docs -- DIR` (used by `scripts/build-rpm.sh`): writes
//! the man pages and the shell completions (bash, zsh, fish), generated from the clap
//! definitions so they never drift from the real flags:
//!
//! - `DIR/man/zkdeployment.1` and one page per command and subcommand
//!   (`zkdeployment-sync.1`, `zkdeployment-tree-check.1`, ...), the agent's in section 8
//!   (`zkdeployment-agent.8`), each with EXIT STATUS, EXAMPLES, ENVIRONMENT and FILES
//!   sections from `zkdeployment::cli::help::DOCS`;
//! - `DIR/man/zkdeployment.conf.5`, the configuration file, from
//!   `zkdeployment::config::KEY_TABLE`;
//! - `DIR/completions/`.
//!
//! It is a build-time tool, not a command of the binary: the man-page and completion
//! generators then stay out of the agent's binary (whose code is all resident). The tests
//! include this file as a module and call [`run`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use zkdeployment::cli::help::{doc, man_name, CommandDoc};
use zkdeployment::config::KEY_TABLE;

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Text for a roff line: backslashes and hyphens escaped, no control character at the start.
fn esc(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

/// A section of tagged paragraphs (`.TP`), bold tags.
fn tagged(title: &str, items: &[(&str, &str)]) -> String {
    let mut out = if title.contains(' ') {
        format!(".SH \"{title}\"\n")
    } else {
        format!(".SH {title}\n")
    };
    for (tag, text) in items {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", esc(tag), esc(text)));
    }
    out
}

/// The sections every command's page ends with.
fn extra_sections(doc: &CommandDoc) -> String {
    let mut out = tagged("EXIT STATUS", doc.exit);
    out.push_str(".SH EXAMPLES\n");
    for (line, what) in doc.examples {
        out.push_str(&format!(
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
            esc(what),
            esc(line)
        ));
    }
    out.push_str(&tagged("ENVIRONMENT", doc.environment));
    let files: &[(&str, &str)] = if doc.files.is_empty() {
        &[("(none)", "This command reads only the files it is given.")]
    } else {
        doc.files
    };
    out.push_str(&tagged("FILES", files));
    out
}

fn see_also(path: &[&str]) -> String {
    let mut refs = vec!["zkdeployment(1)".to_string(), "zkdeployment.conf(5)".into()];
    if path != ["agent"] {
        refs.push("zkdeployment-agent(8)".into());
    }
    format!(".SH \"SEE ALSO\"\n{}\n", esc(&refs.join(", ")))
}

/// The configuration keys, as the agent's page and zkdeployment.conf(5) list them.
fn keys_section(title: &str) -> String {
    let items: Vec<(String, String)> = KEY_TABLE
        .iter()
        .map(|k| {
            let default = match k.default {
                "" => "Default: unset.".to_string(),
                "(required)" => "Required.".to_string(),
                d => format!("Default: {d}."),
            };
            (k.name.to_string(), format!("{} {default}", k.meaning))
        })
        .collect();
    let refs: Vec<(&str, &str)> = items
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    tagged(title, &refs)
}

/// The page of the command at `path` (`cmd` is that command, named as its page).
fn command_page(cmd: clap::Command, path: &[&str]) -> Result<Vec<u8>, String> {
    let doc =
        doc(path).ok_or_else(|| format!("no documentation for {path:?} in cli::help::DOCS"))?;
    let man = clap_mangen::Man::new(cmd.clone()).section(doc.section.to_string());
    let mut page = Vec::new();
    let io = |e: std::io::Error| e.to_string();
    man.render_title(&mut page).map_err(io)?;
    man.render_name_section(&mut page).map_err(io)?;
    man.render_synopsis_section(&mut page).map_err(io)?;
    man.render_description_section(&mut page).map_err(io)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page).map_err(io)?;
    }
    if cmd.get_subcommands().next().is_some() {
        man.render_subcommands_section(&mut page).map_err(io)?;
    }
    let mut extra = extra_sections(doc);
    if path == ["agent"] {
        extra.push_str(&keys_section("CONFIGURATION"));
    }
    extra.push_str(&see_also(path));
    page.extend_from_slice(extra.as_bytes());
    man.render_version_section(&mut page).map_err(io)?;
    Ok(page)
}

/// Writes the pages of `cmd` (at `path`) and of its subcommands, recursively.
fn command_pages(man: &Path, cmd: &clap::Command, path: &[&str]) -> Result<(), String> {
    let name = man_name(path);
    // clap names are &'static str; this tool runs once and exits.
    let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
    let named = cmd
        .clone()
        .name(leaked)
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true);
    let section = doc(path).map_or(1, |d| d.section);
    write(
        &man.join(format!("{name}.{section}")),
        &command_page(named, path)?,
    )?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let mut sub_path = path.to_vec();
        sub_path.push(sub.get_name());
        command_pages(man, sub, &sub_path)?;
    }
    Ok(())
}

/// zkdeployment.conf(5).
fn conf_page() -> String {
    let mut out = format!(
        ".TH ZKDEPLOYMENT.CONF 5 \"\" \"zkdeployment {}\"\n.SH NAME\nzkdeployment.conf \\- \
         the zkdeployment agent's configuration file\n.SH SYNOPSIS\n/etc/zkdeployment/agent.cfg\n",
        env!("CARGO_PKG_VERSION")
    );
    out.push_str(&format!(
        ".SH DESCRIPTION\n{}\n.PP\n{}\n.PP\n{}\n",
        esc(
            "An INI file; only its [zkdeployment] section is read, as key = value or key: value \
             lines. Lines starting with # or ; are comments; a line indented deeper than the \
             key line it follows continues that key's value. An unknown key, a duplicate key \
             or a bad value is an error naming the file, the line and the key (exit 2)."
        ),
        esc(
            "A value that starts with file:// is replaced by the stripped content of that file \
             (a missing file means unset); one that starts with http:// or https:// by the body \
             of a GET (10 s timeout; 404 means unset; a server that cannot be reached now: the \
             agent exits 75 after a minute and systemd starts it again)."
        ),
        esc(
            "The agent reads every key; the other commands read zookeeper, zookeeper-auth and \
             zookeeper-tls-* from this file with -c/--config FILE, their flags winning."
        ),
    ));
    out.push_str(&keys_section("KEYS"));
    out.push_str(&format!(
        ".SH EXAMPLES\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE\n",
        esc("[zkdeployment]\nrun-directory = /var/lib/zkdeployment\nzookeeper = zk1:2181,zk2:2181,zk3:2181\nzookeeper-auth = file:///etc/zkdeployment/zookeeper-auth\nmail-to = ops@example.com")
    ));
    out.push_str(&tagged(
        "FILES",
        &[
            ("/etc/zkdeployment/agent.cfg", "The packaged configuration file."),
            (
                "/etc/zkdeployment/host-id",
                "The host id, if written (the packaged host-id = file:///etc/zkdeployment/host-id); \
                 absent, the host id is the fully qualified host name.",
            ),
        ],
    ));
    out.push_str(".SH \"SEE ALSO\"\nzkdeployment(1), zkdeployment\\-agent(8)\n");
    out
}

/// Writes `DIR/man/*` and `DIR/completions/*`.
pub fn run(dir: &Path) -> Result<(), String> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let mut cmd = zkdeployment::cli::command();
    cmd.build();
    command_pages(&man, &cmd, &[])?;
    write(&man.join("zkdeployment.conf.5"), conf_page().as_bytes())?;
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

#[allow(dead_code)] // Not called when the tests include this file.
fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: docs DIR (writes DIR/man/* and DIR/completions/*)");
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
