//! RPMs through `yum`: the install algorithm of docs/design.md, "A pass" (install,
//! verify, downgrade, verify).
//!
//! - The installed version always comes from `yum -q list installed NAME`, parsed exactly
//!   ([`parse_list_installed`]): only the `NAME.ARCH` entry of that very name counts (not
//!   `NAME-other.ARCH`), yum 3's wrapped lines work, and the epoch and release are removed.
//! - Every install is verified afterwards, unversioned (DONT_CARE) ones included: `yum`'s exit
//!   status proves nothing (yum ≤ 3.2.26 exits 0 when the package does not exist, yum 3 exits 0
//!   without doing anything when asked for a version lower than the installed one).
//! - A wrong version after the install gets one `yum -y downgrade SPEC` (yum 3 refuses to
//!   install a lower version; dnf's install goes to the exact version directly).
//! - `yum -y clean all` runs once per pass, before the first install ([`Yum`] is one pass).
//!
//! Every call goes through [`crate::command`]: argv, no shell, output logged and kept.

use crate::command::{run, run_checked, Cmd, CommandError};

/// One pass's view of the package manager: the command, and whether `clean` already ran in
/// this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Yum {
    program: String,
    cleaned: bool,
}

/// What [`Yum::install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// The wanted version (or, for DONT_CARE, some version) was already installed: no yum
    /// command other than `list installed` ran.
    Unchanged,
    /// `yum -y install` brought it to the wanted version.
    Installed,
    /// `yum -y install` left another version; `yum -y downgrade` fixed it (yum 3).
    Downgraded,
}

/// Why an install, removal or query failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum YumError {
    /// A yum command could not be run, or exited non-zero (`Command failed: <argv>`).
    #[error(transparent)]
    Command(#[from] CommandError),
    /// yum claimed success but the wanted version is not installed afterwards.
    #[error("Failed to install {spec} (installed: {})", .installed.as_deref().unwrap_or("None"))]
    NotInstalled {
        /// What was asked for: `NAME-VERSION`, or `NAME` for DONT_CARE.
        spec: String,
        /// The version installed afterwards, if any.
        installed: Option<String>,
    },
    /// `yum list installed` printed an entry for the package that is not understood.
    #[error("{0}")]
    Parse(String),
}

impl Yum {
    /// A fresh pass with `program` as the yum command (`"yum"` to find it on `PATH`, or a path).
    pub fn new(program: impl Into<String>) -> Yum {
        Yum {
            program: program.into(),
            cleaned: false,
        }
    }

    /// The yum command.
    pub(crate) fn program(&self) -> &str {
        &self.program
    }

    /// Whether `yum -y clean all` already ran (or was planned, see [`Yum::plan_install`]) in
    /// this pass.
    pub fn cleaned(&self) -> bool {
        self.cleaned
    }

    fn cmd(&self, args: &[&str]) -> Cmd {
        Cmd::new(std::iter::once(self.program.as_str()).chain(args.iter().copied()))
    }

    /// `yum -q list installed NAME` → the installed version (VERSION, without release and
    /// epoch), or `None`. A non-zero exit means "not installed" (`Error: No matching Packages
    /// to list`). Only a failure to start yum, or output that names the package but cannot be
    /// parsed, is an error.
    pub async fn installed_version(&self, name: &str) -> Result<Option<String>, YumError> {
        let output = run(&self.cmd(&["-q", "list", "installed", name])).await?;
        if !output.success() {
            return Ok(None);
        }
        parse_list_installed(&output.tail, name)
    }

    /// `NAME-VERSION`, or `NAME` for DONT_CARE (`wanted` is `None`).
    fn spec(name: &str, wanted: Option<&str>) -> String {
        match wanted {
            Some(version) => format!("{name}-{version}"),
            None => name.to_string(),
        }
    }

