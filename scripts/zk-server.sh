#!/usr/bin/env bash
# zk-server.sh: run a throw-away standalone ZooKeeper 3.8 (Debian package `zookeeper`) on
# 127.0.0.1 for tests and demos. It needs no systemd, no service and no root.
#
# Usage:
#   eval "$(scripts/zk-server.sh [--port P] [--dir D] [--tick MS] [--timeout S])"
#       Starts a server in the background and prints shell assignments for
#       ZK_PORT ZK_PID ZK_DIR ZK_CONNECT ZK_LOG (export them yourself if children need them).
#       Without --port a free loopback port is picked (retried if another process takes it
#       first); without --dir a temporary directory is made (and removed again by `stop`).
#       --tick MS is ZooKeeper's tickTime (default 2000); sessions may last 2x to 20x tick,
#       so `--tick 500` allows a 1 s minimum session timeout (fast expiry tests).
#   scripts/zk-server.sh stop DIR [--keep]
#       SIGTERM, then SIGKILL after 10 s. Removes DIR if this script created it (unless --keep).
#   scripts/zk-server.sh status DIR
#       Prints the server's `srvr` answer; exit status 0 only if it is serving.
#   scripts/zk-server.sh --foreground [--port P] [--dir D] [--tick MS]
#       Runs in the foreground with the log on the terminal; Ctrl-C stops it.
#   scripts/zk-server.sh --exec --port P --dir D [--tick MS]
#       Writes DIR/zoo.cfg and replaces itself with the server's JVM (log on stdout/stderr,
#       no readiness wait, DIR kept): for a caller that supervises the process itself, as
#       the tests do (tests/support/mod.rs), so scripts and tests start the same server.
#   scripts/zk-server.sh --exec --quorum --dir D
#       The same for one member of an ensemble whose DIR/zoo.cfg (with its server.N lines)
#       and DIR/data/myid the caller wrote (tests/support/ensemble.rs), or for a standalone
#       server whose zoo.cfg the caller wrote (a TLS server: tests/support/tls.rs).
#
# Environment:
#   ZK_JAR        default /usr/share/java/zookeeper.jar (its manifest Class-Path has the deps)
#   ZK_JAVA       default `java` from PATH
#   ZK_HEAP       JVM maximum heap, default 256m
#   ZK_LOG_LEVEL  slf4j-simple level (trace|debug|info|warn|error), default info
#
# Needs bash (it talks to the server through /dev/tcp), java and the Debian package zookeeper
# (`apt-get install zookeeper`; scripts/test.sh installs it). Ready in about 0.5-1 s.
set -euo pipefail

ZK_JAR=${ZK_JAR:-/usr/share/java/zookeeper.jar}
ZK_JAVA=${ZK_JAVA:-java}
ZK_HEAP=${ZK_HEAP:-256m}
ZK_LOG_LEVEL=${ZK_LOG_LEVEL:-info}
SLF4J_SIMPLE=/usr/share/java/slf4j-simple.jar
PROG=${0##*/}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# four_letter PORT WORD: the server's answer to a four-letter command (empty if none).
four_letter() {
  local port=$1 word=$2
  # shellcheck disable=SC2016 # $1 and $2 expand in the inner bash
  timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "%s" "$2" >&3 && cat <&3' \
    _ "$port" "$word" 2>/dev/null || true
}

# port_busy PORT: true if something accepts connections on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
  local p
  for _ in $(seq 1 50); do
    if command -v python3 >/dev/null 2>&1; then
      # Let the kernel choose, as a Rust test does with 127.0.0.1:0.
      p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    else
      p=$((20000 + RANDOM % 30000))
    fi
    port_busy "$p" || { echo "$p"; return 0; }
  done
  die "no free port found on 127.0.0.1"
}

check_install() {
  [[ -f $ZK_JAR ]] ||
    die "$ZK_JAR not found: install ZooKeeper (sudo apt-get install zookeeper, or sudo ./scripts/test.sh), or set ZK_JAR"
  command -v "$ZK_JAVA" >/dev/null 2>&1 ||
    die "java not found: sudo apt-get install default-jre-headless (or set ZK_JAVA)"
}

