#!/usr/bin/env bash
# The Python package on an H100 with real torch (no Rust needed there): installs the hopfuse
# wheel (built here by `scripts/test-python.sh --release`, carried as target/wheels/) into a
# scratch directory and runs python/tests/device_check.py: examples/basics/add.hf, row_sum.hf,
# softmax.hf, tma/add_2d.hf and two tensor-core matmuls (matmul/step3, step9) on torch tensors
# of regular and ragged sizes against torch eager, the custom op under torch.compile and
# torch.library.opcheck, CUDA graph capture, a side stream, the errors, and the launch overhead
# of a cached call against bare cuLaunchKernels. Every check runs and is recorded even when
# others fail.
#
#   scripts/python-device-check.sh [WHEEL]
#
# Writes $OUT/python-device-check/ (else ./python-device-check-out/): results.json,
# summary.md, log.txt, nvidia-smi.txt. NVRTC 13 and the CUDA headers come from the NVIDIA
# wheels torch's CUDA 13 build installs (nvidia/cu13), else from $HOPFUSE_CUDA_INCLUDE /
# $CUDA_HOME / /usr/local/cuda and LD_LIBRARY_PATH. Exits 1 when a check failed, 2 when it could
# not start.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/python-device-check-out}/python-device-check"
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1

wheel="${1:-$(ls target/wheels/hopfuse-*-abi3-*.whl 2>/dev/null | head -n 1)}"
if [ -z "$wheel" ] || [ ! -f "$wheel" ]; then
  echo "python-device-check: no hopfuse wheel (build it with scripts/test-python.sh --release and carry target/wheels)"
  exit 2
fi
python=${PYTHON:-python3}
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "python-device-check: $python cannot import torch"
  exit 2
fi
echo "python-device-check: $(basename "$wheel") with $("$python" --version 2>&1)"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (see nvidia-smi.txt)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if ! "$python" -m pip install --quiet --no-deps --no-index --target "$scratch/site" "$wheel"; then
  # A wheel is a zip of the files to put on the path: unpack it where pip would have.
  echo "python-device-check: pip could not install $wheel; unpacking it instead"
  "$python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$wheel" "$scratch/site" || exit 2
fi
# A fresh CUBIN cache: the first call of each kernel pays NVRTC here, as a new user's would.
export HOPFUSE_CACHE_DIR="$scratch/cubin-cache"
PYTHONPATH="$scratch/site${PYTHONPATH:+:$PYTHONPATH}" "$python" python/tests/device_check.py "$out"
status=$?
echo "python-device-check: exit $status; results in $out"
exit "$status"