    /// Does the installed version satisfy the wanted one? DONT_CARE: anything installed does.
    fn satisfied(wanted: Option<&str>, current: Option<&str>) -> bool {
        match (wanted, current) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(wanted), Some(current)) => wanted == current,
        }
    }

    /// Installs `name` at version `wanted` (`None`: DONT_CARE, any version will do; used for
    /// packages with the version in their name) and verifies the result:
    ///
    /// 1. Already satisfied (per [`Yum::installed_version`]) → [`Installed::Unchanged`].
    /// 2. Before the first install of the pass, `yum -y clean all`.
    /// 3. `yum -y install SPEC` (`SPEC` is `NAME-VERSION`, or `NAME`); a non-zero exit is the
    ///    error `Command failed: yum -y install SPEC`.
    /// 4. Re-read the installed version; satisfied → [`Installed::Installed`].
    /// 5. Another version is installed: `yum -y downgrade SPEC` and re-read; satisfied →
    ///    [`Installed::Downgraded`].
    /// 6. Otherwise [`YumError::NotInstalled`]: `Failed to install SPEC (installed: CUR)`.
    pub async fn install(
        &mut self,
        name: &str,
        wanted: Option<&str>,
    ) -> Result<Installed, YumError> {
        let current = self.installed_version(name).await?;
        self.install_from(name, wanted, current).await
    }

    /// [`Yum::install`] when the installed version was just read (`current`): skips the
    /// first `list installed`.
    pub(crate) async fn install_from(
        &mut self,
        name: &str,
        wanted: Option<&str>,
        current: Option<String>,
    ) -> Result<Installed, YumError> {
        if Self::satisfied(wanted, current.as_deref()) {
            return Ok(Installed::Unchanged);
        }
        let spec = Self::spec(name, wanted);
        self.clean_once().await?;
        run_checked(&self.cmd(&["-y", "install", &spec])).await?;
        let mut current = self.installed_version(name).await?;
        if Self::satisfied(wanted, current.as_deref()) {
            return Ok(Installed::Installed);
        }
        if current.is_some() {
            run_checked(&self.cmd(&["-y", "downgrade", &spec])).await?;
            current = self.installed_version(name).await?;
            if Self::satisfied(wanted, current.as_deref()) {
                return Ok(Installed::Downgraded);
            }
        }
        Err(YumError::NotInstalled {
            spec,
            installed: current,
        })
    }

    /// `yum -y clean all`, the first time only.
    async fn clean_once(&mut self) -> Result<(), YumError> {
        if !self.cleaned {
            run_checked(&self.cmd(&["-y", "clean", "all"])).await?;
            self.cleaned = true;
        }
        Ok(())
    }

    /// `yum -y remove NAME` (yum exits 0 when it is not installed).
    pub async fn remove(&self, name: &str) -> Result<(), YumError> {
        run_checked(&self.cmd(&["-y", "remove", name])).await?;
        Ok(())
    }

    /// The commands [`Yum::install`] would run to install `name` at `wanted` (`None`:
    /// DONT_CARE) when it is not yet installed, for dry-run display, without running anything:
    /// `["yum -y clean all", "yum -y install foo-1.4"]` the first time in a pass, then only the
    /// install line (the clean is recorded as done, so a dry-run pass lists it once; use a
    /// separate `Yum` value for a dry run). Not listed: the `list installed` checks and the
    /// `downgrade` that yum 3 may need.
    pub fn plan_install(&mut self, name: &str, wanted: Option<&str>) -> Vec<String> {
        let mut commands = Vec::new();
        if !self.cleaned {
            commands.push(self.cmd(&["-y", "clean", "all"]).display());
            self.cleaned = true;
        }
        let spec = Self::spec(name, wanted);
        commands.push(self.cmd(&["-y", "install", &spec]).display());
        commands
    }

    /// The command [`Yum::remove`] would run, for dry-run display: `yum -y remove NAME`.
    pub fn plan_remove(&self, name: &str) -> String {
        self.cmd(&["-y", "remove", name]).display()
    }
}

