#!/usr/bin/env bash
# test.sh: THE test command. On a fresh Debian machine: `sudo ./scripts/test.sh`.
#
#   scripts/test.sh [ARGS...]
#
# 1. installs what is missing (Debian packages zookeeper, java, rpm, dnf, createrepo-c, git,
#    python3; Rust through rustup if there is no cargo). Root is needed only to install.
# 2. builds everything: cargo build --locked --all-targets, and the RPM from that debug build
#    (scripts/build-rpm.sh --sandbox --dev; tests/it/packaging.rs installs it with the real dnf)
# 3. starts ONE throw-away ZooKeeper (scripts/zk-server.sh --tick 500, so sessions can be as
#    short as 1 s) and exports ZKD_TEST_ZK=127.0.0.1:PORT; every test works in its own chroot
#    on it (tests/support/mod.rs). The server is stopped on exit, failure or Ctrl-C.
# 4. runs the doctests (cargo test --locked --doc, which nextest cannot run), then the tests:
#    cargo nextest run --locked --no-fail-fast ARGS (or cargo test if cargo-nextest is not
#    installed), so the run ends with the main runner's summary. ARGS go to the test runner (e.g. a test-name filter); with ARGS the
#    doctests are skipped.
#
# Exit status: the tests' (0 all passed). Environment: ZKD_SKIP_INSTALL=1 skips step 1;
# ZKD_TEST_RUNNER=cargo forces `cargo test` even when nextest is installed.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(zkd_repo_root)"
started=$SECONDS

zkd_step "checking prerequisites"
zkd_ensure_system_packages
zkd_ensure_rust
zkd_ensure_kazoo

zkd_step "building (cargo build --locked --all-targets)"
if ! cargo build --locked --all-targets; then
  printf '==> test.sh: FAILED: the build failed (%ss)\n' "$((SECONDS - started))" >&2
  exit 1
fi

zkd_step "building the RPM from the debug build (scripts/build-rpm.sh --sandbox --dev)"
if ! rpm_path=$(scripts/build-rpm.sh --sandbox --dev); then
  printf '==> test.sh: FAILED: the RPM build failed (%ss)\n' "$((SECONDS - started))" >&2
  exit 1
fi
export ZKD_TEST_RPM=$rpm_path
zkd_note "ZKD_TEST_RPM=$ZKD_TEST_RPM"

zkd_step "starting ZooKeeper for the tests"
ZK_DIR=""
stop_zk() {
  if [[ -n $ZK_DIR ]]; then
    scripts/zk-server.sh stop "$ZK_DIR" || true
    ZK_DIR=""
  fi
}
trap stop_zk EXIT
trap 'echo "==> test.sh: INTERRUPTED" >&2; exit 130' INT
trap 'echo "==> test.sh: TERMINATED" >&2; exit 143' TERM HUP
zk_vars=$(scripts/zk-server.sh --tick 500)
eval "$zk_vars"
export ZKD_TEST_ZK=$ZK_CONNECT
zkd_note "ZKD_TEST_ZK=$ZKD_TEST_ZK (log: $ZK_LOG)"

# The property tests draw the same cases on every run of this command (CI included), so a
# red run is the code's, never the dice's; `cargo test` run by hand draws new ones (set
# PROPTEST_RNG_SEED to replay a run).
export PROPTEST_RNG_SEED=${PROPTEST_RNG_SEED:-20261129}

runner=cargo
if [[ ${ZKD_TEST_RUNNER:-} != cargo ]] && cargo nextest --version >/dev/null 2>&1; then
  runner=nextest
fi

doc_rc=0
doc_result=skipped
if [[ $# -eq 0 ]]; then
  zkd_step "running the doctests: cargo test --locked --doc"
  cargo test --locked --doc || doc_rc=$?
  if ((doc_rc == 0)); then doc_result=passed; else doc_result="FAILED (exit $doc_rc)"; fi
else
  zkd_note "doctests skipped because arguments were given (run: cargo test --doc)"
fi

tests_rc=0
if [[ $runner == nextest ]]; then
  zkd_step "running the tests: cargo nextest run --locked --no-fail-fast $*"
  cargo nextest run --locked --no-fail-fast "$@" || tests_rc=$?
else
  if [[ ${ZKD_TEST_RUNNER:-} == cargo ]]; then
    zkd_step "running the tests: cargo test --locked --no-fail-fast $*"
  else
    zkd_step "running the tests: cargo test --locked --no-fail-fast $* (cargo-nextest is not installed)"
  fi
  cargo test --locked --no-fail-fast "$@" || tests_rc=$?
fi

sim_rc=0
sim_result=skipped
if [[ $# -eq 0 ]]; then
  # The fleet simulator (a benchmark) once at 200 hosts, as a smoke test that it still
  # works: the fleet converges, idles, rolls out (canaries, max-parallel, 100 applications,
  # the ensemble's leader killed mid-rollout), and the operator's commands run; it exits 1
  # if a host never converges, deploys twice, halts falsely or a command fails.
  zkd_step "smoke test of the fleet simulator: cargo test --locked --bench fleet_sim -- --hosts 200"
  cargo test --locked --bench fleet_sim -- --hosts 200 --script-ms 50 --yum-ms 10 \
    --scenarios idle,rollout,many,leader,commands \
    --idle-secs 2 --limit-secs 300 --heap 256m || sim_rc=$?
  if ((sim_rc == 0)); then sim_result=passed; else sim_result="FAILED (exit $sim_rc)"; fi
else
  zkd_note "fleet simulator smoke test skipped because arguments were given"
fi

stop_zk
rc=$tests_rc
((rc != 0)) || rc=$doc_rc
((rc != 0)) || rc=$sim_rc
if ((tests_rc == 0)); then test_result=passed; else test_result="FAILED (exit $tests_rc)"; fi
if ((rc == 0)); then verdict=PASSED; else verdict=FAILED; fi
printf '==> test.sh: %s: tests (%s) %s, doctests %s, fleet simulator %s, in %ss\n' \
  "$verdict" "$runner" "$test_result" "$doc_result" "$sim_result" "$((SECONDS - started))"
exit "$rc"
