#!/usr/bin/env bash
# demo.sh: the whole story, on a fresh Debian machine as root: `./scripts/demo.sh`.
#
#   scripts/demo.sh [--keep]
#
# 1. installs what is missing (Debian's zookeeper, rpm, dnf, createrepo-c, git) and builds the
#    release binary;
# 2. starts a throw-away ZooKeeper on a free loopback port;
# 3. makes a git repository from fixtures/tree/ and runs `zkdeployment sync` (git -> ZooKeeper);
# 4. builds small RPMs (webapp, worker, cache-1.2) into a dnf sandbox (an installroot: the
#    host's packages are not touched) and runs the agent once for the host `demo-host`, which
#    installs them with the real dnf and runs their deploy scripts;
# 5. shows `zkdeployment status`, `zkdeployment monitor`, and the sandbox's /opt and /etc;
# 6. stops what it started (--keep leaves ZooKeeper and the work directory).
# Environment: ZKD_SKIP_INSTALL=1 skips the installation step.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(zkd_repo_root)"
repo_root=$PWD

keep=0
case ${1:-} in
  "") ;;
  --keep) keep=1 ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
  *) zkd_die "unknown argument $1 (usage: $0 [--keep])" ;;
esac

run() {
  printf '    $ %s\n' "$*" >&2
  "$@"
}

zkd_step "checking prerequisites"
zkd_ensure_system_packages
zkd_ensure_rust

zkd_step "building the release binary"
run cargo build --release --locked
bin=$repo_root/target/release/zkdeployment

work=$(mktemp -d /tmp/zkdeployment-demo.XXXXXX)
ZK_DIR=""
cleanup() {
  if ((keep)); then
    zkd_note "kept: ZooKeeper on ${ZK_CONNECT:-?} (stop: scripts/zk-server.sh stop $ZK_DIR), work directory $work"
    return
  fi
  if [[ -n $ZK_DIR ]]; then
    zkd_step "stopping ZooKeeper and removing $work"
    scripts/zk-server.sh stop "$ZK_DIR" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

zkd_step "starting a local ZooKeeper"
eval "$(scripts/zk-server.sh)"
zkd_note "ZooKeeper is listening on $ZK_CONNECT"

zkd_step "making a git repository of the example fleet (fixtures/tree)"
mkdir -p "$work/repo"
cp fixtures/tree/*.zk fixtures/tree/*.zkx "$work/repo/"
git -C "$work/repo" init -q -b master
git -C "$work/repo" add .
git -C "$work/repo" -c user.name=demo -c user.email=demo@example.com commit -q -m "example fleet"
run ls "$work/repo"

zkd_step "checking the tree files offline"
run "$bin" tree check "$work"/repo/*.zk "$work"/repo/*.zkx
zkd_note "all files parse"

zkd_step "syncing git -> ZooKeeper (what cron runs every few minutes)"
run "$bin" sync -u "$work/repo" -t "$work/checkout" --lock-file "$work/sync.lock" \
  --tombstone "$work/tombstone" -z "$ZK_CONNECT"
run "$bin" status -z "$ZK_CONNECT"

zkd_step "building demo RPMs into a dnf sandbox (an installroot; the host is not touched)"
yum=$(run scripts/rpm-sandbox.sh "$work/sandbox" webapp:1.0 webapp:1.4 webapp:2.0 worker:1.0 worker:1.1 cache-1.2:1.2)
root=$work/sandbox/root
zkd_note "yum = $yum, root = $root"

cat > "$work/agent.cfg" <<CFG
[zkdeployment]
host-id = demo-host
host-name = demo-host.example.com
run-directory = $work/run
root = $root
yum = $yum
zookeeper = $ZK_CONNECT
CFG
zkd_step "the agent configuration of demo-host"
sed 's/^/    /' "$work/agent.cfg" >&2

zkd_step "what the agent would do (deploy --dry-run changes nothing)"
rc=0
run "$bin" deploy "$work/agent.cfg" --dry-run || rc=$?
zkd_note "exit $rc (10 = changes pending)"

zkd_step "starting the agent (as systemd would): it registers, installs with dnf, deploys"
printf '    $ %s\n' "$bin agent $work/agent.cfg &" >&2
"$bin" agent "$work/agent.cfg" 2> >(sed 's/^/    agent| /' >&2) &
agent_pid=$!
for _ in $(seq 1 600); do
  status=$(cat "$work/run/status" 2>/dev/null || true)
  [[ $status == *" done" || $status == *" error" ]] && break
  sleep 0.2
done
zkd_note "status file: $status"

zkd_step "the cluster now"
run "$bin" status -z "$ZK_CONNECT"

zkd_step "the Nagios check of demo-host"
run "$bin" monitor "$work/agent.cfg" -z "$ZK_CONNECT" || true

zkd_step "stopping the agent (SIGTERM: the step in progress would finish first)"
kill -TERM "$agent_pid"
wait "$agent_pid" || true

zkd_step "what is installed in the sandbox (dnf) and deployed (/opt, /etc markers)"
run "$yum" -q list installed
(cd "$root" && find opt etc -path 'opt/*/bin' -prune -o -print | sort | sed 's/^/    /') >&2
zkd_note "deploy log of webapp:"
sed 's/^/      /' "$root/opt/webapp/deploy.log" >&2

zkd_step "done: demo-host converged to the synced revision"
