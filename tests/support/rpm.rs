//! RPM package managers for the tests: the real dnf in a sandbox, and a yum 3 fake.
//!
//! - [`Sandbox`]: the real dnf 4 (what `yum` is on RHEL 8/9) working on a fresh installroot
//!   per test, with a local repository of tiny noarch test RPMs ([`PACKAGES`]). The repository
//!   is built once (rpmbuild + createrepo_c, about 2 s) and shared by every test process of
//!   this user, under `$TMPDIR/zkd-rpm-repo-<uid>/<fingerprint>/`, guarded by a file lock so
//!   parallel test processes (nextest) don't race. Each [`Sandbox`] has its own `bin/yum`
//!   wrapper that runs dnf against its root exactly as `rpm-sandbox.sh` does (a `HOME` whose
//!   `.rpmmacros` pins `%_dbpath /var/lib/rpm`, `--installroot`, `--config` with gpgcheck off,
//!   `--releasever=8 --noplugins --refresh`, an empty reposdir, `unshare -r` when not root) and
//!   logs each call's arguments. Point the agent's `root` at [`Sandbox::root`]: the packages
//!   install under `ROOT/opt/...`. Each dnf call takes 0.2–0.5 s.
//! - [`FakeYum`]: `tests/support/fake-yum`, a bash model of yum 3 (EL6/EL7) with its quirks
//!   (install of a lower version is a silent no-op, exit 0 for a missing package unless
//!   [`FakeYum::set_missing_rc`], long names wrapped in `list` output), 10–90 ms per call.
//!   Same packages; payloads are copied into [`FakeYum::fs`].
//!
//! Needs `dnf`, `rpm`, `rpmbuild` and `createrepo_c` for [`Sandbox`] (Debian packages `dnf`,
//! `rpm`, `createrepo-c`; `scripts/test.sh` installs them). Without them [`Sandbox::try_new`]
//! prints a message and returns `None` (the test skips), except when `CI` is set: then it
//! panics, CI must run the real thing.
//!
//! Every payload script logs its calls: `zookeeper-deploy ARGS` appends `NAME-VER-REL: ARGS`,
//! any other script `NAME-VER-REL SCRIPT: ARGS`, to `$ZK_DEPLOY_LOG`, by default `deploy.log`
//! beside `bin/` (`ROOT/opt/foo/deploy.log`). It does not write the agent's deployed marker
//! yet.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A test package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TestPackage {
    pub name: &'static str,
    pub version: &'static str,
    pub release: &'static str,
    pub epoch: Option<u32>,
    /// Where its files go, e.g. `/opt/foo`.
    pub instdir: &'static str,
    /// The scripts it installs in `INSTDIR/bin/`.
    pub scripts: &'static [&'static str],
}

impl TestPackage {
    /// `NAME-VERSION-RELEASE`.
    pub fn nvr(&self) -> String {
        format!("{}-{}-{}", self.name, self.version, self.release)
    }

    /// `[EPOCH:]VERSION-RELEASE`, as `yum list` shows it.
    pub fn evr(&self) -> String {
        match self.epoch {
            Some(epoch) => format!("{epoch}:{}-{}", self.version, self.release),
            None => format!("{}-{}", self.version, self.release),
        }
    }
}

/// A package name longer than 40 characters (yum 3 wraps it in `list` output).
pub const LONG_NAME: &str = "zookeeper-deployment-test-package-with-a-long-name";

const DEPLOY: &[&str] = &["zookeeper-deploy"];
const RC: &[&str] = &["starting-deployments", "ending-deployments"];

const fn pkg(
    name: &'static str,
    version: &'static str,
    instdir: &'static str,
    scripts: &'static [&'static str],
) -> TestPackage {
    TestPackage {
        name,
        version,
        release: "1",
        epoch: None,
        instdir,
        scripts,
    }
}

