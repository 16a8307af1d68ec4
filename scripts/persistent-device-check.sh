#!/usr/bin/env bash
# Runs on the lent H100: the persistent grouped-raster kernel (examples/matmul/step15) and its
# variants (docs/variants/s15_*.hf: 2-CTA clusters, ping-pong consumers, fused bias + GELU,
# group sizes 8 and 32) validated with the tensor-core device check (ragged sizes, 4096^3,
# 8192^3, sanitizers), then timed against step 9 and cuBLAS in alternating rounds and on model
# shapes, then the cluster variant at 500 random sizes (M tiles even: the cluster's rule).
# Usage: scripts/persistent-device-check.sh [hopfuse binary]; logs in $OUT.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
export RUN_TIMEOUT=${RUN_TIMEOUT:-120}
S9=examples/matmul/step9_tma_store_epilogue.hf
S15=examples/matmul/step15_persistent_raster.hf
V=docs/variants
OUT=$OUT/check bash scripts/matmul-device-check.sh "$B" matmul/step15_persistent_raster \
  ../$V/s15_pingpong ../$V/s15_gelu ../$V/s15_cluster >"$OUT/check.log" 2>&1
grep -E 'matmul-device-check:' "$OUT/check.log"
{
  for r in 1 2 3; do
    for n in 4096 8192; do
      for f in $S9 $S15 $V/s15_g32.hf $V/s15_cluster.hf; do
        echo "== $f $n round $r"
        timeout 120 "$B" run "$f" --size M=$n,N=$n,K=$n --iters 30 2>&1 | grep -E 'compute|cuBLAS  |launch|FAIL' | head -4
      done
    done
  done
  for sz in M=128,N=4096,K=4096 M=64,N=14336,K=4096 M=4096,N=6144,K=4096 M=4096,N=14336,K=4096 \
    M=4096,N=28672,K=4096 M=4096,N=4096,K=14336 M=4000,N=3000,K=1000; do
    for f in $S9 $S15; do
      echo "== $f $sz"
      timeout 120 "$B" run "$f" --size "$sz" --iters 20 2>&1 | grep -E 'compute|cuBLAS  |launch|validation' | head -5
    done
  done
} >"$OUT/perf.log" 2>&1
echo "perf: $OUT/perf.log"
python3 scripts/many-sizes.py $V/s15_cluster.hf 500 "$OUT/s15_cluster_500.hf"
python3 - "$OUT/s15_cluster_500.hf" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
def even(m):
    M = int(m.group(1))
    if ((M + 127) // 128) % 2:
        M = M + 128 if M + 128 <= 3100 else M - 128
    return f"// bench: M={M},N={m.group(2)},K={m.group(3)}"
open(p, "w").write(re.sub(r"// bench: M=(\d+),N=(\d+),K=(\d+)", even, s))
PY
timeout 400 "$B" bench --iters 3 --warmup 1 "$OUT/s15_cluster_500.hf" >"$OUT/sizes500.log" 2>&1
echo "500 sizes: rc=$? PASS $(grep -c PASS "$OUT/sizes500.log") failing $(grep -ciE 'FAIL|error|timed out' "$OUT/sizes500.log")"
