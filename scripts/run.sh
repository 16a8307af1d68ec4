#!/usr/bin/env bash
# The README's run command: builds the hopfuse binary (release) and the playground (dist/), then
# starts `hopfuse serve` on http://127.0.0.1:8080 with the playground and the API (docs/api.md).
# With a usable GPU, Run executes on it (NVRTC and nvdisasm are set up from PyPI wheels into
# .tools/); without one the service is compile-only: runs answer 503 with the reason and the page
# says so, and PTX/SASS still work. Ctrl-C stops it.
# Usage: scripts/run.sh [hopfuse serve options]   e.g. --addr 0.0.0.0:8080, --fake-worker
# The database (short links, run history) and the CUBIN cache live in $HOPFUSE_DATA_DIR
# (default ~/.local/share/hopfuse).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "run.sh: $*" >&2; }

cargo build --release -p hopfuse-runner
bash scripts/setup-web.sh --build-only
bash scripts/build-web.sh

# NVRTC and nvdisasm (PyPI wheels into .tools/): runs need them, and so do the PTX and SASS panes
# (POST /api/inspect), which work without a GPU.
if nvrtc_env=$(bash scripts/setup-nvrtc.sh); then
  eval "$nvrtc_env"
else
  log "NVRTC could not be set up: runs and the PTX/SASS panes will be unavailable"
fi
# The same probe the service makes at startup (a child process, so a broken driver cannot hurt).
if ! ./target/release/hopfuse worker --probe 2>/dev/null | grep -q '"gpu":{'; then
  log "no usable GPU: compile-only (runs answer 503 with the reason; the page says so)"
fi
exec ./target/release/hopfuse serve --static-dir dist "$@"