/// The packages of both repositories (all noarch, release 1, no dependencies):
/// - `foo` 1.0, 1.4, 2.0 → `/opt/foo/bin/zookeeper-deploy`
/// - `bar-1.0` 1.0 and `bar-1.4` 1.4 (version in the name) → `/opt/bar-1.x/bin/zookeeper-deploy`
/// - `webapp` 1.0, 1.4, 2.0; `worker` 1.0, 1.1; `cache-1.2` 1.2 → `/opt/NAME/bin/zookeeper-deploy`
/// - `webrc` 1.0, 1.1 and `otherrc` 1.0 → `/opt/NAME/bin/starting-deployments` and
///   `ending-deployments` (role controllers)
/// - `epochy` 1:2.5-1 (an epoch) and [`LONG_NAME`] 1.0 → `/opt/NAME/bin/zookeeper-deploy`
pub const PACKAGES: &[TestPackage] = &[
    pkg("foo", "1.0", "/opt/foo", DEPLOY),
    pkg("foo", "1.4", "/opt/foo", DEPLOY),
    pkg("foo", "2.0", "/opt/foo", DEPLOY),
    pkg("bar-1.0", "1.0", "/opt/bar-1.0", DEPLOY),
    pkg("bar-1.4", "1.4", "/opt/bar-1.4", DEPLOY),
    pkg("webapp", "1.0", "/opt/webapp", DEPLOY),
    pkg("webapp", "1.4", "/opt/webapp", DEPLOY),
    pkg("webapp", "2.0", "/opt/webapp", DEPLOY),
    pkg("worker", "1.0", "/opt/worker", DEPLOY),
    pkg("worker", "1.1", "/opt/worker", DEPLOY),
    pkg("cache-1.2", "1.2", "/opt/cache-1.2", DEPLOY),
    pkg("webrc", "1.0", "/opt/webrc", RC),
    pkg("webrc", "1.1", "/opt/webrc", RC),
    pkg("otherrc", "1.0", "/opt/otherrc", RC),
    TestPackage {
        epoch: Some(1),
        ..pkg("epochy", "2.5", "/opt/epochy", DEPLOY)
    },
    pkg(
        LONG_NAME,
        "1.0",
        "/opt/zookeeper-deployment-test-package-with-a-long-name",
        DEPLOY,
    ),
];

