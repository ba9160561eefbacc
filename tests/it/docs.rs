//! The documents cannot rot: what `README.md`, `fixtures/README.md` and `docs/*.md` show is
//! checked against the program itself.
//!
//! - Every tree snippet (a fenced block marked ```` ```zk ````, or ```` ```zkx ```` for an
//!   overlay file) passes the real binary's `zkdeployment tree check`.
//! - Every `zkdeployment ...` command line in a fenced shell block (```` ```sh ````, and the
//!   configuration blocks that run it: ```` ```cron ````, ```` ```nrpe ````) parses with the
//!   real command line definition ([`zkdeployment::cli::check_args`]): an unknown flag, a
//!   missing argument or a bad value fails the test, naming the document and line.
//! - `docs/configuration.md`'s key table lists exactly the keys the configuration reader
//!   accepts ([`zkdeployment::config::KEYS`]), and every configuration snippet (```` ```ini ````)
//!   uses only those keys.
//! - The README stays short, starts with the two quick-start commands and links to every
//!   document in `docs/`; every relative link leads to a document (and heading) that exists;
//!   no document carries measurement history.
//!
//! Each check also asserts that it found at least a given number of things to check, so an
//! extraction that finds nothing cannot pass.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

/// Fewest `zkdeployment` command lines the documents must show (they show more).
const MIN_COMMANDS: usize = 40;
/// Fewest tree snippets the documents must show.
const MIN_SNIPPETS: usize = 8;
/// Most lines the README may have.
const README_MAX_LINES: usize = 200;
/// Info strings of the fenced blocks whose lines run `zkdeployment`.
const SHELL_BLOCKS: &[&str] = &["sh", "shell", "bash", "cron", "nrpe"];

/// A fenced block of a document: its info string, the line of its first content line, and
/// its content with the fence's indentation removed.
#[derive(Debug)]
struct Block {
    info: String,
    line: usize,
    text: String,
}

/// One command line found in a document.
#[derive(Debug, PartialEq)]
struct CommandLine {
    line: usize,
    args: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, the example fleet's README and every `docs/*.md`, as (path relative to the
/// repository, content).
fn documents() -> Vec<(String, String)> {
    let mut paths = vec![root().join("README.md"), root().join("fixtures/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.strip_prefix(root()).unwrap().display().to_string();
            (name, text)
        })
        .collect()
}

/// The fenced blocks of a Markdown text (```` ``` ```` fences, possibly indented in a list).
fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Block)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let block = Block {
                        info: info.trim().to_string(),
                        line: i + 2,
                        text: String::new(),
                    };
                    open = Some((indent, block));
                }
            }
            Some((fence_indent, mut block)) => {
                if trimmed.starts_with("```") {
                    out.push(block);
                } else {
                    let cut = line.len().min(fence_indent);
                    let cut = if line[..cut].trim().is_empty() {
                        cut
                    } else {
                        0
                    };
                    block.text.push_str(&line[cut..]);
                    block.text.push('\n');
                    open = Some((fence_indent, block));
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is not closed");
    out
}

/// Is this word the program (`zkdeployment` or a path ending in `/zkdeployment`)?
fn is_program(word: &str) -> bool {
    word == "zkdeployment" || word.ends_with("/zkdeployment")
}

/// Does this word end a command's arguments (a pipe, a list operator, a redirection)?
fn ends_command(word: &str) -> bool {
    matches!(word, "|" | "||" | "&&" | ";" | "&")
        || word.starts_with('>')
        || word.starts_with('<')
        || word.starts_with("2>")
        || word.starts_with("&>")
}

/// The `zkdeployment` command lines of a shell block: lines joined at a trailing backslash,
/// split into words as the shell does (comments dropped), each command from the program
/// word to the end of its pipeline stage. An NRPE line `command[NAME]=PROGRAM ARGS` and a
/// cron line (`MIN HOUR DAY MONTH WEEKDAY USER COMMAND`) are read the same way: the program
/// word is found wherever it stands (`man zkdeployment` is a manual, not a command).
fn command_lines(block: &Block) -> Vec<CommandLine> {
    let mut out = Vec::new();
    let mut logical = String::new();
    let mut start = block.line;
    for (i, line) in block.text.lines().enumerate() {
        if logical.is_empty() {
            start = block.line + i;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                logical.push_str(head);
                logical.push(' ');
                continue;
            }
            None => logical.push_str(line),
        }
        let text = std::mem::take(&mut logical);
        let text = match text.trim_start().strip_prefix("command[") {
            Some(rest) => rest
                .split_once('=')
                .map(|(_, c)| c.to_string())
                .unwrap_or_default(),
            None => text,
        };
        let words = shell_words::split(&text)
            .unwrap_or_else(|e| panic!("line {start}: not shell words ({e}): {text}"));
        let mut at = 0;
        while at < words.len() {
            if is_program(&words[at]) && (at == 0 || words[at - 1] != "man") {
                let end = words[at..]
                    .iter()
                    .position(|w| ends_command(w))
                    .map_or(words.len(), |n| at + n);
                let mut args = vec!["zkdeployment".to_string()];
                args.extend(words[at + 1..end].iter().cloned());
                out.push(CommandLine { line: start, args });
                at = end;
            }
            at += 1;
        }
    }
    out
}

