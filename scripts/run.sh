#!/usr/bin/env bash
# Builds the hopfuse binary and compiles an example, then builds the playground into dist/ (the
# service comes with its issue). Usage: scripts/run.sh [program.hf]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hopfuse-runner
./target/release/hopfuse compile --passes "${1:-examples/basics/add.hf}"
bash scripts/setup-web.sh --build-only
bash scripts/build-web.sh
echo "playground: dist/ (serve it with any static server, e.g. python3 -m http.server -d dist 8000)"
