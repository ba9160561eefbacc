//! The man pages and `--help` (issue 39): `examples/docs.rs` (included here as a module, so
//! this test runs the generator the package build runs) writes a page for every command and
//! subcommand, with EXIT STATUS, EXAMPLES, ENVIRONMENT and FILES sections, the agent's in
//! section 8 with every configuration key, and `zkdeployment.conf(5)` with every key; every
//! example parses; every `--help` ends with the exit codes and the man page.

#[allow(dead_code)]
#[path = "../../examples/docs.rs"]
mod docs;

use crate::support;

use zkdeployment::cli::help::{doc, man_name, DOCS};
use zkdeployment::config::KEYS;

/// Every command path of the clap definition (the program's `[]` first), `help` left out.
fn paths(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(path.clone());
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut p = path.clone();
        p.push(sub.get_name().to_string());
        paths(sub, p, out);
    }
}

fn bold(key: &str) -> String {
    format!("\\fB{}\\fR", key.replace('-', "\\-"))
}

#[test]
fn every_command_has_a_man_page_with_its_sections_and_help_points_to_it() {
    let dir = tempfile::tempdir().unwrap();
    docs::run(dir.path()).unwrap();
    let man = dir.path().join("man");
    let mut all = Vec::new();
    paths(&zkdeployment::cli::command(), Vec::new(), &mut all);
    assert!(all.contains(&vec!["tree".to_string(), "import".to_string()]));
    assert_eq!(
        all.len(),
        DOCS.len(),
        "{all:?}: one entry of cli::help::DOCS each"
    );
    for path in &all {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let d = doc(&path).unwrap_or_else(|| panic!("{path:?} has no entry in DOCS"));
        let file = man.join(format!("{}.{}", man_name(&path), d.section));
        let page =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for section in [
            ".SH \"EXIT STATUS\"",
            ".SH EXAMPLES",
            ".SH ENVIRONMENT",
            ".SH FILES",
            ".SH SYNOPSIS",
        ] {
            assert!(page.contains(section), "{}: no {section}", file.display());
        }
        for (code, _) in d.exit {
            assert!(
                page.contains(&format!("\\fB{code}\\fR")),
                "{path:?}: exit {code}"
            );
        }
        assert!(!d.examples.is_empty(), "{path:?}: no example");
        for (line, _) in d.examples {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(words[0], "zkdeployment", "{line}");
            if let Err(e) = zkdeployment::cli::command().try_get_matches_from(&words) {
                panic!("the example {line:?} does not parse: {e}");
            }
        }
        // --help: the exit codes, then the page.
        let mut args = path.clone();
        args.push("--help");
        let help = support::run(&args);
        assert_eq!(help.code, 0, "{help}");
        assert!(help.stdout.contains("Exit status:\n"), "{args:?}: {help}");
        assert!(
            help.stdout.trim_end().ends_with(&format!(
                "See man {} {} for examples, environment and files.",
                d.section,
                man_name(&path)
            )),
            "{args:?}: {help}"
        );
    }
    assert_eq!(doc(&["agent"]).unwrap().section, 8);
    let agent = std::fs::read_to_string(man.join("zkdeployment-agent.8")).unwrap();
    let conf = std::fs::read_to_string(man.join("zkdeployment.conf.5")).unwrap();
    assert!(agent.contains(".SH CONFIGURATION"));
    assert!(conf.starts_with(".TH ZKDEPLOYMENT.CONF 5"));
    for key in KEYS {
        assert!(
            agent.contains(&bold(key)),
            "zkdeployment-agent(8) lacks {key}"
        );
        assert!(
            conf.contains(&bold(key)),
            "zkdeployment.conf(5) lacks {key}"
        );
    }
    for file in ["zkdeployment", "_zkdeployment", "zkdeployment.fish"] {
        assert!(
            dir.path().join("completions").join(file).is_file(),
            "{file}"
        );
    }
}
