#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there): validates every example on divisible and non-divisible
# sizes, times the large cases against the device copy measured in the same process, and runs
# compute-sanitizer on the kernels with barriers and vector tails.
# Usage: scripts/device-check.sh [hopfuse binary]; full logs go to $OUT/run.log.
# Every row is a check: it passes, fails, or did not run (no compute-sanitizer, ...); the script
# ends with "device-check: P passed, F failed, N not run" and exits 1 unless every check ran and
# passed.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
. "$(dirname "$0")/device-lib.sh"
[ -x "$B" ] || { echo "NOT RUN: no hopfuse binary at $B"; echo "device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
nvidia-smi -L | tee "$OUT/gpu.txt" || { echo "NOT RUN: nvidia-smi found no GPU"; echo "device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
printf '| example | sizes | validation | rel_l2 | median | GB/s | copy GB/s | ratio | wall s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n' | tee -a "$summary"
for ex in basics/add basics/bias_add basics/row_sum basics/row_sum_rfactor basics/softmax basics/softmax_shared basics/gelu_bf16; do
  run "$ex" M=1000,N=1023 --iters 20
  run "$ex" M=1000,N=1028 --iters 20
  run "$ex" M=4096,N=4096 --iters 20
done
run basics/add M=16384,N=16384 --iters 100
run basics/softmax M=16384,N=16384 --iters 100
run basics/row_sum M=16384,N=16384 --iters 100
run basics/bias_add M=16384,N=16384 --iters 100
run basics/gelu_bf16 M=16384,N=16384 --iters 100
# Host reference at bench sizes (on every core): the wall seconds column (limit of hopfuse
# bench: 60 s per run).
run basics/dtypes M=16384,N=16384 --iters 20
# Matrix products: the float64 reference on the GPU (cuBLAS DGEMM) above M N K = 2^27.
gpu_reference() { # example sizes
  run "$1" "$2" --iters 20
  local r=FAIL
  grep -q 'reference   float64 on the GPU: cublasDgemm' "$OUT/one.log" && r=PASS
  tally "$r"
  printf '| %s | %s | reference on the GPU: %s | %s |\n' "$1" "$2" "$r" "$(grep -m1 'reference ' "$OUT/one.log" | cut -c1-140)" | tee -a "$summary"
}
gpu_reference basics/matmul M=4096,N=4096,K=4096
gpu_reference basics/matmul_bf16 M=4096,N=4096,K=4096
# Below the threshold the host computes it; both agree with the kernel.
run basics/matmul M=500,N=512,K=512 --iters 20
# cuBLAS DGEMM against the host reference, small sizes, every layout (and the built-in cases).
if "$B" selftest >"$OUT/selftest.log" 2>&1; then st=PASS; else st=FAIL; fi
tally "$st"
printf '| selftest | built-in cases and cublasDgemm vs host reference | %s | %s |\n' "$st" "$(grep -m1 -E 'selftest: ' "$OUT/selftest.log")" | tee -a "$summary"
printf '\n| tool | example | sizes | result | summary |\n| --- | --- | --- | --- | --- |\n' | tee -a "$summary"
for ex in basics/row_sum basics/row_sum_rfactor basics/softmax basics/softmax_shared; do
  for sizes in M=8,N=1023 M=8,N=1028; do
    san racecheck "$ex" "$sizes"
    san synccheck "$ex" "$sizes"
    san memcheck "$ex" "$sizes"
  done
done
san memcheck basics/add M=100,N=1023
san memcheck basics/bias_add M=100,N=1023
san memcheck basics/gelu_bf16 M=100,N=1023
rm -f "$OUT/one.log" "$OUT/san-one.log"
echo "---- summary"; cat "$summary"
echo "device-check: $passed passed, $failed failed, $not_run not run" | tee -a "$summary"
[ "$failed" -eq 0 ] && [ "$not_run" -eq 0 ]
