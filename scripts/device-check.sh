#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there): validates every example on divisible and non-divisible
# sizes, times the large cases against the device copy, and runs compute-sanitizer on the
# kernels with barriers. Usage: scripts/device-check.sh [hopfuse binary]; logs go to $OUT.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
summary="$OUT/summary.txt"
: >"$summary"
run() { # example sizes [extra args]
  local ex=$1 sizes=$2; shift 2
  local log="$OUT/run.log"
  echo "=== $ex $sizes $*" >>"$log"
  if "$B" run "examples/$ex.hf" --size "$sizes" "$@" >>"$log" 2>&1; then r=PASS; else r=FAIL; fi
  line=$(tail -n 30 "$log" | grep -E "median|GB/s|rel_l2|ratio|valid" | tr '\n' ' ' | cut -c1-300)
  printf '%-20s %-22s %s %s\n' "$ex" "$sizes" "$r" "$line" | tee -a "$summary"
}
for ex in basics/add basics/bias_add basics/row_sum basics/softmax basics/gelu_bf16; do
  run "$ex" M=1000,N=1023 --iters 20
  run "$ex" M=4096,N=4096 --iters 20
done
run basics/add M=16384,N=16384 --iters 100
run basics/softmax M=16384,N=16384 --iters 100
run basics/row_sum M=16384,N=16384 --iters 100
san() { # tool example sizes
  local tool=$1 ex=$2 sizes=$3
  if compute-sanitizer --tool "$tool" --error-exitcode 9 "$B" run "examples/$ex.hf" --size "$sizes" --iters 1 --warmup 0 --no-ceiling >"$OUT/san-$tool-${ex##*/}.log" 2>&1; then r=CLEAN; else r=ERRORS; fi
  printf '%-12s %-20s %-16s %s %s\n' "$tool" "$ex" "$sizes" "$r" "$(grep -E 'ERROR SUMMARY' "$OUT/san-$tool-${ex##*/}.log" | head -1)" | tee -a "$summary"
}
for ex in basics/row_sum basics/softmax; do
  san racecheck "$ex" M=8,N=1023
  san synccheck "$ex" M=8,N=1023
done
san memcheck basics/add M=100,N=1023
san memcheck basics/gelu_bf16 M=100,N=1023
echo "---- summary"; cat "$summary"
