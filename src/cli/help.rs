//! What `--help` and the man pages say beyond the flags: for every command and subcommand, its
//! exit codes, examples, environment and files ([`DOCS`]). `--help` ends with the exit codes
//! and the man page's name ([`with_after_help`]); `examples/docs.rs` writes the man pages'
//! EXIT STATUS, EXAMPLES, ENVIRONMENT and FILES sections from the same table, and a test
//! parses every example.

/// The extra documentation of one command.
#[derive(Debug, Clone, Copy)]
pub struct CommandDoc {
    /// The command's words after `zkdeployment` (empty: the program itself).
    pub(crate) path: &'static [&'static str],
    /// The man section: 8 for the agent (a daemon), 1 otherwise.
    pub section: u8,
    /// Exit codes and what each means.
    pub exit: &'static [(&'static str, &'static str)],
    /// Command lines (each starts with `zkdeployment `) and what they do.
    pub examples: &'static [(&'static str, &'static str)],
    /// Environment variables read.
    pub environment: &'static [(&'static str, &'static str)],
    /// Files read or written.
    pub files: &'static [(&'static str, &'static str)],
}

const CONNECTION_ENV: (&str, &str) = (
    "ZC_ZK_CONNECTION_STRING",
    "The ZooKeeper connection string when neither -z/--zookeeper nor a configuration file \
     sets one (default zookeeper:2181).",
);
const LOG_ENV: (&str, &str) = (
    "ZKDEPLOYMENT_LOG",
    "The log filter: LEVEL and TARGET=LEVEL items separated by commas (e.g. debug).",
);
const AGENT_CFG: (&str, &str) = (
    "/etc/zkdeployment/agent.cfg",
    "The agent's configuration file (zkdeployment.conf(5)).",
);
const RUN_DIR: (&str, &str) = (
    "/var/lib/zkdeployment",
    "The packaged run-directory: status, host_version, last-pass.json.",
);
const TOMBSTONE: (&str, &str) = (
    "/var/lib/zkdeployment/sync-tombstone",
    "The syncer's tombstone (present while a sync runs, left with the reason when one fails) \
     and its success stamp sync-tombstone.last-success.",
);

const USAGE: (&str, &str) = ("2", "Usage or configuration error (the message names it).");
const FAILED: (&str, &str) = ("1", "Failure (the message says which).");
const DONE: (&str, &str) = ("0", "Success.");

