#!/usr/bin/env bash
# Runs on the lent H100: the stream-K variant of step 15 (docs/variants/s15_stream_k.hf)
# validated with the tensor-core device check (ragged sizes, 4096^3, 8192^3, racecheck /
# synccheck / memcheck) next to step 15 and step 13's 1 x 4 blocks, then 500 random sizes of
# the stream-K kernel in one worker (a CTA waits on the flags of the CTAs before it: no size may
# hang), then timed against them and cuBLAS in alternating rounds, on the square sizes and on
# shapes where the tiles do not fill the SMs (long K).
# Usage: scripts/stream-k-device-check.sh [hopfuse binary]; logs in $OUT.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
export RUN_TIMEOUT=${RUN_TIMEOUT:-120}
V=docs/variants
OUT=$OUT/check bash scripts/matmul-device-check.sh "$B" ../$V/s15_stream_k \
  matmul/step15_persistent_raster ../$V/s13_rows >"$OUT/check.log" 2>&1
grep -E 'matmul-device-check:' "$OUT/check.log"
python3 scripts/many-sizes.py $V/s15_stream_k.hf 500 "$OUT/s15_stream_k_500.hf"
timeout 500 "$B" bench --iters 3 --warmup 1 "$OUT/s15_stream_k_500.hf" >"$OUT/sizes500.log" 2>&1
echo "500 sizes: rc=$? PASS $(grep -c PASS "$OUT/sizes500.log") failing $(grep -ciE 'FAIL|error|timed out' "$OUT/sizes500.log")"
{
  for r in 1 2 3; do
    for n in 4096 8192; do
      for f in examples/matmul/step15_persistent_raster.hf $V/s15_stream_k.hf $V/s13_rows.hf; do
        echo "== $f M=$n,N=$n,K=$n round $r"
        timeout 120 "$B" run "$f" --size M=$n,N=$n,K=$n --iters 30 2>&1 | grep -E '^\s+compute|^\s+cuBLAS  |  launch|FAIL' | head -4
      done
    done
  done
  for sz in M=1024,N=1024,K=16384 M=2048,N=2048,K=8192 M=4096,N=4096,K=14336 M=4096,N=4096,K=1024 M=64,N=14336,K=4096; do
    for f in examples/matmul/step15_persistent_raster.hf $V/s15_stream_k.hf; do
      echo "== $f $sz"
      timeout 120 "$B" run "$f" --size "$sz" --iters 20 2>&1 | grep -E '^\s+compute|^\s+cuBLAS  |  launch|validation' | head -5
    done
  done
} >"$OUT/perf.log" 2>&1
python3 - "$OUT/perf.log" <<'PY' | tee "$OUT/perf-summary.txt"
import re, sys
cur = None
for l in open(sys.argv[1]):
    if l.startswith("=="):
        cur = l[3:].strip(); continue
    m = re.match(r"\s+compute\s+([\d.]+)", l)
    if m: tf = float(m.group(1))
    m = re.match(r"\s+cuBLAS\s+([\d.]+)", l)
    if m: print(f"{cur}: {tf:.1f} TFLOP/s, cuBLAS {float(m.group(1)):.1f}, {100 * tf / float(m.group(1)):.2f}%")
PY
