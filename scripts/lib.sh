# shellcheck shell=bash
# lib.sh: helpers shared by scripts/test.sh and scripts/demo.sh. Source it, don't run it.
#
#   zkd_step MSG...            prints "==> MSG" (a step)
#   zkd_note MSG... / zkd_die MSG...
#   zkd_repo_root              prints the repository root (the parent of scripts/)
#   zkd_ensure_system_packages installs the missing Debian packages (needs root only then)
#   zkd_ensure_rust            makes `cargo` available (rustup, only if there is no cargo)
#
# Environment: ZKD_SKIP_INSTALL=1 checks nothing and installs nothing.

ZKD_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ZKD_APT_LOCK_WAIT=${ZKD_APT_LOCK_WAIT:-300}

zkd_step() { printf '==> %s\n' "$*" >&2; }
zkd_note() { printf '    %s\n' "$*" >&2; }
zkd_die() { printf 'error: %s\n' "$*" >&2; exit 1; }
zkd_repo_root() { (cd "$ZKD_LIB_DIR/.." && pwd); }

# zkd_apt_get ARGS...: apt-get, non-interactive, waiting up to ZKD_APT_LOCK_WAIT seconds while
# another apt/dpkg (unattended-upgrades, cloud-init...) holds the dpkg or lists lock.
zkd_apt_get() {
  local -
  set -o pipefail # rc below is apt-get's status, not tee's
  local deadline=$((SECONDS + ZKD_APT_LOCK_WAIT)) out rc
  out=$(mktemp)
  while :; do
    rc=0
    DEBIAN_FRONTEND=noninteractive apt-get \
      -o DPkg::Lock::Timeout="$((deadline - SECONDS > 0 ? deadline - SECONDS : 1))" \
      "$@" 2>&1 | tee "$out" >&2 || rc=$?
    if ((rc == 0)); then break; fi
    if grep -qiE 'could not get lock|unable to acquire|is another process using it' "$out" &&
      ((SECONDS < deadline)); then
      zkd_note "apt is busy (another package manager holds its lock), waiting..."
      sleep 5
      continue
    fi
    break
  done
  rm -f "$out"
  return "$rc"
}

# zkd_ensure_system_packages: the Debian packages the tests and the demo use. Each one is
# checked by a command or a file first; apt runs only when something is missing.
zkd_ensure_system_packages() {
  [[ ${ZKD_SKIP_INSTALL:-0} == 1 ]] && return 0
  local missing=()
  [[ -f /usr/share/java/zookeeper.jar ]] || missing+=(zookeeper)
  # ZooKeeper's TLS port (the TLS tests) needs Netty's jars; the tests make certificates with
  # the openssl command.
  [[ -f /usr/share/java/netty-handler.jar ]] || missing+=(libnetty-java)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
  command -v rpm >/dev/null 2>&1 || missing+=(rpm)
  command -v dnf >/dev/null 2>&1 || missing+=(dnf)
  command -v createrepo_c >/dev/null 2>&1 || missing+=(createrepo-c)
  command -v git >/dev/null 2>&1 || missing+=(git)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  if ! command -v cargo >/dev/null 2>&1 && ! [[ -x ${CARGO_HOME:-$HOME/.cargo}/bin/cargo ]]; then
    # rustup needs curl; the crates build C code (vendored libgit2, zlib).
    command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
    command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
  fi
  if ((${#missing[@]} == 0)); then
    zkd_note "system packages: all present"
    return 0
  fi
  zkd_step "installing missing Debian packages: ${missing[*]}"
  if [[ $(id -u) != 0 ]]; then
    zkd_die "missing packages: ${missing[*]}. Run as root (sudo $0) to install them, or: sudo apt-get install --no-install-recommends ${missing[*]}"
  fi
  command -v apt-get >/dev/null 2>&1 ||
    zkd_die "apt-get not found: this script installs packages on Debian/Ubuntu only; install ${missing[*]} yourself"
  zkd_apt_get update -q || zkd_die "apt-get update failed"
  zkd_apt_get install -y -q --no-install-recommends "${missing[@]}" ||
    zkd_die "apt-get install ${missing[*]} failed"
}

# zkd_ensure_rust: cargo on PATH, else ~/.cargo/bin, else install a minimal stable toolchain
# with rustup for the current user.
zkd_ensure_rust() {
  local cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
  if command -v cargo >/dev/null 2>&1; then return 0; fi
  if [[ -x $cargo_bin/cargo ]]; then
    PATH=$cargo_bin:$PATH
    export PATH
    return 0
  fi
  [[ ${ZKD_SKIP_INSTALL:-0} == 1 ]] && zkd_die "cargo not found (and ZKD_SKIP_INSTALL=1)"
  zkd_step "installing Rust (stable, minimal profile) with rustup into $cargo_bin"
  command -v curl >/dev/null 2>&1 || zkd_die "curl is needed to install Rust"
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
    sh -s -- -y --profile minimal --default-toolchain stable --no-modify-path >&2 ||
    zkd_die "rustup installation failed"
  PATH=$cargo_bin:$PATH
  export PATH
  command -v cargo >/dev/null 2>&1 || zkd_die "cargo still not found after installing rustup"
}

# zkd_ensure_kazoo: kazoo (Python's ZooKeeper client, from PyPI) for the lock
# interoperability tests; a failure to install it is reported, not fatal.
zkd_ensure_kazoo() {
  [[ ${ZKD_SKIP_INSTALL:-0} == 1 ]] && return 0
  python3 -c 'import kazoo' >/dev/null 2>&1 && return 0
  zkd_step "installing kazoo (pip) for the lock interoperability tests"
  python3 -m pip install --quiet --disable-pip-version-check kazoo >&2 ||
    zkd_note "could not install kazoo; the kazoo interoperability test will be skipped (it fails when CI is set)"
}
