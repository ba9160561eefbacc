//! The soak's deploy and role-controller scripts, installed into every host's fake yum
//! repository in place of the usual test payload (the packages, versions and paths stay
//! those of `tests/support/rpm.rs`).
//!
//! Every run (but undeploys, which take no lock) first asks the lock oracle (`oracle.rs`,
//! over TCP at `$SOAK_ORACLE`) to check, while the script runs, that its host holds the lock
//! it must hold; then it appends `start ID HOST AGENT-PID KIND PATH N VERSION TIME PKG` (PKG:
//! its package's version) to
//! `$SOAK_DIR/scripts.log`, works for a moment, and appends `end ID ... TIME RC` just before
//! it exits (TIME from `date +%s.%N`, one clock for the whole machine). KIND is `deploy`,
//! `undeploy`, `starting-deployments`, `ending-deployments` or `health`.
//!
//! One-shot fault knobs, files in `$SOAK_DIR/knobs/HOST/` taken (renamed) by the first
//! deploy run that finds them:
//! - `fail`: the run fails (exit 3);
//! - `fail-node` (its content an application path): the first deploy run of that node fails
//!   (exit 3), other nodes' runs leave it (the nemesis's `budget-fail`);
//! - `hang`: the run writes its pid to `hanging` and waits; SIGTERM makes it fail (exit 7),
//!   SIGUSR1 lets it finish normally (the nemesis's deadline decides which);
//! - `daemon`: the run starts a background process that keeps the script's stdout open for
//!   3 s after the script exits;
//! - `daemon-writes`: the run leaves a daemon (`yes`, 20 s at most) writing to the script's
//!   output as fast as it can, and writes its pid to `daemon-pid` (the agent must stop reading
//!   soon after the script exits: the daemon's next write then kills it);
//! - `chatty`: the run prints 8 MiB of output lines, then writes `chatty-done`;
//! - `pause` (deploy or health run): the run writes `ID KIND PATH N VERSION` to `paused` and
//!   waits while that file exists (20 s at most): the nemesis kills its agent (a holder
//!   killed mid-step) or cuts its session, then removes the file.
//!
//! The same script is the packages' `zookeeper-health` check (KIND `health`, installed for
//! the versions [`super::tree::has_health`] names): it asks the oracle and logs like the
//! others, and passes at once unless a health knob says otherwise:
//! - `health-slow`: this run fails, the next one of the instance passes;
//! - `health-never`: every run of the instance fails for longer than the node's
//!   `health-deadline` (so the step fails and halts the cluster), then they pass again;
//! - `health-hang`: the run never ends by itself (the agent kills it at the deadline).
//!
//! A health check logs its `start` before it asks the oracle (waiting 1 s at most for the
//! answer: a slow oracle must not fail the check), and a watcher logs its `end` (status 137)
//! if the agent kills it at its deadline (a hang, or a pause longer than the deadline).

use std::os::unix::fs::PermissionsExt;

use super::support::rpm::{FakeYum, PACKAGES};

