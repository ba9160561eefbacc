#!/usr/bin/env bash
# demo.sh: a first look at zkdeployment. On a fresh Debian machine: `sudo ./scripts/demo.sh`.
#
#   scripts/demo.sh [--keep]
#
# Installs what is missing (as scripts/test.sh does), builds the release binary, starts a
# throw-away local ZooKeeper, imports the example fleet of fixtures/tree/ (every *.zk file with
# --trim, then every *.zkx overlay with --no-trim, as the syncer does), prints the resulting
# tree with `zkdeployment tree export`, and stops the server again.
# --keep leaves the server running and prints how to use and stop it.
# Environment: ZKD_SKIP_INSTALL=1 skips the installation step.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(zkd_repo_root)"

keep=0
case ${1:-} in
  "") ;;
  --keep) keep=1 ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) zkd_die "unknown argument $1 (usage: $0 [--keep])" ;;
esac

# run CMD...: print a command, then run it.
run() {
  printf '    $ %s\n' "$*" >&2
  "$@"
}

zkd_step "checking prerequisites"
zkd_ensure_system_packages
zkd_ensure_rust

zkd_step "building the release binary"
run cargo build --release --locked
bin=target/release/zkdeployment

zkd_step "starting a local ZooKeeper"
ZK_DIR=""
stop_zk() {
  if [[ -n $ZK_DIR ]]; then
    zkd_step "stopping ZooKeeper"
    scripts/zk-server.sh stop "$ZK_DIR" || true
    ZK_DIR=""
  fi
}
trap stop_zk EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
zk_vars=$(scripts/zk-server.sh)
eval "$zk_vars"
zkd_note "ZooKeeper is listening on $ZK_CONNECT"

shopt -s nullglob
zk_files=(fixtures/tree/*.zk)
zkx_files=(fixtures/tree/*.zkx)
((${#zk_files[@]} > 0)) || zkd_die "no fixtures/tree/*.zk files found"

zkd_step "importing the authoritative trees (*.zk, children not in the text are trimmed)"
for f in "${zk_files[@]}"; do
  run "$bin" tree import --zookeeper "$ZK_CONNECT" --trim "$f" /
done
if ((${#zkx_files[@]} > 0)); then
  zkd_step "importing the overlays (*.zkx, nothing is trimmed)"
  for f in "${zkx_files[@]}"; do
    run "$bin" tree import --zookeeper "$ZK_CONNECT" --no-trim "$f" /
  done
fi

zkd_step "the tree now in ZooKeeper"
run "$bin" tree export --zookeeper "$ZK_CONNECT"

zkd_step "what the host demo-host (name demo-host.example.com, no role) should deploy"
zkd_note "/acme/web     webapp 1.4, 2 instances      (deploy/demo-host, n = 2)"
zkd_note "/acme/cache   cache-1.2, any version       (deploy/demo-host)"
zkd_note "/globex/jobs  worker 1.0, via a property link (deploy/demo-host.example.com)"
zkd_note "(details: fixtures/README.md)"
if ((keep)); then
  trap - EXIT
  zkd_step "ZooKeeper keeps running (--keep)"
  zkd_note "export again:  $bin tree export --zookeeper $ZK_CONNECT"
  zkd_note "stop it:       scripts/zk-server.sh stop $ZK_DIR"
fi
