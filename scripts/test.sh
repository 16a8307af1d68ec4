#!/usr/bin/env bash
# The whole test suite (the README's test command): formatting, lints, every test (the
# distributed mode's against real nats-server and PostgreSQL, scripts/setup-distributed.sh), the
# compiler and API crates for wasm32, NVRTC compiling every example's CUDA for sm_90a with no warnings (and its PTX
# and SASS, nvdisasm, with line info for every instruction: nvrtc-check --inspect), the Python
# package (scripts/test-python.sh: wheel, install, tests without a GPU), then the
# playground (scripts/test-web.sh: clippy for wasm32, unit tests, build, size budget, browser
# test). The playground crate is left out of the native workspace steps (it is checked for wasm32).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup-nvrtc.sh)"
export HOPFUSE_REQUIRE_NVRTC=1 # the runner's NVRTC tests fail instead of skipping
# Checks that cannot run here (runner/src/not_run.rs) are listed at the end.
export HOPFUSE_NOT_RUN_LOG="${TMPDIR:-/tmp}/hopfuse-not-run.$$"
: >"$HOPFUSE_NOT_RUN_LOG"
# nats-server and PostgreSQL on loopback for the distributed mode and the store's PostgreSQL
# tests (runner/tests/distributed/), which then fail instead of skipping. A PostgreSQL this run
# starts (127.0.0.1:54329) is stopped when it ends, however it ends; one already running is left
# running.
pg_was_running=false
if bash scripts/setup-distributed.sh running; then pg_was_running=true; fi
finish() {
  if [ -s "$HOPFUSE_NOT_RUN_LOG" ]; then
    echo "---- checks not run:"
    sort -u "$HOPFUSE_NOT_RUN_LOG"
  fi
  rm -f "$HOPFUSE_NOT_RUN_LOG"
  if [ "$pg_was_running" = false ]; then
    bash scripts/setup-distributed.sh stop || echo "test.sh: could not stop the test PostgreSQL" >&2
  fi
}
trap finish EXIT
eval "$(bash scripts/setup-distributed.sh)"
export HOPFUSE_REQUIRE_NATS=1 HOPFUSE_REQUIRE_POSTGRES=1
# Each step's wall time goes to the log (the suite's time is kept in check: README).
step() {
  local start=$SECONDS what="$*"
  "$@"
  echo "test.sh: $((SECONDS - start)) s: ${what:0:100}" >&2
}
# NVRTC compiling every example for sm_90a at both index types. NVRTC compiles on one thread, so
# the two index types run side by side (half the wall time on 2 cores); their logs print in turn.
nvrtc_check_both() {
  local logs status=0
  logs=$(mktemp -d)
  "$HOPFUSE_BIN" nvrtc-check --inspect --index i32 examples/*/*.hf >"$logs/i32" 2>&1 &
  local i32=$!
  "$HOPFUSE_BIN" nvrtc-check --inspect --index i64 examples/*/*.hf >"$logs/i64" 2>&1 &
  local i64=$!
  wait "$i32" || status=1
  wait "$i64" || status=1
  cat "$logs/i32" "$logs/i64"
  rm -rf "$logs"
  return "$status"
}
step cargo fmt --all -- --check
step cargo clippy --workspace --exclude hopfuse-web --all-targets -- -D warnings
step cargo test --workspace --exclude hopfuse-web
# The checks below use the debug binary the tests just built (a release build would cost minutes
# of a 2-core machine for checks that NVRTC, nats-server and the browser dominate). The compiler
# and API crates build for wasm32 in scripts/test-web.sh (the playground's bundle).
step cargo build -p hopfuse-runner
export HOPFUSE_BIN=target/debug/hopfuse
step nvrtc_check_both
# The distributed mode through outages (agent and front-end kills, nats-server and PostgreSQL
# down): quick mode, 300-job bursts, fails on any lost or stuck job.
step python3 scripts/distributed-outage.py --quick --hopfuse "$HOPFUSE_BIN"
# The Python package: wheel (maturin from PyPI into .tools/), install, tests on the torch stand-in.
step bash scripts/test-python.sh
step bash scripts/test-web.sh
