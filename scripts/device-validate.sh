#!/usr/bin/env bash
# Runs `hopfuse run` on the H100 machine for a list of programs and sizes, logs everything under
# $OUT and prints a summary table last. Needs CUDA 13 (libnvrtc, headers, driver) there, no Rust:
# carry target/release/hopfuse built elsewhere.
#
#   scripts/device-validate.sh [options] FILE:SIZES [FILE:SIZES ...]
#
#   FILE:SIZES        e.g. examples/basics/add.hf:M=4096,N=4096 (SIZES as for --size)
#   --bin PATH        the hopfuse binary (default: $HOPFUSE or target/release/hopfuse)
#   --selftest        run `hopfuse selftest` first (the runner on built-in kernels)
#   --sanitize        instead of timing, run each pair (and the self-test, with --selftest)
#                     under compute-sanitizer memcheck, racecheck and synccheck with
#                     --iters 1 --warmup 0 --no-ceiling (use small sizes)
#   --iters N, --warmup N, --seed N   passed to `hopfuse run`
#   --timeout S       kill a run after S seconds (default 300): a hung kernel, e.g. an mbarrier
#                     that never completes, cannot be stopped from inside its process
#
# Files under $OUT (default ./device-logs): run.log (every report), results.jsonl (one JSON
# result per pair), sanitize.log (with --sanitize), summary.txt (the table printed last),
# env.txt (device, driver and binary).
# Exit status: 0 when every pair passed (and the self-test, if asked), else 1.
set -uo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2; }

bin=${HOPFUSE:-target/release/hopfuse}
selftest=0
sanitize=0
limit=300
run_opts=()
seed_opts=()
pairs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --selftest) selftest=1; shift ;;
    --timeout) limit=$2; shift 2 ;;
    --sanitize) sanitize=1; shift ;;
    --iters|--warmup) run_opts+=("$1" "$2"); shift 2 ;;
    --seed) run_opts+=("$1" "$2"); seed_opts+=("$1" "$2"); shift 2 ;;
    -h|--help) usage ;;
    -*) echo "device-validate: unknown option $1" >&2; usage ;;
    *:*) pairs+=("$1"); shift ;;
    *) echo "device-validate: '$1' is not FILE:SIZES" >&2; usage ;;
  esac
done
[ ${#pairs[@]} -gt 0 ] || [ "$selftest" = 1 ] || usage
[ -x "$bin" ] || { echo "device-validate: no executable hopfuse at $bin (use --bin)" >&2; exit 2; }

out=${OUT:-device-logs}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# CUDA 13: libnvrtc on the library path, headers for cuda_fp16.h / cuda_bf16.h.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ -d "$cuda_home/lib64" ]; then
  export LD_LIBRARY_PATH="$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "${HOPFUSE_CUDA_INCLUDE:-}" ] && [ -f "$cuda_home/include/cuda_bf16.h" ]; then
  export HOPFUSE_CUDA_INCLUDE="$cuda_home/include"
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "binary: $bin ($("$bin" --version 2>&1))"
  echo "HOPFUSE_CUDA_INCLUDE=${HOPFUSE_CUDA_INCLUDE:-}"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 || true
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version 2>&1 | tail -n 1
} >"$out/env.txt"
cat "$out/env.txt"

status=0
selftest_status=""
rows=()
sanitized() { # label, then the hopfuse arguments: one row of the sanitizer table
  local label=$1 tool rc row
  shift
  row="$label"
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool: hopfuse $*" | tee -a "$out/sanitize.log"
    timeout -k 10 "$limit" compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin" "$@" >>"$out/sanitize.log" 2>&1
    rc=$?
    case $rc in
      0) row="$row|clean" ;; 3) row="$row|ERRORS" ;; 1) row="$row|FAIL(run)" ;;
      124|137) row="$row|TIMEOUT" ;; *) row="$row|rc=$rc" ;;
    esac
    [ "$rc" = 0 ] || status=1
    tail -n 2 "$out/sanitize.log"
  done
  rows+=("$row")
}
if [ "$selftest" = 1 ] && [ "$sanitize" = 1 ]; then
  selftest_status="(under compute-sanitizer, below)"
  sanitized "selftest|built-in" selftest --iters 1 --warmup 0 --no-ceiling