write_config() { # DIR PORT TICK
  cat >"$1/zoo.cfg" <<EOF
# written by $PROG
tickTime=$3
dataDir=$1/data
clientPort=$2
clientPortAddress=127.0.0.1
maxClientCnxns=0
4lw.commands.whitelist=*
admin.enableServer=false
forceSync=no
EOF
}

# java_command DIR [MAIN]: fills the array JAVA_CMD (MAIN: the server class, default the
# standalone ZooKeeperServerMain).
java_command() {
  local main=${2:-org.apache.zookeeper.server.ZooKeeperServerMain}
  local cp=$ZK_JAR
  # Debian's zookeeper has no slf4j binding (NOP logger: not even a BindException would show).
  if [[ -f $SLF4J_SIMPLE ]]; then cp+=":$SLF4J_SIMPLE"; fi
  # TLS (secureClientPort, NettyServerCnxnFactory): the jar's manifest does not name Netty's
  # jars (Debian package libnetty-java); without them every TLS handshake fails on the server.
  local m
  for m in codec handler buffer transport common resolver; do
    if [[ -f /usr/share/java/netty-$m.jar ]]; then cp+=":/usr/share/java/netty-$m.jar"; fi
  done
  JAVA_CMD=("$ZK_JAVA" "-Xmx$ZK_HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1
    -Djava.net.preferIPv4Stack=true
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=$ZK_LOG_LEVEL"
    -Dorg.slf4j.simpleLogger.showDateTime=true
    -cp "$cp" "$main" "$1/zoo.cfg")
}

cmd_stop() {
  local dir="" keep=0 pid
  while [[ $# -gt 0 ]]; do
    case $1 in
      --keep) keep=1; shift ;;
      -*) die "unknown argument $1" ;;
      *) dir=$1; shift ;;
    esac
  done
  [[ -n $dir ]] || die "usage: $PROG stop DIR [--keep]"
  [[ -f $dir/zk.pid ]] || die "no server recorded in $dir (missing $dir/zk.pid)"
  pid=$(<"$dir/zk.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "pid $pid ignored SIGTERM for 10 s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$dir/zk.pid"
  if [[ $keep == 0 && -f $dir/.zk-server-tmp ]]; then rm -rf -- "$dir"; fi
  say "stopped pid $pid"
}

cmd_status() {
  local dir=${1:-} port answer
  [[ -n $dir ]] || die "usage: $PROG status DIR"
  [[ -f $dir/zoo.cfg ]] || die "$dir/zoo.cfg not found"
  port=$(sed -n 's/^clientPort=//p' "$dir/zoo.cfg")
  answer=$(four_letter "$port" srvr)
  printf '%s\n' "$answer"
  [[ $answer == *"Mode: "* ]]
}

