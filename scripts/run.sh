#!/usr/bin/env bash
# Builds the hopfuse binary and compiles an example (the playground and the service come with
# their issues). Usage: scripts/run.sh [program.hf]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hopfuse-runner
./target/release/hopfuse compile --passes "${1:-examples/basics/add.hf}"