#[test]
fn the_extraction_finds_commands_wherever_the_shell_would_run_them() {
    let markdown = "text\n\n- a list item:\n\n  ```sh\n  sudo zkdeployment status --json | jq .\n  \
                    # zkdeployment tree check not-a-command\n  zkdeployment sync -u URL \\\n      \
                    -t DIR -b main  # a comment\n  man zkdeployment\n  ```\n\n```cron\n\
                    */5 * * * * root /usr/bin/zkdeployment sync -u U -t D >/dev/null 2>&1\n```\n\n\
                    ```nrpe\ncommand[check_zkd]=/usr/bin/zkdeployment monitor /etc/a.cfg -w 200\n```\n";
    let found: Vec<CommandLine> = blocks(markdown).iter().flat_map(command_lines).collect();
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        found,
        vec![
            CommandLine {
                line: 6,
                args: args(&["zkdeployment", "status", "--json"])
            },
            CommandLine {
                line: 8,
                args: args(&[
                    "zkdeployment",
                    "sync",
                    "-u",
                    "URL",
                    "-t",
                    "DIR",
                    "-b",
                    "main"
                ])
            },
            CommandLine {
                line: 14,
                args: args(&["zkdeployment", "sync", "-u", "U", "-t", "D"])
            },
            CommandLine {
                line: 18,
                args: args(&["zkdeployment", "monitor", "/etc/a.cfg", "-w", "200"])
            },
        ]
    );
}