/// Parses `yum -q list installed` output for exactly `name`, returning its VERSION (epoch and
/// release removed), or `None` when the output has no entry for it.
///
/// All of the output is split on whitespace; the entry is the token `NAME.ARCH` (`name`, a
/// `.`, and an arch made of `[A-Za-z0-9_]+`), and the token after it is `[EPOCH:]VERSION-RELEASE`.
/// So other packages (`foo-bar.noarch` when asking for `foo`), headers (`Installed Packages`,
/// `Loaded plugins: …`) and stray messages are ignored, and yum 3's wrapped long names (the
/// name alone on a line, the version on the next) work. A `NAME.ARCH` token followed by
/// nothing, or by something that is not a version, is a [`YumError::Parse`] quoting the line.
pub fn parse_list_installed(output: &str, name: &str) -> Result<Option<String>, YumError> {
    let tokens: Vec<(usize, &str)> = output
        .lines()
        .enumerate()
        .flat_map(|(line, text)| text.split_whitespace().map(move |token| (line, token)))
        .collect();
    let Some(at) = tokens.iter().position(|(_, token)| is_entry(token, name)) else {
        return Ok(None);
    };
    let lines: Vec<&str> = output.lines().collect();
    let (entry_line, entry) = tokens[at];
    let Some(&(version_line, token)) = tokens.get(at + 1) else {
        return Err(YumError::Parse(format!(
            "cannot parse `yum list installed {name}`: no version after {entry}: {:?}",
            lines[entry_line].trim()
        )));
    };
    match version_of(token) {
        Some(version) => Ok(Some(version.to_string())),
        None => {
            let quoted = if version_line == entry_line {
                lines[entry_line].trim().to_string()
            } else {
                format!(
                    "{} {}",
                    lines[entry_line].trim(),
                    lines[version_line].trim()
                )
            };
            Err(YumError::Parse(format!(
                "cannot parse `yum list installed {name}`: {token:?} after {entry} is not a \
                 version: {quoted:?}"
            )))
        }
    }
}

/// Is `token` exactly `NAME.ARCH`?
fn is_entry(token: &str, name: &str) -> bool {
    !name.is_empty()
        && token
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|arch| {
                !arch.is_empty() && arch.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
}

/// `[EPOCH:]VERSION-RELEASE` → `VERSION`; `None` if the token is not of that form.
fn version_of(token: &str) -> Option<&str> {
    let evr = match token.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.chars().all(|c| c.is_ascii_digit()) => {
            rest
        }
        Some(_) => return None,
        None => token,
    };
    let (version, release) = evr.split_once('-')?;
    let part = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '~' | '^'))
    };
    (part(version) && part(release)).then_some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_tokens() {
        assert_eq!(version_of("1.4-1"), Some("1.4"));
        assert_eq!(version_of("2:1.4-3.el8"), Some("1.4"));
        assert_eq!(version_of("1.0.0-1"), Some("1.0.0"));
        assert_eq!(version_of("@local"), None);
        assert_eq!(version_of("1.4"), None);
        assert_eq!(version_of("x:1.4-1"), None);
        assert_eq!(version_of("1.4-1-2"), None);
        assert_eq!(version_of("-1"), None);
    }

    #[test]
    fn entries() {
        assert!(is_entry("foo.noarch", "foo"));
        assert!(is_entry("foo.x86_64", "foo"));
        assert!(!is_entry("foo-bar.noarch", "foo"));
        assert!(!is_entry("foo.", "foo"));
        assert!(!is_entry("foo", "foo"));
        assert!(!is_entry("foo.bar.noarch", "foo"));
        assert!(is_entry("c++.noarch", "c++"));
    }

    #[test]
    fn messages() {
        let e = YumError::NotInstalled {
            spec: "squid-666".into(),
            installed: Some("2.0".into()),
        };
        assert_eq!(
            e.to_string(),
            "Failed to install squid-666 (installed: 2.0)"
        );
        let e = YumError::NotInstalled {
            spec: "nosuch-1.0".into(),
            installed: None,
        };
        assert_eq!(
            e.to_string(),
            "Failed to install nosuch-1.0 (installed: None)"
        );
        let mut yum = Yum::new("yum");
        assert_eq!(
            yum.plan_install("foo", Some("1.4")),
            ["yum -y clean all", "yum -y install foo-1.4"]
        );
        assert_eq!(
            yum.plan_install("bar-1.4", None),
            ["yum -y install bar-1.4"]
        );
        assert_eq!(yum.plan_remove("foo"), "yum -y remove foo");
    }
}