/// The payload script, with `nvr` as its package's `NAME-VERSION-RELEASE`.
pub fn payload_script(nvr: &str) -> String {
    format!(
        r#"#!/bin/sh
# Test payload of {nvr}: appends "{nvr}: ARGS" (zookeeper-deploy) or "{nvr} SCRIPT: ARGS"
# (any other script) to $ZK_DEPLOY_LOG, by default deploy.log beside bin/.
# As zookeeper-deploy it behaves like a real deploy script: it writes (or, with -u, removes)
# $ZKDEPLOYMENT_ROOT/etc/<app>/<marker>.<n>.deployed. Test knobs (from the agent's
# environment): ZK_TEST_FAIL=PATH fails deploying PATH with some output; ZK_TEST_SLEEP=S
# sleeps S seconds; ZK_TEST_TIMES=FILE gets "start|end <rpm> <path> <n> <host> <time>" lines;
# ZK_TEST_ENV=FILE gets the ZKDEPLOYMENT_* environment (and GLIBC_TUNABLES) and the properties file;
# ZK_TEST_FAIL_ROLE=starting|ending fails starting-deployments / ending-deployments;
# ZK_TEST_DAEMON=FILE leaves a daemon (`sleep 100000`, holding the script's stdout and
# stderr; with ZK_TEST_DAEMON_WRITES set, `yes` writing to them for ever) and appends its pid to
# FILE; ZK_TEST_OUTPUT_MB=N prints N MiB of output lines.
me=$(basename "$0")
log=${{ZK_DEPLOY_LOG:-$(dirname "$0")/../deploy.log}}
if [ "$me" = zookeeper-deploy ]; then tag='{nvr}'; else tag="{nvr} $me"; fi
printf '%s\n' "$tag: $*" >> "$log"
if [ "$me" = "${{ZK_TEST_FAIL_ROLE:-}}-deployments" ]; then
  echo "$me failed: the test asked for it"
  exit 4
fi
[ "$me" = zookeeper-deploy ] || exit 0
rpm=$(basename "$(cd "$(dirname "$0")/.." && pwd)")
app=$(printf %s "$rpm" | sed -E 's/-[0-9]+(\.[0-9]+)*$//')
undeploy=no
if [ "$1" = -u ]; then undeploy=yes; shift; fi
if [ "$1" = -r ]; then shift 2; fi
path=$1 n=$2
[ -n "${{ZK_TEST_TIMES:-}}" ] && echo "start $rpm $path $n ${{ZKDEPLOYMENT_HOST_ID:-}} $(date +%s.%N)" >> "$ZK_TEST_TIMES"
if [ -n "${{ZK_TEST_ENV:-}}" ]; then
  env | grep '^ZKDEPLOYMENT_\|^ZC_ZK\|^HOME=\|^GLIBC_TUNABLES=' | sort >> "$ZK_TEST_ENV"
  [ -n "${{ZKDEPLOYMENT_PROPERTIES:-}}" ] && cat "$ZKDEPLOYMENT_PROPERTIES" >> "$ZK_TEST_ENV"
fi
[ -n "${{ZK_TEST_SLEEP:-}}" ] && sleep "$ZK_TEST_SLEEP"
[ -n "${{ZK_TEST_OUTPUT_MB:-}}" ] && yes 'chatty deploy script output, chatty deploy script output' | head -c "${{ZK_TEST_OUTPUT_MB}}M"
if [ -n "${{ZK_TEST_DAEMON:-}}" ]; then
  if [ -n "${{ZK_TEST_DAEMON_WRITES:-}}" ]; then yes 'daemon output' & else sleep 100000 & fi
  echo $! >> "$ZK_TEST_DAEMON"
  echo "started a daemon"
fi
if [ "$undeploy" = no ] && [ "${{ZK_TEST_FAIL:-}}" = "$path" ]; then
  echo "deploying $path failed: the test asked for it"
  echo "second line of output" >&2
  exit 3
fi
if [ -n "${{ZKDEPLOYMENT_ROOT:-}}" ] && [ -n "$path" ]; then
  marker=$(printf %s "$path" | sed -e 's,^/,,' -e 's/%/%25/g' -e 's/,/%2C/g' -e 's,/,\,,g')
  dir="${{ZKDEPLOYMENT_ROOT%/}}/etc/$app"
  if [ "$undeploy" = yes ]; then rm -f "$dir/$marker.$n.deployed"; else mkdir -p "$dir" && : > "$dir/$marker.$n.deployed"; fi
fi
[ -n "${{ZK_TEST_TIMES:-}}" ] && echo "end $rpm $path $n ${{ZKDEPLOYMENT_HOST_ID:-}} $(date +%s.%N)" >> "$ZK_TEST_TIMES"
exit 0
"#
    )
}

