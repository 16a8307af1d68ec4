#!/usr/bin/env bash
# The whole test suite (the README's test command): formatting, lints, every test, the compiler
# crate for wasm32, and NVRTC compiling every example's CUDA for sm_90a with no warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup-nvrtc.sh)"
export HOPFUSE_REQUIRE_NVRTC=1 # the runner's NVRTC tests fail instead of skipping
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
cargo build -p hopfuse --target wasm32-unknown-unknown
cargo build --release -p hopfuse-runner
for index in i32 i64; do
  ./target/release/hopfuse nvrtc-check --index "$index" examples/*/*.hf
done