/// The script (bash: it needs `/dev/tcp` and `$RANDOM`).
pub const SCRIPT: &str = r#"#!/bin/bash
me=${0##*/}
bindir=${0%/*}
host=${ZKDEPLOYMENT_HOST_ID:-unknown}
ver=${ZKDEPLOYMENT_VERSION:-unknown}
knobs=$SOAK_DIR/knobs/$host
log=$SOAK_DIR/scripts.log
role=${ZKDEPLOYMENT_ROLE:--}
kind=$me n=- path=${1:--}
if [ "$me" = zookeeper-deploy ] || [ "$me" = zookeeper-health ]; then
  kind=deploy
  [ "$me" = zookeeper-health ] && kind=health
  if [ "$1" = -u ]; then kind=undeploy; shift; fi
  if [ "$1" = -r ]; then shift 2; fi
  path=$1 n=$2
fi
id="$host:$$:$RANDOM$RANDOM"
watcher=
finish() {
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  echo "end $id $host $kind $path $n $ver $(date +%s.%N) $1" >> "$log"
  exit "$1"
}
oracle_wait=20
if [ "$kind" = health ]; then
  # The agent kills a check at its deadline: log the start first, have a watcher log the
  # end (137) once this shell is gone or a zombie (the agent may reap it late), and wait
  # for the oracle briefly (a slow oracle must not fail the check).
  echo "start $id $host $PPID $kind $path $n $ver $(date +%s.%N) ${pkgver:--}" >> "$log"
  ( while grep -qs '^State:[[:space:]]*[^Z]' /proc/$$/status; do sleep 0.02; done
    echo "end $id $host $kind $path $n $ver $(date +%s.%N) 137" >> "$log" ) >/dev/null 2>&1 &
  watcher=$!
  oracle_wait=1
fi
if [ "$kind" != undeploy ]; then
  answer=noconnect
  if exec 3<>"/dev/tcp/127.0.0.1/$SOAK_ORACLE"; then
    printf '%s\n' "$id $host $PPID $role $kind $path $n $ver" >&3
    read -r -t "$oracle_wait" answer <&3 || answer=noanswer
    exec 3>&-
  fi
fi
[ "$kind" = health ] || echo "start $id $host $PPID $kind $path $n $ver $(date +%s.%N) ${pkgver:--}" >> "$log"
take() { [ -e "$knobs/$1" ] && mv "$knobs/$1" "$knobs/$1.$$" 2>/dev/null; }
if { [ "$kind" = deploy ] || [ "$kind" = health ]; } && take pause; then
  echo "$id $kind $path $n $ver" > "$knobs/paused.$$" && mv "$knobs/paused.$$" "$knobs/paused"
  for _ in $(seq 200); do [ -e "$knobs/paused" ] || break; sleep 0.1; done
  rm -f "$knobs/paused"
fi
if [ "$kind" = health ]; then
  inst=$(printf %s "$path" | tr / ,).$n
  state="$knobs/health-state.$inst"
  if take health-hang; then
    echo "soak: hanging"
    for _ in $(seq 600); do sleep 0.1; done
    finish 1
  fi
  if take health-slow; then echo "slow 1" > "$state"; fi
  if take health-never; then echo "never $(( $(date +%s) + 7 ))" > "$state"; fi
  read -r mode left < "$state" 2>/dev/null
  case $mode in
    slow)
      if [ "$left" -gt 0 ]; then
        echo "slow $((left - 1))" > "$state"
        echo "soak: not healthy yet ($left more)"
        finish 1
      fi
      rm -f "$state" ;;
    never)
      if [ "$(date +%s)" -lt "$left" ]; then
        echo "soak: never healthy"
        finish 1
      fi
      rm -f "$state" ;;
  esac
  sleep "0.0$((RANDOM % 10))"
  finish 0
fi
if [ "$kind" = deploy ]; then
  if [ "$(cat "$knobs/fail-node" 2>/dev/null)" = "$path" ] && take fail-node; then
    echo "soak: $path failing as the nemesis asked (fail-node)"
    finish 3
  fi
  if [ -e "$knobs/fail" ] && mv "$knobs/fail" "$knobs/fail.$$" 2>/dev/null; then
    echo "soak: $path failing as the nemesis asked"
    finish 3
  fi
  if [ -e "$knobs/hang" ] && mv "$knobs/hang" "$knobs/hang.$$" 2>/dev/null; then
    sleep 300 & sp=$!
    trap 'kill $sp 2>/dev/null; rm -f "$knobs/hanging"; echo "soak: hung past its deadline"; finish 7' TERM
    trap 'kill $sp 2>/dev/null' USR1
    echo $$ > "$knobs/hanging.$$" && mv "$knobs/hanging.$$" "$knobs/hanging"
    wait $sp
    rm -f "$knobs/hanging"
    trap - TERM USR1
  fi
  if [ -e "$knobs/daemon" ] && mv "$knobs/daemon" "$knobs/daemon.$$" 2>/dev/null; then
    (sleep 3; echo "soak: daemon of $id exits") &
  fi
  if take daemon-writes; then
    timeout 20 yes "soak: a daemon of $id writing to its output" &
    echo $! > "$knobs/daemon-pid.$$" && mv "$knobs/daemon-pid.$$" "$knobs/daemon-pid"
  fi
  if take chatty; then
    yes "soak: chatty output of $id, a line long enough to look like a real one" | head -c 8M
    : > "$knobs/chatty-done"
  fi
fi
sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
if [ "$kind" = deploy ] || [ "$kind" = undeploy ]; then
  rpm=${bindir%/bin}; rpm=${rpm##*/}
  marker=$(printf %s "$path" | sed -e 's,^/,,' -e 's/%/%25/g' -e 's/,/%2C/g' -e 's,/,\,,g')
  dir="${ZKDEPLOYMENT_ROOT%/}/etc/$rpm"
  if [ "$kind" = undeploy ]; then rm -f "$dir/$marker.$n.deployed"; else mkdir -p "$dir" && : > "$dir/$marker.$n.deployed"; fi
fi
finish 0
"#;

/// Replaces the scripts of every package in `fake`'s repository with [`SCRIPT`] (before
/// anything is installed), and adds it as the `zookeeper-health` check of the versions that
/// have one.
pub fn install(fake: &FakeYum) {
    for p in PACKAGES {
        let bin = fake
            .state()
            .join("repo")
            .join(p.name)
            .join(format!("{}.noarch", p.evr()))
            .join(p.instdir.trim_start_matches('/'))
            .join("bin");
        let health = p
            .scripts
            .contains(&"zookeeper-deploy")
            .then_some("zookeeper-health")
            .filter(|_| super::tree::has_health(p.name, p.version));
        for script in p.scripts.iter().copied().chain(health) {
            let path = bin.join(script);
            let text = SCRIPT.replacen("\n", &format!("\npkgver={}\n", p.version), 1);
            std::fs::write(&path, text).expect("write a soak script");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .expect("chmod a soak script");
        }
    }
}
