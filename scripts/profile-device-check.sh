#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there; carry target/release/hopfuse): profiles a TMA example and
# a matrix product with Nsight Compute through `hopfuse run --profile` (issue 16), writes their
# JSON results and roofline SVGs to $OUT, and prints each profile. Needs ncu ($HOPFUSE_NCU, on
# PATH, or /usr/local/cuda/bin/ncu) and permission for the GPU's performance counters; a host
# without either makes each run say so and exit 1.
# Usage: scripts/profile-device-check.sh [hopfuse binary]
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
# CUDA 13: libnvrtc on the library path, headers for cuda_fp16.h / cuda_bf16.h (as
# device-validate.sh), ncu and nvdisasm from the toolkit's bin/.
if [ -d "$cuda_home/lib64" ]; then
  export LD_LIBRARY_PATH="$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "${HOPFUSE_CUDA_INCLUDE:-}" ] && [ -f "$cuda_home/include/cuda_bf16.h" ]; then
  export HOPFUSE_CUDA_INCLUDE="$cuda_home/include"
fi
export PATH="$PATH:$cuda_home/bin"
nvidia-smi -L | tee "$OUT/gpu.txt"
command -v ncu && ncu --version | tail -1
rc=0
profile() { # name example sizes
  local name=$1 ex=$2 sizes=$3
  echo "=== $ex $sizes"
  if ! "$B" run "examples/$ex.hf" --size "$sizes" --iters 50 --profile \
      --roofline "$OUT/roofline-$name.svg" --json-file "$OUT/profile-$name.json"; then
    rc=1
  fi
}
profile exp_2d tma/exp_2d M=8192,N=8192
profile exp_store tma/exp_store M=8192,N=8192
profile matmul basics/matmul M=2048,N=2048,K=2048
# The compile side on the device too: SASS mapped to CUDA, IR and passes.
"$B" compile --sass examples/tma/exp_2d.hf --size M=8192,N=8192 >"$OUT/exp_2d.sass" || rc=1
head -3 "$OUT/exp_2d.sass"
exit $rc
