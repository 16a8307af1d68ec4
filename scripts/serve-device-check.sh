#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there; needs curl): one `hopfuse serve` session with a
# deadlocking kernel, an illegal-address kernel, an NVRTC error and a good kernel (twice, the
# second from the CUBIN cache), checking each result, that the service stays healthy and that
# a fault gets the next job a fresh worker process; an interleaved A/B; then the end-to-end
# request time of tiny cached runs on the warm worker (overhead: kernel time is microseconds;
# target <= 100 ms).
# Usage: scripts/serve-device-check.sh [hopfuse binary]; logs and summary.txt go to $OUT.
# Each check prints a PASS or FAIL line; the script ends with "serve-device-check: P passed, F
# failed" and exits 1 unless every check passed (a check that could not run is a FAIL).
set -uo pipefail
B=${1:-target/release/hopfuse}
for tool in curl "$B"; do
  command -v "$tool" >/dev/null || { echo "NOT RUN: $tool is missing"; echo "serve-device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
done
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
summary="$OUT/serve-summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

SERVE_ARGS="--fault-kernels --job-timeout 10"
. "$(dirname "$0")/serve-lib.sh"

check() { # name expected-status result [extra grep]
  local name=$1 want=$2 r=$3 extra=${4:-} got ok=PASS
  got=$(field "$r" status)
  [ "$got" = "$want" ] || ok=FAIL
  if [ -n "$extra" ] && ! grep -q -- "$extra" <<<"$r"; then ok=FAIL; fi
  local h
  h=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/api/health")
  [ "$h" = 200 ] || ok=FAIL
  say "$ok $name: status=$got (want $want${extra:+, with $extra}), health=$h, worker pid=$(field "$r" pid) job_in_process=$(field "$r" job_in_process) ended=$(field "$r" ended), message=$(field "$r" message)"
}

r=$(run_job deadlock '{"fault":"deadlock","sizes":{"N":1048576},"iters":10}')
check deadlock timed_out "$r" '"launch"'
r=$(run_job illegal_address '{"fault":"illegal_address","sizes":{"N":1048576},"iters":10}')
check illegal_address error "$r" 'ILLEGAL_ADDRESS'
check illegal_address_ends_its_worker error "$r" 'poisoned the context'
pid_fault=$(field "$r" pid)
r=$(run_job nvrtc_error '{"fault":"nvrtc_error","sizes":{"N":1024},"iters":10}')
check nvrtc_error error "$r" '"stage":"nvrtc"'
pid_next=$(field "$r" pid)
if [ -n "$pid_next" ] && [ "$pid_next" != "$pid_fault" ]; then
  say "PASS fresh worker after the illegal address: pid $pid_fault -> $pid_next"
else
  say "FAIL fresh worker after the illegal address: pid $pid_fault -> $pid_next"
fi
ADD=$(json_file examples/basics/add.hf)
r=$(run_job good "{\"program\":$ADD,\"sizes\":{\"M\":4096,\"N\":4096},\"iters\":100}")
check good passed "$r" '"passed":true'
say "   good: median_us=$(field "$r" median_us) gbps=$(field "$r" gbps) cubin_cached=$(field "$r" cubin_cached)"
r=$(run_job good_cached "{\"program\":$ADD,\"sizes\":{\"M\":4096,\"N\":4096},\"iters\":100}")
check good_cached passed "$r" '"cubin_cached":true'
SOFTMAX=$(json_file examples/basics/softmax.hf)
r=$(run_job ab "{\"program\":$ADD,\"program_b\":$ADD,\"sizes\":{\"M\":4096,\"N\":4096},\"iters\":100}")
check ab passed "$r" '"interleaved":true'
say "   ab (same program twice, interleaved): b_over_a_median=$(field "$r" b_over_a_median) range=$(grep -o '"b_over_a_range":\[[^]]*\]' <<<"$r") pairs=$(field "$r" pairs)"
r=$(run_job ab_softmax "{\"program\":$SOFTMAX,\"program_b\":$(json_file examples/basics/softmax_shared.hf),\"sizes\":{\"M\":4096,\"N\":8192},\"iters\":100}")
check ab_softmax passed "$r" '"interleaved":true'
say "   ab (softmax vs softmax_shared, 4096 x 8192): b_over_a_median=$(field "$r" b_over_a_median) range=$(grep -o '"b_over_a_range":\[[^]]*\]' <<<"$r") a_median_us=$(field "$r" a_median_us) b_median_us=$(field "$r" b_median_us)"

# Overhead: tiny runs (kernel time ~ microseconds) with a cached CUBIN on the warm worker; the
# copy ceiling is the one measured at worker start (reported with its age), not re-measured.
tiny="{\"program\":$SOFTMAX,\"sizes\":{\"M\":64,\"N\":64},\"iters\":1,\"warmup\":0}"
run_job tiny_warm "$tiny" >/dev/null
times=()
for i in $(seq 10); do
  t0=$(date +%s%N)
  r=$(run_job "tiny_$i" "$tiny")
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  times+=("$ms")
  say "overhead run $i: end-to-end $ms ms, worker_ms=$(field "$r" worker_ms), pid=$(field "$r" pid), job_in_process=$(field "$r" job_in_process), spawn_ms=$(field "$r" spawn_ms), cubin_cached=$(field "$r" cubin_cached), ceiling measured=$(field "$r" measured) age_s=$(field "$r" age_s), status=$(field "$r" status)"
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
med=$(sed -n 5p <<<"$sorted")
verdict=PASS
[ "$med" -le 100 ] || verdict=FAIL
say "$verdict overhead: end-to-end ms over 10 tiny cached runs: min $(head -1 <<<"$sorted"), median $med, max $(tail -1 <<<"$sorted") (target <= 100)"

curl -s "$BASE/api/health" >"$OUT/health-end.json"
say "health at end: $(cut -c1-400 "$OUT/health-end.json")"
echo "---- summary"; cat "$summary"
passed=$(grep -c '^PASS' "$summary")
failed=$(grep -c '^FAIL' "$summary")
echo "serve-device-check: $passed passed, $failed failed" | tee -a "$summary"
[ "$failed" -eq 0 ]
