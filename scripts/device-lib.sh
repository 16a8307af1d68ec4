# Shared by the device-check scripts (sourced; they run on the lent H100): a tally of checks,
# `run` (one validated, timed run as a table row) and `san` (one compute-sanitizer run).
# Needs B (the hopfuse binary), OUT and summary set by the caller. A run that hangs (a kernel
# that never finishes) is killed after RUN_TIMEOUT seconds (default 180; sanitizer runs 4x)
# and counts as failed, so one hang does not take the device session with it.
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
passed=0 failed=0 not_run=0
tally() { # PASS | FAIL | NOT_RUN
  case $1 in PASS) passed=$((passed + 1)) ;; NOT_RUN) not_run=$((not_run + 1)) ;; *) failed=$((failed + 1)) ;; esac
}
run() { # example sizes [extra args]
  local ex=$1 sizes=$2; shift 2
  local one="$OUT/one.log" t0=$SECONDS
  timeout "$RUN_TIMEOUT" "$B" run "examples/$ex.hf" --size "$sizes" "$@" >"$one" 2>&1
  local rc=$? secs=$((SECONDS - t0))
  { echo "=== $ex $sizes $* (exit $rc)"; cat "$one"; } >>"$OUT/run.log"
  local v med gbs copy ratio l2
  v=$(grep -m1 -oE 'validation +[A-Z]+' "$one" | awk '{print $2}')
  l2=$(grep -m1 -oE 'rel_l2 [0-9.eE+-]+' "$one" | awk '{print $2}')
  med=$(grep -m1 -oE 'median [0-9.]+ us' "$one" | awk '{print $2" us"}')
  gbs=$(grep -m1 -oE 'bandwidth +[0-9.]+' "$one" | awk '{print $2}')
  copy=$(grep -m1 -oE 'copy +[0-9.]+' "$one" | awk '{print $2}')
  ratio=$(grep -m1 -oE 'ratio +[0-9.]+%' "$one" | awk '{print $2}')
  [ $rc -eq 0 ] || v="FAIL(exit $rc): $(grep -m1 -iE 'error' "$one" | cut -c1-120)"
  [ $rc -eq 124 ] && v="FAIL(timed out after ${RUN_TIMEOUT} s: a hang?)"
  if [ $rc -eq 0 ] && [ "${v:-}" = PASS ]; then tally PASS; else tally FAIL; fi
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$ex" "$sizes" "${v:-?}" "${l2:-}" "${med:-}" "${gbs:-}" "${copy:-}" "${ratio:-}" "$secs" | tee -a "$summary"
}
san() { # tool example sizes
  local tool=$1 ex=$2 sizes=$3 log="$OUT/san.log" rc
  if ! command -v compute-sanitizer >/dev/null; then
    printf '| %s | %s | %s | NOT RUN | no compute-sanitizer on PATH |\n' "$tool" "$ex" "$sizes" | tee -a "$summary"
    tally NOT_RUN
    return
  fi
  timeout $((4 * RUN_TIMEOUT)) compute-sanitizer --tool "$tool" --error-exitcode 9 "$B" run "examples/$ex.hf" --size "$sizes" --iters 1 --warmup 0 --no-ceiling >"$OUT/san-one.log" 2>&1
  rc=$?
  case $rc in 0) r=CLEAN; tally PASS ;; 9) r=ERRORS; tally FAIL ;; *) r="FAIL(run exit $rc)"; tally FAIL ;; esac
  { echo "=== $tool $ex $sizes: $r"; cat "$OUT/san-one.log"; } >>"$log"
  printf '| %s | %s | %s | %s | %s |\n' "$tool" "$ex" "$sizes" "$r" "$(grep -m1 'ERROR SUMMARY' "$OUT/san-one.log")" | tee -a "$summary"
}
