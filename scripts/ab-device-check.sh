#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there; needs curl and python3): an A/B comparison of two
# programs through `hopfuse serve`, as the playground's Run does with a tab B: one warm worker,
# the same inputs, both validated against the float64 reference, launches interleaved (A B, B A,
# ...) so drift affects both (docs/api.md, "A/B comparisons"). One job per size given.
# Usage: scripts/ab-device-check.sh HOPFUSE A.hf B.hf SIZES... (e.g. M=4096,N=4096,K=4096);
# each answer goes to $OUT/ab-N.json, a table to $OUT/ab-summary.txt. Ends with
# "ab-device-check: P passed, F failed": a check passes when both programs validate and the
# comparison was measured.
set -uo pipefail
B=$1 PA=$2 PB=$3
shift 3
for tool in curl python3 "$B"; do
  command -v "$tool" >/dev/null || { echo "NOT RUN: $tool is missing"; echo "ab-device-check: 0 passed, 1 failed"; exit 1; }
done
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
summary="$OUT/ab-summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
SERVE_ARGS="--job-timeout 60 --requests-per-minute 0"
. "$(dirname "$0")/serve-lib.sh"

passed=0 failed=0
say "| A | B | sizes | A median us | B median us | B / A (median of pairs, range) | validation A, B |"
say "| --- | --- | --- | --- | --- | --- | --- |"
n=0
for sizes in "$@"; do
  n=$((n + 1))
  sz=$(python3 -c 'import json, sys; print(json.dumps({k: int(v) for k, v in (p.split("=") for p in sys.argv[1].split(","))}))' "$sizes")
  run_job "ab-$n" "{\"program\":$(json_file "$PA"),\"program_b\":$(json_file "$PB"),\"sizes\":$sz,\"iters\":30}" >"$OUT/ab-$n.json"
  row=$(python3 - "$OUT/ab-$n.json" "$PA" "$PB" "$sizes" <<'PY'
import json, sys
path, a, b, sizes = sys.argv[1:]
try:
    done = json.load(open(path))
    job = done["result"]  # the done event's JobResult
    c = job.get("comparison")
    va = (job.get("result") or {}).get("passed")
    vb = ((job.get("b") or {}).get("result") or {}).get("passed")
    ok = bool(c) and va is True and vb is True
    cells = [a, b, sizes,
             "%.2f" % c["a_median_us"] if c else "-",
             "%.2f" % c["b_median_us"] if c else "-",
             "%.3f (%.3f-%.3f)" % (c["b_over_a_median"], *c["b_over_a_range"]) if c else "no comparison: %s" % job.get("status"),
             "%s, %s" % (va, vb)]
    print(("PASS" if ok else "FAIL") + " | " + " | ".join(cells) + " |")
except Exception as e:  # no answer, or not the documented shape
    print("FAIL | %s | %s | %s | - | - | no answer: %s | - |" % (a, b, sizes, e))
PY
)
  case $row in PASS*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
  say "| ${row#* | }"
done
say "ab-device-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