elif [ "$selftest" = 1 ]; then
  echo "== hopfuse selftest" | tee -a "$out/run.log"
  if timeout -k 10 "$limit" "$bin" selftest 2>&1 | tee -a "$out/run.log"; then selftest_status=PASS; else selftest_status=FAIL; status=1; fi
fi

: >"$out/results.jsonl"
for pair in "${pairs[@]}"; do
  file=${pair%:*}
  sizes=${pair##*:}
  if [ "$sanitize" = 1 ]; then
    sanitized "$file|$sizes" run "$file" --size "$sizes" "${seed_opts[@]}" --iters 1 --warmup 0 --no-ceiling
    continue
  fi
  json="$tmp/result.json"
  rm -f "$json"
  echo "== hopfuse run $file --size $sizes" | tee -a "$out/run.log"
  timeout -k 10 "$limit" "$bin" run "$file" --size "$sizes" --json-file "$json" "${run_opts[@]}" 2>&1 \
    | tee -a "$out/run.log"
  rc=${PIPESTATUS[0]}
  case $rc in 124|137) echo "device-validate: killed after ${limit}s" | tee -a "$out/run.log" ;; esac
  [ "$rc" = 0 ] || status=1
  if [ -s "$json" ]; then
    python3 -c 'import json,sys; print(json.dumps({"pair": sys.argv[2], **json.load(open(sys.argv[1]))}))' \
      "$json" "$pair" >>"$out/results.jsonl"
  else
    case $rc in 124|137) why="killed after ${limit}s (hung?)" ;; *) why="exit $rc, no JSON" ;; esac
    echo "{\"pair\": \"$pair\", \"error\": {\"stage\": \"runner\", \"message\": \"$why\"}}" >>"$out/results.jsonl"
  fi
done

{
  echo
  echo "== summary ($(date -u +%H:%M:%SZ))"
  [ -n "$selftest_status" ] && echo "selftest: $selftest_status"
  if [ "$sanitize" = 1 ]; then
    printf '%-40s %-24s %-10s %-10s %-10s\n' program sizes memcheck racecheck synccheck
    for row in "${rows[@]}"; do
      IFS='|' read -r f s m r y <<<"$row"
      printf '%-40s %-24s %-10s %-10s %-10s\n' "$f" "$s" "$m" "$r" "$y"
    done
  elif [ ${#pairs[@]} -gt 0 ]; then
    python3 - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fmt = "{:<36} {:<22} {:<14} {:>10} {:>9} {:>7} {:>10} {:>5} {:>6}"
print(fmt.format("program", "sizes", "result", "median us", "GB/s", "% copy", "max rel_l2", "regs", "local"))
for r in rows:
    file, sizes = r["pair"].rsplit(":", 1)
    if "error" in r:
        print(fmt.format(file, sizes, "ERROR " + r["error"]["stage"], "-", "-", "-", "-", "-", "-"))
        continue
    checks = r["validation"] + r["validation_after_timing"]
    worst = max((c["rel_l2"] for c in checks), default=0.0)
    frac = r.get("fraction_of_copy")
    print(fmt.format(file, sizes, "PASS" if r["passed"] else "FAIL",
                     "%.2f" % r["timing"]["median_us"], "%.1f" % r["gbps"],
                     "-" if frac is None else "%.1f" % (100 * frac), "%.2e" % worst,
                     r["attributes"]["registers_per_thread"], r["attributes"]["local_bytes_per_thread"]))
for r in rows:
    if "error" in r:
        print("\n%s: %s" % (r["pair"], r["error"]["message"]))
PY
  fi
} | tee "$out/summary.txt"
exit $status