cmd_start() {
  local port="" fixed_port=0 dir="" tick=2000 timeout=30 foreground=0 exec_jvm=0 quorum=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --exec) exec_jvm=1; shift ;;
      --quorum) quorum=1; shift ;;
      --port) port=${2:?--port needs a value}; fixed_port=1; shift 2 ;;
      --dir) dir=${2:?--dir needs a value}; shift 2 ;;
      --tick) tick=${2:?--tick needs a value}; shift 2 ;;
      --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
      --foreground) foreground=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) die "unknown argument $1 (see $PROG --help)" ;;
    esac
  done
  [[ $tick =~ ^[0-9]+$ ]] || die "--tick must be a number of milliseconds"
  [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout must be a number of seconds"
  check_install

  if [[ $exec_jvm == 1 && $quorum == 1 ]]; then
    [[ -n $dir && -f $dir/zoo.cfg ]] || die "--exec --quorum needs --dir DIR holding zoo.cfg"
    java_command "$(cd "$dir" && pwd)" org.apache.zookeeper.server.quorum.QuorumPeerMain
    exec "${JAVA_CMD[@]}" </dev/null
  fi
  if [[ $exec_jvm == 1 ]]; then
    [[ -n $port && -n $dir ]] || die "--exec needs --port and --dir"
    mkdir -p "$dir/data"
    dir=$(cd "$dir" && pwd)
    write_config "$dir" "$port" "$tick"
    java_command "$dir"
    exec "${JAVA_CMD[@]}" </dev/null
  fi

  if [[ -z $dir ]]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/zk-server.XXXXXX")
    touch "$dir/.zk-server-tmp"
    # Remove the temporary directory again if we fail before the server is up.
    ZK_SERVER_CLEANUP=$dir
    trap '[[ -n ${ZK_SERVER_CLEANUP:-} ]] && rm -rf -- "$ZK_SERVER_CLEANUP"' EXIT
  fi
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  if [[ -f $dir/zk.pid ]] && kill -0 "$(<"$dir/zk.pid")" 2>/dev/null; then
    die "a server is already running for $dir (pid $(<"$dir/zk.pid"))"
  fi

  local attempt pid="" deadline answer
  for attempt in 1 2 3 4 5; do
    [[ -n $port ]] || port=$(free_port)
    if port_busy "$port"; then
      [[ $fixed_port == 1 ]] && die "port $port is already in use"
      port=""
      continue
    fi
    write_config "$dir" "$port" "$tick"
    java_command "$dir"

    if [[ $foreground == 1 ]]; then
      say "foreground server on 127.0.0.1:$port, dir $dir (Ctrl-C stops it)"
      "${JAVA_CMD[@]}" </dev/null &
      pid=$!
      echo "$pid" >"$dir/zk.pid"
      trap 'kill -TERM "$pid" 2>/dev/null || true' INT TERM
      local rc=0
      wait "$pid" || rc=$?
      # A trapped signal interrupts `wait`: wait again for the JVM to finish.
      while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
      rm -f "$dir/zk.pid"
      if [[ -f $dir/.zk-server-tmp ]]; then rm -rf -- "$dir"; fi
      trap - EXIT
      exit "$rc"
    fi

    nohup "${JAVA_CMD[@]}" </dev/null >"$dir/zk.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/zk.pid"
    deadline=$((SECONDS + timeout))
    while :; do
      if ! kill -0 "$pid" 2>/dev/null; then
        rm -f "$dir/zk.pid"
        if [[ $fixed_port == 0 ]] && grep -q BindException "$dir/zk.log"; then
          say "port $port was taken before the server bound it (attempt $attempt), retrying"
          port=""
          continue 2
        fi
        tail -n 30 "$dir/zk.log" >&2 || true
        die "zookeeper (pid $pid) exited during startup; log: $dir/zk.log"
      fi
      if [[ $(four_letter "$port" ruok) == imok ]]; then
        answer=$(four_letter "$port" srvr)
        [[ $answer == *"Mode: "* ]] && break 2
      fi
      if ((SECONDS >= deadline)); then
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$dir/zk.pid"
        tail -n 30 "$dir/zk.log" >&2 || true
        die "zookeeper not ready after ${timeout} s; log: $dir/zk.log"
      fi
      sleep 0.05
    done
  done
  [[ -n $pid && -f $dir/zk.pid ]] || die "could not start zookeeper after 5 attempts"
  trap - EXIT
  say "ready on 127.0.0.1:$port (pid $pid, dir $dir; stop with: $0 stop $dir)"
  printf 'ZK_PORT=%s\nZK_PID=%s\nZK_DIR=%q\nZK_CONNECT=127.0.0.1:%s\nZK_LOG=%q\n' \
    "$port" "$pid" "$dir" "$port" "$dir/zk.log"
}

case ${1:-} in
  stop) shift; cmd_stop "$@" ;;
  status) shift; cmd_status "$@" ;;
  *) cmd_start "$@" ;;
esac