/// The one spec file every test RPM is built from (`--define`s: pkgname, pkgver, pkgrel,
/// instdir, scripts, and pkgepoch when there is one).
fn spec_text() -> String {
    let script = payload_script("@NVR@")
        .replace('%', "%%")
        .replace("@NVR@", "%{name}-%{version}-%{release}");
    format!(
        r#"Name:           %{{pkgname}}
Version:        %{{pkgver}}
Release:        %{{pkgrel}}
%{{?pkgepoch:Epoch:          %{{pkgepoch}}}}
Summary:        zkdeployment test package %{{pkgname}} %{{pkgver}}
License:        MIT
BuildArch:      noarch
# No automatic Requires (the shebang would add /bin/sh, which nothing in the empty
# installroot provides), and no %%pre/%%post scriptlets (they force Requires(post): /bin/sh).
AutoReqProv:    no

%description
zkdeployment test package: installs %{{scripts}} in %{{instdir}}/bin.

%prep
%build

%install
mkdir -p %{{buildroot}}%{{instdir}}/bin
for s in %{{scripts}}; do
cat > %{{buildroot}}%{{instdir}}/bin/$s <<'SCRIPT'
{script}SCRIPT
chmod 0755 %{{buildroot}}%{{instdir}}/bin/$s
done

%files
%dir %{{instdir}}
%dir %{{instdir}}/bin
%{{instdir}}/bin/*
"#
    )
}

// ---------------------------------------------------------------------------------------------
// Tools.

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The tools [`Sandbox`] needs that are not on `PATH`.
pub fn missing_tools() -> Vec<&'static str> {
    let mut needed = vec!["dnf", "rpm", "rpmbuild", "createrepo_c"];
    if !is_root() {
        needed.push("unshare");
    }
    needed
        .into_iter()
        .filter(|tool| find_program(tool).is_none())
        .collect()
}

/// Whether the real-dnf tests can run. Missing tools: panics when `CI` is set, else prints
/// why the test is skipped and returns false.
pub fn dnf_available() -> bool {
    let missing = missing_tools();
    if missing.is_empty() {
        return true;
    }
    let why = format!(
        "the real-dnf tests need {} (Debian: apt-get install rpm dnf createrepo-c; \
         scripts/test.sh installs them)",
        missing.join(", ")
    );
    super::missing_tool(&why);
    false
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn write_executable(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", path.display()));
}

fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The shared repository of test RPMs.

/// The directory holding `repo/` (the RPMs and their metadata), built on first use.
fn shared_repo() -> &'static Path {
    static REPO: OnceLock<PathBuf> = OnceLock::new();
    REPO.get_or_init(build_shared_repo)
}

fn build_shared_repo() -> PathBuf {
    let spec = spec_text();
    let mut hasher = DefaultHasher::new();
    spec.hash(&mut hasher);
    PACKAGES.hash(&mut hasher);
    let fingerprint = format!("{:016x}", hasher.finish());
    let base = std::env::temp_dir().join(format!("zkd-rpm-repo-{}", nix::unistd::getuid()));
    fs::create_dir_all(&base).unwrap_or_else(|e| panic!("cannot create {}: {e}", base.display()));
    let lock_path = base.join("lock");
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", lock_path.display()));
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("cannot lock {}: {e}", lock_path.display()));
    let dir = base.join(fingerprint);
    if dir.join("ready").is_file() {
        return dir;
    }
    if dir.exists() {
        // A build that died half-way.
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("cannot remove {}: {e}", dir.display()));
    }
    let repo = dir.join("repo");
    let home = dir.join("home");
    for d in [&repo, &home] {
        fs::create_dir_all(d).unwrap_or_else(|e| panic!("cannot create {}: {e}", d.display()));
    }
    let spec_path = dir.join("test.spec");
    fs::write(&spec_path, spec).expect("cannot write the spec");
    let builds: Vec<_> = PACKAGES
        .iter()
        .map(|p| {
            let top = dir.join("build").join(p.nvr());
            fs::create_dir_all(&top).expect("cannot create a build directory");
            let log = fs::File::create(top.join("build.log")).expect("cannot create build.log");
            let mut cmd = Command::new("rpmbuild");
            cmd.arg("-bb")
                .arg("--quiet")
                .arg("--define")
                .arg(format!("_topdir {}", top.display()))
                .arg("--define")
                .arg(format!("pkgname {}", p.name))
                .arg("--define")
                .arg(format!("pkgver {}", p.version))
                .arg("--define")
                .arg(format!("pkgrel {}", p.release))
                .arg("--define")
                .arg(format!("instdir {}", p.instdir))
                .arg("--define")
                .arg(format!("scripts {}", p.scripts.join(" ")));
            if let Some(epoch) = p.epoch {
                cmd.arg("--define").arg(format!("pkgepoch {epoch}"));
            }
            // Its own HOME: nothing lands in the caller's ~ (Debian's rpm keeps ~/.rpmdb).
            cmd.arg(&spec_path)
                .env("HOME", &home)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("cannot clone a file handle"))
                .stderr(log);
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run rpmbuild: {e}"));
            (p, top, child)
        })
        .collect();
    for (p, top, mut child) in builds {
        let status = child.wait().expect("cannot wait for rpmbuild");
        let rpm = top
            .join("RPMS/noarch")
            .join(format!("{}.noarch.rpm", p.nvr()));
        if !status.success() || !rpm.is_file() {
            panic!(
                "rpmbuild failed for {} ({status}):\n{}",
                p.nvr(),
                fs::read_to_string(top.join("build.log")).unwrap_or_default()
            );
        }
        fs::copy(&rpm, repo.join(rpm.file_name().unwrap()))
            .unwrap_or_else(|e| panic!("cannot copy {}: {e}", rpm.display()));
    }
    let output = Command::new("createrepo_c")
        .arg("-q")
        .arg(&repo)
        .env("HOME", &home)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run createrepo_c: {e}"));
    assert!(
        output.status.success(),
        "createrepo_c failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = fs::remove_dir_all(dir.join("build"));
    fs::write(dir.join("ready"), "").expect("cannot write the ready marker");
    dir
}

// ---------------------------------------------------------------------------------------------
// The real dnf.

/// The one dnf sandbox maker, shared with the demo.
const RPM_SANDBOX_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rpm-sandbox.sh");

/// The real dnf on a fresh installroot (see the module documentation). Removed on drop.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    /// A fresh sandbox; `None` (after printing why) when dnf & co. are missing and `CI` is
    /// not set. Use as `let Some(sandbox) = Sandbox::try_new() else { return };`.
    pub fn try_new() -> Option<Sandbox> {
        dnf_available().then(Sandbox::create)
    }

    fn create() -> Sandbox {
        let repo = shared_repo().join("repo");
        let dir = tempfile::Builder::new()
            .prefix("zkd-rpm-sb-")
            .tempdir()
            .expect("cannot create the sandbox directory");
        // The one dnf sandbox, shared with the demo: scripts/rpm-sandbox.sh.
        let output = Command::new("bash")
            .arg(RPM_SANDBOX_SCRIPT)
            .arg("--over")
            .arg(&repo)
            .arg(dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {RPM_SANDBOX_SCRIPT}: {e}"));
        assert!(
            output.status.success(),
            "{RPM_SANDBOX_SCRIPT} --over failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Sandbox { dir }
    }

    /// The `yum` wrapper: give it to the agent (`Yum::new(sandbox.yum_path())`).
    pub fn yum_path(&self) -> String {
        self.dir.path().join("bin/yum").display().to_string()
    }

    /// The `rpm` wrapper on the sandbox database.
    pub fn rpm_path(&self) -> String {
        self.dir.path().join("bin/rpm").display().to_string()
    }

    /// The installroot: packages install under `ROOT/opt/...`. The agent's `root`.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `ROOT/opt/NAME`.
    pub fn opt(&self, name: &str) -> PathBuf {
        self.root().join("opt").join(name)
    }

    /// The arguments of each call of the `yum` wrapper so far (e.g. `-y install foo-1.0`).
    pub fn calls(&self) -> Vec<String> {
        read_lines(&self.dir.path().join("calls.log"))
    }

    /// `VERSION-RELEASE` of the installed package `name`, per the sandbox's rpm database.
    pub fn rpm_q(&self, name: &str) -> Option<String> {
        let output = Command::new(self.rpm_path())
            .args(["-q", "--qf", "%{VERSION}-%{RELEASE}", name])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run the sandbox rpm: {e}"));
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// The yum 3 fake.

/// `tests/support/fake-yum` on its own state directory, holding [`PACKAGES`]. Removed on drop.
pub struct FakeYum {
    dir: tempfile::TempDir,
}

impl Default for FakeYum {
    fn default() -> Self {
        FakeYum::new()
    }
}

impl FakeYum {
    /// A fresh state: [`PACKAGES`] available (with their payloads), nothing installed.
    pub fn new() -> FakeYum {
        let dir = tempfile::Builder::new()
            .prefix("zkd-fake-yum-")
            .tempdir()
            .expect("cannot create the fake yum directory");
        let fake = FakeYum { dir };
        for sub in ["bin", "repo", "installed", "fs", "knobs"] {
            fs::create_dir_all(fake.state().join(sub)).expect("cannot create a fake yum directory");
        }
        for p in PACKAGES {
            let payload = fake
                .state()
                .join("repo")
                .join(p.name)
                .join(format!("{}.noarch", p.evr()));
            let bin = payload.join(p.instdir.trim_start_matches('/')).join("bin");
            fs::create_dir_all(&bin).expect("cannot create a fake payload");
            for script in p.scripts {
                write_executable(&bin.join(script), &payload_script(&p.nvr()));
            }
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/fake-yum");
        let q = |p: &Path| sh_quote(&p.display().to_string());
        write_executable(
            &fake.state().join("bin/yum"),
            &format!(
                "#!/bin/sh\n\
                 # yum -> the yum 3 fake (tests/support/rpm.rs)\n\
                 FAKE_YUM_ROOT={state}; export FAKE_YUM_ROOT\n\
                 for k in FAKE_YUM_MISSING_RC FAKE_YUM_FAIL FAKE_YUM_SLEEP; do\n  \
                 if [ -f \"$FAKE_YUM_ROOT/knobs/$k\" ]; then export \"$k=$(cat \"$FAKE_YUM_ROOT/knobs/$k\")\"; fi\n\
                 done\n\
                 exec bash {script} \"$@\"\n",
                state = q(fake.state()),
                script = q(&script),
            ),
        );
        fake
    }

    /// The state directory (`FAKE_YUM_ROOT`).
    pub fn state(&self) -> &Path {
        self.dir.path()
    }

    /// The `yum` wrapper: give it to the agent (`Yum::new(fake.yum_path())`).
    pub fn yum_path(&self) -> String {
        self.state().join("bin/yum").display().to_string()
    }

    /// Where payloads are installed (the fake's filesystem root: `FS/opt/foo/...`).
    pub fn fs(&self) -> PathBuf {
        self.state().join("fs")
    }

    /// The arguments of each call so far (e.g. `-y install foo-1.0`).
    pub fn calls(&self) -> Vec<String> {
        read_lines(&self.state().join("calls.log"))
    }

    /// `[EPOCH:]VERSION-RELEASE` of the installed package `name` (`0:` for no epoch), if any.
    pub fn installed(&self, name: &str) -> Option<String> {
        let text = fs::read_to_string(self.state().join("installed").join(name)).ok()?;
        text.split_whitespace().next().map(str::to_string)
    }

    fn set_knob(&self, knob: &str, value: Option<&str>) {
        let path = self.state().join("knobs").join(knob);
        match value {
            Some(value) => fs::write(&path, value).expect("cannot write a fake yum knob"),
            None => {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// Exit status of install/downgrade when nothing matched: 0 (default, yum ≤ 3.2.26) or 1
    /// (yum ≥ 3.2.27, `Error: Nothing to do`).
    pub fn set_missing_rc(&self, rc: i32) {
        self.set_knob("FAKE_YUM_MISSING_RC", Some(&rc.to_string()));
    }

    /// Calls whose `COMMAND ARGS` match the (bash) regex fail with exit 1; `None` clears it.
    pub fn set_fail(&self, regex: Option<&str>) {
        self.set_knob("FAKE_YUM_FAIL", regex);
    }
}
