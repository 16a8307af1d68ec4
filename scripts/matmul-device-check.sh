#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there): the tensor-core examples (examples/matmul/) validated
# against the float64 reference (cuBLAS DGEMM on the GPU for large products) on small, ragged
# and large sizes, their TFLOP/s against cuBLAS's bf16 GEMM on the same layouts in the same
# process, and compute-sanitizer (racecheck, synccheck, memcheck) at a small ragged size.
# Usage: scripts/matmul-device-check.sh [hopfuse binary] [example ...]; logs in $OUT.
# Ends with "matmul-device-check: P passed, F failed, N not run"; exits 1 unless all passed.
set -uo pipefail
B=${1:-target/release/hopfuse}
shift || true
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
. "$(dirname "$0")/device-lib.sh"
[ -x "$B" ] || { echo "NOT RUN: no hopfuse binary at $B"; echo "matmul-device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
nvidia-smi -L | tee "$OUT/gpu.txt" || { echo "NOT RUN: nvidia-smi found no GPU"; echo "matmul-device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
if [ $# -gt 0 ]; then examples=("$@"); else
  examples=()
  for f in examples/matmul/*.hf; do examples+=("matmul/$(basename "$f" .hf)"); done
fi
# Block-scaled examples (expand_blocks) also take their scales' block counts:
# KB = ceilDiv(K, 128), NB = ceilDiv(N, 128).
with_blocks() {
  if grep -q 'expand_blocks' "examples/$1.hf"; then
    local n k
    n=$(grep -oE 'N=[0-9]+' <<<"$2" | cut -d= -f2)
    k=$(grep -oE 'K=[0-9]+' <<<"$2" | cut -d= -f2)
    echo "$2,KB=$(((k + 127) / 128)),NB=$(((n + 127) / 128))"
  else
    echo "$2"
  fi
}
printf '| example | sizes | validation | rel_l2 | median | GB/s | copy GB/s | ratio | wall s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n' | tee -a "$summary"
perf=()
for ex in "${examples[@]}"; do
  run "$ex" "$(with_blocks "$ex" M=256,N=256,K=128)" --iters 5
  # Ragged sizes. A TMA row is a multiple of 16 bytes, so the contiguous dimension of each
  # operand is a multiple of 8: K for K-major operands, M and N for MN-major ones.
  # A TMA-stored output's rows are a multiple of 16 bytes too: N a multiple of 8, of 16 for an
  # FP8 output (step 19). FP8 operands (1 byte) need K a multiple of 16.
  k_ragged=72 k_large=1000 n_ragged=4088 n_large=3000
  if grep -q 'f8e' "examples/$ex.hf"; then k_ragged=80 k_large=1008; fi
  if grep -q 'store=tma' "examples/$ex.hf" && grep -qE 'cast\(.*f8e(4m3|5m2)' "examples/$ex.hf"; then
    n_ragged=4080 n_large=3008
  fi
  if grep -q 'store=tma' "examples/$ex.hf"; then
    run "$ex" "$(with_blocks "$ex" M=129,N=$n_ragged,K=$k_ragged)" --iters 5
  else
    case $ex in
    *mn_major*) run "$ex" "$(with_blocks "$ex" M=136,N=4088,K=77)" --iters 5 ;;
    *) run "$ex" "$(with_blocks "$ex" M=129,N=4095,K=72)" --iters 5 ;;
    esac
  fi
  run "$ex" "$(with_blocks "$ex" M=4000,N=$n_large,K=$k_large)" --iters 10
  for n in 4096 8192; do
    run "$ex" "$(with_blocks "$ex" M=$n,N=$n,K=$n)" --iters 30
    perf+=("| $ex | $n^3 | $(grep -m1 -oE 'compute +[0-9.]+ TFLOP/s' "$OUT/one.log" | awk '{print $2}') | $(grep -m1 -oE 'cuBLAS +[0-9.]+ TFLOP/s' "$OUT/one.log" | awk '{print $2}') | $(grep -m1 -oE '[0-9.]+% of cuBLAS' "$OUT/one.log") | $(grep -m1 'reference ' "$OUT/one.log" | cut -c1-80) |")
  done
done
printf '\n| example | size | TFLOP/s | cuBLAS TFLOP/s | ratio | reference |\n| --- | --- | --- | --- | --- | --- |\n' | tee -a "$summary"
printf '%s\n' "${perf[@]}" | tee -a "$summary"
printf '\n| tool | example | sizes | result | summary |\n| --- | --- | --- | --- | --- |\n' | tee -a "$summary"
for ex in "${examples[@]}"; do
  k_san=136 n_san=296
  if grep -q 'f8e' "examples/$ex.hf"; then k_san=144; fi
  if grep -q 'store=tma' "examples/$ex.hf" && grep -qE 'cast\(.*f8e(4m3|5m2)' "examples/$ex.hf"; then n_san=304; fi
  for tool in racecheck synccheck memcheck; do
    san "$tool" "$ex" "$(with_blocks "$ex" M=200,N=$n_san,K=$k_san)"
  done
done
rm -f "$OUT/one.log" "$OUT/san-one.log"
echo "---- summary"; cat "$summary"
echo "matmul-device-check: $passed passed, $failed failed, $not_run not run" | tee -a "$summary"
[ "$failed" -eq 0 ] && [ "$not_run" -eq 0 ]
