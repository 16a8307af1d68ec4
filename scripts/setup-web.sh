#!/usr/bin/env bash
# Installs what the playground's build and tests need, idempotently: the wasm32 target,
# wasm-bindgen's CLI at the version web/Cargo.toml pins (tools/wasm-bindgen, locked), the npm packages of web/ (CodeMirror,
# esbuild, binaryen's wasm-opt, playwright-core) from the committed lock file, and Debian's
# chromium for the end-to-end test (not with --build-only).
# Usage: scripts/setup-web.sh [--build-only]
set -euo pipefail
build_only=false
[ "${1:-}" = "--build-only" ] && build_only=true
cd "$(dirname "$0")/.."
log() { echo "setup-web: $*" >&2; }

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

# The CLI must be exactly the crate's wasm-bindgen version. It is built from tools/wasm-bindgen,
# whose committed Cargo.lock fixes every dependency version (the lock file published with
# wasm-bindgen-cli names versions this project's registry lacks, so `--locked` on it fails).
want=$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)"/\1/p' web/Cargo.toml)
[ -n "$want" ] || { log "no pinned wasm-bindgen version in web/Cargo.toml"; exit 1; }
grep -q "^wasm-bindgen-cli = { version = \"=$want\"" tools/wasm-bindgen/Cargo.toml ||
  { log "tools/wasm-bindgen/Cargo.toml does not pin wasm-bindgen-cli $want"; exit 1; }
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  log "installing wasm-bindgen $want (found: ${have:-none}); builds from source, about 3 minutes"
  cargo install --locked --force --path tools/wasm-bindgen
fi

# npm ci only when the lock file changed since the last install.
stamp=web/node_modules/.hopfuse-lock
if [ ! -f "$stamp" ] || ! cmp -s web/package-lock.json "$stamp"; then
  log "npm ci in web/"
  (cd web && npm ci --no-audit --no-fund)
  cp web/package-lock.json "$stamp"
fi

if ! $build_only && ! command -v chromium >/dev/null 2>&1; then
  log "installing Debian's chromium"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