#[test]
fn the_parse_check_refuses_what_the_program_refuses() {
    use zkdeployment::cli::check_args;
    assert_eq!(check_args(["zkdeployment", "status", "--json"]), Ok(()));
    assert_eq!(check_args(["zkdeployment", "status", "--help"]), Ok(()));
    assert_eq!(check_args(["zkdeployment", "--version"]), Ok(()));
    for bad in [
        &["zkdeployment", "status", "--no-such-flag"][..],
        &["zkdeployment", "no-such-command"],
        &[
            "zkdeployment",
            "monitor",
            "/etc/zkdeployment/agent.cfg",
            "-w",
            "soon",
        ],
        &["zkdeployment", "sync", "-t", "/var/lib/zkdeployment/tree"],
        &["zkdeployment", "tree"],
    ] {
        assert!(check_args(bad.iter().copied()).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn every_command_line_in_the_documents_parses() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for (name, text) in documents() {
        for block in blocks(&text) {
            if !SHELL_BLOCKS.contains(&block.info.as_str()) {
                continue;
            }
            for command in command_lines(&block) {
                checked += 1;
                if let Err(e) = zkdeployment::cli::check_args(&command.args) {
                    let first = e.lines().next().unwrap_or_default().to_string();
                    failures.push(format!(
                        "{name}:{}: {}: {first}",
                        command.line,
                        command.args.join(" ")
                    ));
                }
            }
        }
    }
    eprintln!("{checked} command lines checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked >= MIN_COMMANDS,
        "only {checked} command lines found (at least {MIN_COMMANDS} expected)"
    );
}

#[test]
fn every_tree_snippet_in_the_documents_passes_tree_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    let mut failures = Vec::new();
    for (name, text) in documents() {
        for block in blocks(&text) {
            if block.info != "zk" && block.info != "zkx" {
                continue;
            }
            checked += 1;
            let file = dir.path().join(format!("snippet-{checked}.{}", block.info));
            std::fs::write(&file, &block.text).unwrap();
            let out = tree_check(&file);
            if !out.status.success() {
                failures.push(format!(
                    "{name}:{}: tree check exits {:?}: {} {}",
                    block.line,
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    eprintln!("{checked} tree snippets checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked >= MIN_SNIPPETS,
        "only {checked} tree snippets found (at least {MIN_SNIPPETS} expected)"
    );
    // The check itself can fail: a snippet with an error is refused.
    let bad = dir.path().join("bad.zk");
    std::fs::write(&bad, "/acme\n  /web : webapp\n    version = 1.4 +\n").unwrap();
    assert_eq!(tree_check(&bad).status.code(), Some(1));
}

fn tree_check(file: &Path) -> std::process::Output {
    Command::new(support::bin())
        .args(["tree", "check"])
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn the_configuration_document_lists_exactly_the_keys_the_program_reads() {
    let text = std::fs::read_to_string(root().join("docs/configuration.md")).unwrap();
    let mut documented = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if !line.starts_with('|') || cells.len() < 3 {
            in_table = false;
            continue;
        }
        if cells[1] == "key" {
            in_table = true;
            continue;
        }
        if !in_table || cells[1].starts_with("---") {
            continue;
        }
        let key = cells[1]
            .strip_prefix('`')
            .and_then(|k| k.strip_suffix('`'))
            .unwrap_or_else(|| panic!("a key cell that is not one `key`: {line}"));
        documented.push(key.to_string());
    }
    let unique: BTreeSet<&str> = documented.iter().map(String::as_str).collect();
    assert_eq!(
        unique.len(),
        documented.len(),
        "a key listed twice: {documented:?}"
    );
    let read: BTreeSet<&str> = zkdeployment::config::KEYS.iter().copied().collect();
    assert_eq!(
        unique, read,
        "docs/configuration.md's key table differs from config::KEYS"
    );
}

#[test]
fn every_configuration_snippet_uses_known_keys() {
    let mut keys = 0;
    for (name, text) in documents() {
        for block in blocks(&text) {
            if block.info != "ini" {
                continue;
            }
            let mut section = "zkdeployment".to_string();
            for (i, line) in block.text.lines().enumerate() {
                let line = line.trim();
                if let Some(header) = line.strip_prefix('[') {
                    section = header.trim_end_matches(']').to_string();
                    continue;
                }
                if line.is_empty() || line.starts_with(['#', ';']) || section != "zkdeployment" {
                    continue;
                }
                let key = line.split(['=', ':']).next().unwrap().trim();
                keys += 1;
                assert!(
                    zkdeployment::config::KEYS.contains(&key),
                    "{name}:{}: unknown configuration key {key:?}",
                    block.line + i
                );
            }
        }
    }
    assert!(keys >= 8, "only {keys} configuration lines found");
}

#[test]
fn the_readme_is_short_starts_with_the_quick_start_and_every_link_leads_somewhere() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= README_MAX_LINES, "README.md has {lines} lines");
    let first_shell = blocks(&readme)
        .into_iter()
        .find(|b| b.info == "sh")
        .expect("a shell block in the README");
    let commands: Vec<&str> = first_shell
        .text
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(commands[..2], ["./scripts/demo.sh", "./scripts/test.sh"]);
    for (name, _) in documents().iter().filter(|(n, _)| n.starts_with("docs/")) {
        assert!(
            readme.contains(&format!("]({name}")),
            "README.md does not link to {name}"
        );
    }
    let mut links = 0;
    for (name, text) in documents() {
        let base = root().join(&name);
        let base = base.parent().unwrap();
        for target in text.split("](").skip(1).filter_map(|t| t.split(')').next()) {
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            if target.contains("://") {
                continue;
            }
            links += 1;
            let file = if path.is_empty() {
                root().join(&name)
            } else {
                base.join(path)
            };
            assert!(file.exists(), "{name}: link to a missing {target}");
            if !anchor.is_empty() {
                let text = std::fs::read_to_string(&file).unwrap();
                assert!(
                    headings(&text).contains(&anchor.to_string()),
                    "{name}: link to a missing heading {target}"
                );
            }
        }
    }
    assert!(links >= 10, "only {links} relative links found");
}

/// The anchors of a Markdown text's headings, as GitHub makes them: lower case, spaces to
/// `-`, punctuation other than `-` and `_` dropped.
fn headings(markdown: &str) -> Vec<String> {
    let mut in_block = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !in_block) else {
            continue;
        };
        let title = title.trim_start_matches('#').trim().to_lowercase();
        let slug = title
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        out.push(slug);
    }
    out
}

#[test]
fn headings_are_anchored_as_github_anchors_them() {
    let text =
        "# A title\n\n## Failure budgets, node halts and `pauses`\n```sh\n# not a heading\n```\n";
    assert_eq!(
        headings(text),
        ["a-title", "failure-budgets-node-halts-and-pauses"]
    );
}

#[test]
fn no_document_carries_measurement_history() {
    let mut texts = documents();
    let changes = std::fs::read_to_string(root().join("CHANGES.md")).unwrap();
    texts.push(("CHANGES.md".to_string(), changes));
    for (name, text) in texts {
        let lower = text.to_lowercase();
        for phrase in [
            "this stop",
            "previous stop",
            "stops ago",
            "stop before",
            "the latest stop",
        ] {
            assert!(!lower.contains(phrase), "{name} says {phrase:?}");
        }
    }
}
