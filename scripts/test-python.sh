#!/usr/bin/env bash
# The Python package (python/) without a GPU: builds the wheel with maturin (from PyPI, into
# .tools/maturin), installs it into .tools/python-test (pip --target, no venv needed), and runs
# python/tests/test_hopfuse.py against it with the project's torch stand-in
# (runner/peers/fake_torch): compiling to CUDA, the checks of a call, NVRTC and its CUBIN cache
# (NVRTC from scripts/setup-nvrtc.sh), the fake implementation and the custom op. Called by
# scripts/test.sh; prints the wheel's path last (scripts/python-device-check.sh installs it).
#
#   scripts/test-python.sh [--release]   # --release: the optimised wheel (for the H100)
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN_VERSION=1.16.0
profile=(--profile dev)
if [ "${1:-}" = "--release" ]; then
  profile=(--release)
fi
log() { echo "test-python: $*" >&2; }

tools=.tools/maturin
if [ ! -x "$tools/bin/maturin" ] || [ ! -f "$tools/.maturin-$MATURIN_VERSION" ]; then
  log "installing maturin $MATURIN_VERSION into $tools"
  rm -rf "$tools"
  python3 -m pip install --quiet --disable-pip-version-check --target "$tools" "maturin==$MATURIN_VERSION" >&2
  touch "$tools/.maturin-$MATURIN_VERSION"
fi

out=target/wheels
rm -f "$out"/hopfuse-*.whl
start=$(date +%s)
"$tools/bin/maturin" build --quiet "${profile[@]}" -m python/Cargo.toml -o "$out" >&2
wheel=$(ls "$out"/hopfuse-*.whl)
log "built $(basename "$wheel") in $(($(date +%s) - start)) s"
case "$wheel" in
  *-abi3-*) ;;
  *) log "the wheel is not abi3 (one wheel for every CPython >= 3.9): $wheel"; exit 1 ;;
esac

site=.tools/python-test
rm -rf "$site"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$site" "$wheel" >&2
PYTHONPATH="$PWD/$site:$PWD/runner/peers/fake_torch" python3 python/tests/test_hopfuse.py
echo "$wheel"
