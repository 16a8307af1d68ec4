#!/usr/bin/env bash
# `hopfuse export` on an H100 (no Rust there): exports examples at regular and ragged sizes with
# the release binary, builds each export's C++ program with g++ against the CUDA driver API, runs
# it on random inputs, runs the Python launcher on the same inputs, and compares both with the
# exported PyTorch twin (scripts/export_device_check.py).
#
#   scripts/export-device-check.sh [BIN]     # BIN: target/release/hopfuse by default
#
# Writes $OUT/export-device-check/ (else ./export-device-check-out/): summary.md, log.txt.
# Exits 1 when a check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/hopfuse}
out="${OUT:-$PWD/export-device-check-out}/export-device-check"
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
cuda_home=${CUDA_HOME:-/usr/local/cuda}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# example:sizes, regular and ragged; TMA, tensor-core (clusters, TMA store), scalars, split fusions.
cases=(
  "basics/add.hf:M=4096,N=4096" "basics/add.hf:M=1000,N=1003"
  "basics/softmax.hf:M=1024,N=4096" "basics/softmax.hf:M=77,N=1000"
  "tma/add_2d.hf:M=2048,N=2048" "tma/add_2d.hf:M=1000,N=1028"
  "fusions/rmsnorm.hf:M=1000"
  "matmul/step9_tma_store_epilogue.hf:M=2048,N=2048,K=2048"
  "matmul/step12_cluster_multicast.hf:M=1920,N=4096,K=1024"
  "matmul/step15_persistent_raster.hf:M=4096,N=4096,K=4096"
  # Fusions split into kernels run in order (an intermediate, a grid reduction's workspace and a
  # scalar intermediate, two outputs, a product then a softmax).
  "auto/col_norm.hf:M=16384,N=8192" "auto/col_norm.hf:M=1000,N=1000"
  "auto/normalize_by_total.hf:M=4096,N=4096" "auto/normalize_by_total.hf:M=1000,N=1037"
  "auto/row_col_sums.hf:M=1000,N=3000"
  "auto/product_softmax.hf:M=1024,N=2048,K=512"
)
failed=0
n=0
for c in "${cases[@]}"; do
  file=${c%%:*}
  sizes=${c#*:}
  n=$((n + 1))
  dir="$scratch/$n"
  if ! "$bin" export "examples/$file" --size "$sizes" --out "$dir" >/dev/null; then
    echo "| $file | $sizes | export failed | |" >>"$out/rows.md"
    failed=1
    continue
  fi
  kernel=$(basename "$(ls "$dir"/*_main.cpp)" _main.cpp)
  if ! g++ -std=c++17 -O2 -I"$cuda_home/include" "$dir/${kernel}_main.cpp" -L"$cuda_home/lib64/stubs" -lcuda -o "$dir/main"; then
    echo "| $file | $sizes | g++ failed | |" >>"$out/rows.md"
    failed=1
    continue
  fi
  python3 scripts/export_device_check.py "$dir" "$kernel" "$file" "$sizes" >>"$out/rows.md" || failed=1
done
{
  echo "# hopfuse export on the device"
  echo
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo
  echo "| example | sizes | C++ program | Python launcher |"
  echo "| --- | --- | --- | --- |"
  cat "$out/rows.md"
} >"$out/summary.md"
cat "$out/summary.md"
exit $failed
