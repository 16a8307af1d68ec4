#!/usr/bin/env bash
# The README's run command: builds the hopfuse binary (release) and the playground (dist/), then
# starts `hopfuse serve` on http://127.0.0.1:8080 with the playground and the API (docs/api.md).
# Only what changed is rebuilt (cargo for the binary and the crate; build-web.sh skips wasm-opt
# and the compression for a wasm and files it already processed): a second start with nothing
# changed serves within seconds. A first run builds everything from source (about 10 minutes on
# 4 cores; each long step says what it does and how long it takes).
# With a usable GPU, Run executes on it (NVRTC and nvdisasm are set up from PyPI wheels into
# .tools/); without one the service is compile-only: Run is disabled and the page says why, and
# PTX/SASS still work; with --fake-worker, Run compiles and checks programs and measures nothing
# (the service's first lines say which). Ctrl-C stops it.
# Usage: scripts/run.sh [hopfuse serve options]   e.g. --addr 0.0.0.0:8080, --fake-worker
# The binary is target/release/hopfuse. The database (short links, run history) and the CUBIN
# cache live in $HOPFUSE_DATA_DIR (default ~/.local/share/hopfuse).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "run.sh: $*" >&2; }
SECONDS=0

if [ ! -x target/release/hopfuse ] || [ ! -f dist/hopfuse_web_bg.wasm ]; then
  log "first run: building the hopfuse binary and the playground from source, about 10 minutes"
  log "on 4 cores (the tools, then the binary ~4 min, then the playground's wasm ~5 min);"
  log "later runs rebuild only what changed and start in seconds"
fi
t=$SECONDS
log "[1/4] the tools: wasm32 target, wasm-bindgen, npm packages (once)"
bash scripts/setup-web.sh --build-only
log "[2/4] the hopfuse binary (cargo build --release)"
cargo build --release -p hopfuse-runner
log "[3/4] the playground (scripts/build-web.sh)"
bash scripts/build-web.sh
log "[4/4] starting the service (built in $((SECONDS - t)) s)"

# NVRTC and nvdisasm (PyPI wheels into .tools/): runs need them, and so do the PTX and SASS panes
# (POST /api/inspect), which work without a GPU.
if nvrtc_env=$(bash scripts/setup-nvrtc.sh); then
  eval "$nvrtc_env"
else
  log "NVRTC could not be set up: runs and the PTX/SASS panes will be unavailable"
fi
# The service says at start what Run does here: on the GPU, compile-only without one (and why),
# or the fake worker's checks with --fake-worker.
exec ./target/release/hopfuse serve --static-dir dist "$@"