/// Every command and subcommand, the program first.
pub const DOCS: &[CommandDoc] = &[
    CommandDoc {
        path: &[],
        section: 1,
        exit: &[DONE, FAILED, USAGE, ("3", "Nothing done: halted, paused or refused.")],
        examples: &[
            ("zkdeployment status", "The cluster at a glance."),
            (
                "zkdeployment tree check deployments.zk",
                "Lint a tree file offline.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG, RUN_DIR],
    },
    CommandDoc {
        path: &["agent"],
        section: 8,
        exit: &[
            ("0", "Stopped by SIGTERM or SIGINT, or (--run-once) the pass is done."),
            ("1", "The pass failed (--run-once), or the agent could not start."),
            USAGE,
            ("3", "--run-once: halted, paused or abandoned."),
            (
                "75",
                "A configuration value cannot be fetched now (after a minute); systemd restarts it.",
            ),
        ],
        examples: &[
            (
                "zkdeployment agent /etc/zkdeployment/agent.cfg",
                "The service (systemd runs it); waits for ZooKeeper as long as it takes.",
            ),
            (
                "zkdeployment agent /etc/zkdeployment/agent.cfg --run-once",
                "One pass, then exit.",
            ),
        ],
        environment: &[
            CONNECTION_ENV,
            LOG_ENV,
            ("NOTIFY_SOCKET", "systemd's notify socket (READY=1, STATUS=, WATCHDOG=1)."),
            ("WATCHDOG_USEC", "systemd's watchdog interval; keep-alives every half of it."),
        ],
        files: &[
            AGENT_CFG,
            RUN_DIR,
            (
                "/usr/lib/systemd/system/zkdeployment-agent.service",
                "The systemd unit.",
            ),
        ],
    },
    CommandDoc {
        path: &["deploy"],
        section: 1,
        exit: &[
            ("0", "Done, or already converged; --dry-run: nothing to do."),
            ("1", "The pass failed; --dry-run: no plan can be made."),
            USAGE,
            ("3", "Halted, paused or abandoned."),
            ("10", "--dry-run: changes pending."),
        ],
        examples: &[
            (
                "zkdeployment deploy /etc/zkdeployment/agent.cfg -n",
                "Show what a pass would do.",
            ),
            (
                "zkdeployment deploy /etc/zkdeployment/agent.cfg --force",
                "Run a pass now, even if converged.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG, RUN_DIR],
    },
    CommandDoc {
        path: &["monitor"],
        section: 1,
        exit: &[
            ("0", "OK."),
            ("1", "WARNING."),
            ("2", "CRITICAL."),
            ("3", "UNKNOWN (also a usage error)."),
        ],
        examples: &[
            (
                "zkdeployment monitor /etc/zkdeployment/agent.cfg -w 200 -e 600",
                "Check this host's agent.",
            ),
            (
                "zkdeployment monitor --syncer --tombstone /var/lib/zkdeployment/sync-tombstone",
                "Check the syncer on the host whose cron runs it.",
            ),
        ],
        environment: &[CONNECTION_ENV],
        files: &[AGENT_CFG, RUN_DIR, TOMBSTONE],
    },
    CommandDoc {
        path: &["status"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[
            (
                "zkdeployment status -c /etc/zkdeployment/agent.cfg",
                "The cluster, reached as the agent reaches it.",
            ),
            (
                "zkdeployment status --behind --json",
                "Hosts not at the cluster version, as JSON.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["resume"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[
            (
                "zkdeployment resume -c /etc/zkdeployment/agent.cfg",
                "End a halt at the last synced revision.",
            ),
            ("zkdeployment resume --version r42", "End a halt at version r42."),
            (
                "zkdeployment resume /shop/web -c /etc/zkdeployment/agent.cfg",
                "End the halt or pause of one application node and clear its failures.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["pause"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[
            (
                "zkdeployment pause --reason freeze -c /etc/zkdeployment/agent.cfg",
                "Pause every deployment; syncs go on importing the tree.",
            ),
            (
                "zkdeployment pause /shop/web --reason 'bad mirror' -c /etc/zkdeployment/agent.cfg",
                "Pause one application node; every other node goes on.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["plan"],
        section: 1,
        exit: &[
            ("0", "No change."),
            ("1", "A bad tree, or a host whose pass would fail."),
            USAGE,
            ("10", "Changes."),
        ],
        examples: &[
            (
                "zkdeployment plan --files acme.zk -c /etc/zkdeployment/agent.cfg",
                "What these tree files would change on every host.",
            ),
            (
                "zkdeployment plan --files acme.zk --json --per-host",
                "The same as JSON, with every host's planned steps.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["sync"],
        section: 1,
        exit: &[
            ("0", "Synced, nothing to do, a dry run, or another sync holds the lock file."),
            (
                "1",
                "Failed (git, a bad tree, ZooKeeper), or the lock file is held longer than --stale-lock.",
            ),
            USAGE,
            ("3", "Refused: halted, hosts not converged, cluster lock busy."),
        ],
        examples: &[
            (
                "zkdeployment sync -u https://git.example.com/ops/deployments.git -t /var/lib/zkdeployment/tree --tombstone /var/lib/zkdeployment/sync-tombstone",
                "What the cron line runs.",
            ),
            (
                "zkdeployment sync -u https://git.example.com/ops/deployments.git -t /var/lib/zkdeployment/tree -n",
                "Show the diff; change nothing.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[
            TOMBSTONE,
            (
                "/etc/cron.d/zkdeployment-sync",
                "The cron line (package zkdeployment-syncer).",
            ),
            ("/var/log/zkdeployment-sync.log", "What the cron line's runs print."),
        ],
    },
    CommandDoc {
        path: &["tree"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[(
            "zkdeployment tree export /acme",
            "Print the subtree /acme in the text format.",
        )],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["tree", "check"],
        section: 1,
        exit: &[
            ("0", "Every file is well-formed."),
            ("1", "A file has an error (printed as FILE:LINE: message)."),
            USAGE,
        ],
        examples: &[(
            "zkdeployment tree check acme.zk globex.zk",
            "Lint tree files before a commit.",
        )],
        environment: &[LOG_ENV],
        files: &[],
    },
    CommandDoc {
        path: &["tree", "export"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[(
            "zkdeployment tree export /acme -c /etc/zkdeployment/agent.cfg",
            "Print /acme from the agent's ZooKeeper.",
        )],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
    CommandDoc {
        path: &["tree", "import"],
        section: 1,
        exit: &[DONE, FAILED, USAGE],
        examples: &[
            (
                "zkdeployment tree import acme.zk / -n",
                "Show what importing acme.zk would change.",
            ),
            (
                "zkdeployment tree import acme.zk / --trim",
                "Import, deleting the nodes the file does not list.",
            ),
        ],
        environment: &[CONNECTION_ENV, LOG_ENV],
        files: &[AGENT_CFG],
    },
];

/// The documentation of the command at `path`.
pub fn doc(path: &[&str]) -> Option<&'static CommandDoc> {
    DOCS.iter().find(|d| d.path == path)
}

/// The man page's name: `zkdeployment`, `zkdeployment-sync`, `zkdeployment-tree-check`.
pub fn man_name(path: &[&str]) -> String {
    std::iter::once("zkdeployment")
        .chain(path.iter().copied())
        .collect::<Vec<_>>()
        .join("-")
}

/// The text `--help` ends with: the exit codes and the man page.
fn after_help(doc: &CommandDoc) -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in doc.exit {
        text.push_str(&format!("  {code:>3}  {meaning}\n"));
    }
    text.push_str(&format!(
        "\nSee man {} {} for examples, environment and files.",
        doc.section,
        man_name(doc.path)
    ));
    text
}

/// `cmd` (at `path`) and its subcommands, each given its [`after_help`].
pub(crate) fn with_after_help(cmd: clap::Command, path: &[&str]) -> clap::Command {
    let cmd = match doc(path) {
        Some(d) => cmd.after_help(after_help(d)),
        None => cmd,
    };
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.into_iter().fold(cmd, |cmd, name| {
        let mut sub_path: Vec<&str> = path.to_vec();
        sub_path.push(&name);
        let sub_path: Vec<String> = sub_path.iter().map(|s| s.to_string()).collect();
        cmd.mut_subcommand(&name, move |sub| {
            let refs: Vec<&str> = sub_path.iter().map(String::as_str).collect();
            with_after_help(sub, &refs)
        })
    })
}
