#!/usr/bin/env bash
# The playground's checks: clippy for wasm32, the crate's unit tests (native), the dist/ build,
# the size guard (what a cold load transfers: the wasm, the JavaScript and the stylesheet as
# the service sends them, brotli, at most 900 KiB; the budget itself is what a user feels, first
# CUDA on screen within 1.2 s over 20 Mbit/s with 40 ms round trips, measured by the browser
# test), and the end-to-end test in headless Chromium
# (web/tests/e2e.mjs, which starts and stops its own `hopfuse serve
# --fake-worker` on a free port with a temporary database, measures the cold load's transfer and
# the keystroke-to-CUDA latency in the browser, and writes screenshots and metrics.json to
# target/web-artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=$((900 * 1024)) # bytes a cold load transfers: wasm + JS + CSS, brotli (a guard)

bash scripts/setup-web.sh
cargo clippy -p hopfuse-web --target wasm32-unknown-unknown -- -D warnings
cargo test -p hopfuse-web --lib
bash scripts/build-web.sh
br=$(node web/precompress.mjs dist --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).total))')
echo "test-web: a cold load transfers $br bytes of wasm, JS and CSS, brotli ($((br / 1024)) KiB; budget $((BUDGET / 1024)) KiB)"
if [ "$br" -gt "$BUDGET" ]; then
  echo "test-web: FAIL: the cold load is over the budget" >&2
  exit 1
fi
# The service the browser test runs against: $HOPFUSE_BIN (scripts/test.sh passes the debug
# binary its tests built), else the release binary.
if [ -z "${HOPFUSE_BIN:-}" ]; then
  cargo build --release -p hopfuse-runner
fi
eval "$(bash scripts/setup-nvrtc.sh)"     # its PTX and SASS panes need NVRTC and nvdisasm
node web/tests/e2e.mjs dist target/web-artifacts
