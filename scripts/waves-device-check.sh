#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there): the run report's waves figure and the persistent-grid
# warning (runner/src/occupancy.rs) on real launches, in the CLI text and in the JSON result
# (`--json-file`: the service's `result`, docs/api.md):
# 1. matmul/step12_cluster_multicast at 4096^3: a persistent grid of 64 clusters of 2 CTAs; it
#    runs at step 9's speed (docs/benchmarks.md, step 12), so all should be resident: 1 wave
#    (cuOccupancyMaxActiveClusters), no warning.
# 2. the same with cluster(BIDy, 4) (made with sed): 32 clusters of 4, of which 30 were found
#    resident (docs/benchmarks.md, step 12): 2 waves and the warning naming the numbers.
# 3. matmul/step9_tma_store_epilogue at 4096^3: 128 CTAs of ~208 KiB shared memory, one per SM
#    (cuOccupancyMaxActiveBlocksPerMultiprocessor x SMs): 1 wave, no warning.
# 4. tma/exp_2d at 8192 x 8192: a grid that follows the sizes: a waves figure, never a warning.
# Usage: scripts/waves-device-check.sh [hopfuse binary]; logs in $OUT.
# Ends with "waves-device-check: P passed, F failed"; exits 1 unless all passed.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
passed=0 failed=0
[ -x "$B" ] || { echo "NOT RUN: no hopfuse binary at $B"; echo "waves-device-check: 0 passed, 1 failed"; exit 1; }
four="$OUT/step12_cluster4.hf"
sed 's/cluster(BIDy, 2)/cluster(BIDy, 4)/' examples/matmul/step12_cluster_multicast.hf >"$four"
grep -q 'cluster(BIDy, 4)' "$four" || { echo "FAIL: step 12 has no cluster(BIDy, 2) line to change"; exit 1; }

# check NAME FILE SIZES EXPECT: runs FILE, then checks the JSON result against EXPECT (a Python
# expression over r = the result, w = r["residency"], warnings = r.get("warnings", [])) and that
# the text report has a waves line (and a warning line exactly when the JSON has a warning).
check() {
  local name=$1 file=$2 sizes=$3 expect=$4
  local log="$OUT/waves-$name.log" json="$OUT/waves-$name.json"
  "$B" run "$file" --size "$sizes" --iters 5 --warmup 1 --no-ceiling --json-file "$json" >"$log" 2>&1
  local rc=$?
  local verdict
  verdict=$(python3 - "$json" "$log" "$expect" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
if "error" in r:
    print("FAIL: the run failed: %s" % r["error"]); sys.exit()
w = r.get("residency")
warnings = r.get("warnings", [])
if w is None:
    print("FAIL: no residency in the result"); sys.exit()
waves_lines = [l for l in text.splitlines() if l.startswith("  waves ")]
warning_lines = [l for l in text.splitlines() if l.startswith("  warning ")]
problems = []
if not r.get("passed"):
    problems.append("validation failed")
if len(waves_lines) != 1:
    problems.append("%d waves lines in the report" % len(waves_lines))
if len(warning_lines) != len(warnings):
    problems.append("%d warning lines in the report, %d in the JSON" % (len(warning_lines), len(warnings)))
if not eval(sys.argv[3], {"r": r, "w": w, "warnings": warnings}):
    problems.append("expected " + sys.argv[3])
shown = "%s | %s" % (waves_lines[0].strip() if waves_lines else "-", warnings[0] if warnings else "no warning")
print(("FAIL: " + "; ".join(problems) + " | " if problems else "PASS | ") + shown)
EOF
)
  [ $rc -eq 0 ] || verdict="FAIL(exit $rc) $verdict"
  case $verdict in PASS*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
  echo "| $name | $sizes | $verdict |"
}

nvidia-smi -L | tee "$OUT/gpu.txt"
echo "| case | sizes | verdict: waves line, warning |"
echo "| --- | --- | --- |"
check step12 examples/matmul/step12_cluster_multicast.hf M=4096,N=4096,K=4096 \
  'w["unit"] == "cluster" and w["unit_ctas"] == 2 and w["grid"] == 64 and w["persistent"] and w.get("waves") == 1 and not warnings'
check step12_cluster4 "$four" M=4096,N=4096,K=4096 \
  'w["unit"] == "cluster" and w["unit_ctas"] == 4 and w["grid"] == 32 and w["persistent"] and w.get("resident", 0) > 0 and w["waves"] == -(-32 // w["resident"]) >= 2 and len(warnings) == 1 and warnings[0].startswith("persistent grid of 32 clusters of 4 CTAs, but at most %d are resident on this GPU (cuOccupancyMaxActiveClusters): " % w["resident"])'
check step9 examples/matmul/step9_tma_store_epilogue.hf M=4096,N=4096,K=4096 \
  'w["unit"] == "cta" and w["grid"] == 128 and w["persistent"] and w.get("per_sm") == 1 and w["resident"] == r["device"]["sm_count"] and w["waves"] == 1 and not warnings'
check exp_2d examples/tma/exp_2d.hf M=8192,N=8192 \
  'w["unit"] == "cta" and not w["persistent"] and w.get("waves", 0) >= 1 and w["resident"] == w["per_sm"] * r["device"]["sm_count"] and not warnings'
echo "waves-device-check: $passed passed, $failed failed"
[ $failed -eq 0 ]
