#!/usr/bin/env bash
# Runs on the lent H100 (no Rust or network there; needs curl): the distributed mode with the
# real GPU worker. A nats-server (the binary is carried in: `cp "$(command -v nats-server ||
# echo /usr/sbin/nats-server)" .tools/` here, then `carry: [".tools/nats-server", ...]`), one
# `hopfuse serve --queue` front-end (SQLite) and one `hopfuse agent --gpus 1`, all on loopback.
# Checks through the front-end's API: a good kernel passes with a measurement and names the
# agent; a deadlocking kernel is killed at the time limit on the agent (timed_out); an
# illegal-address kernel is an error and the next job gets a fresh worker process; the
# front-end's /api/health shows the agent and its GPU; the stream is empty at the end.
# Usage: scripts/distributed-device-check.sh [hopfuse binary] [nats-server binary]; logs and
# summary go to $OUT. Each check prints PASS or FAIL; the script ends with
# "distributed-device-check: P passed, F failed" and exits 1 unless every check passed.
set -uo pipefail
B=${1:-target/release/hopfuse}
NATS=${2:-.tools/nats-server}
for tool in curl "$B" "$NATS"; do
  command -v "$tool" >/dev/null || { echo "NOT RUN: $tool is missing"; echo "distributed-device-check: 0 passed, 0 failed, 1 not run"; exit 1; }
done
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
DATA=$(mktemp -d)
summary="$OUT/distributed-summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null' EXIT

PORT=$((20000 + RANDOM % 20000))
"$NATS" -js -a 127.0.0.1 -p "$PORT" -sd "$DATA/nats" >"$OUT/nats.log" 2>&1 &
PIDS+=($!)
URL=nats://127.0.0.1:$PORT
for _ in $(seq 50); do grep -q "Server is ready" "$OUT/nats.log" && break; sleep 0.2; done
. "$(dirname "$0")/api-lib.sh"
"$B" serve --addr 127.0.0.1:0 --data-dir "$DATA/fe" --static-dir "$DATA/none" --queue "$URL" \
  --fault-kernels --job-timeout 10 >"$OUT/fe.out" 2>"$OUT/fe.log" &
PIDS+=($!)
"$B" agent --queue "$URL" --gpus 1 --job-timeout 10 --name h100 --data-dir "$DATA/agent" \
  >"$OUT/agent.out" 2>"$OUT/agent.log" &
PIDS+=($!)
BASE=$(service_url "$OUT/fe.out")
[ -n "${BASE:-}" ] || { say "FAIL: the front-end did not start"; cat "$OUT/fe.log"; exit 1; }

check() { # name expected-status result [extra grep]
  local name=$1 want=$2 r=$3 extra=${4:-} got ok=PASS
  got=$(field "$r" status)
  [ "$got" = "$want" ] || ok=FAIL
  [ "$(field "$r" agent)" = h100 ] || ok=FAIL
  if [ -n "$extra" ] && ! grep -q -- "$extra" <<<"$r"; then ok=FAIL; fi
  say "$ok $name: status=$got (want $want${extra:+, with $extra}), agent=$(field "$r" agent), worker pid=$(field "$r" pid), queued_ms=$(field "$r" queued_ms), message=$(field "$r" message)"
}

# The agent announces its GPU within a heartbeat.
ok=FAIL
for _ in $(seq 40); do
  h=$(curl -s "$BASE/api/health")
  if grep -q '"gpus":1' <<<"$h" && grep -q '"id":"h100"' <<<"$h"; then ok=PASS; break; fi
  sleep 0.5
done
say "$ok health shows the agent and its GPU: $(grep -o '"distributed":.*' <<<"$h" | cut -c1-300)"

ADD=$(json_file examples/basics/add.hf)
r=$(run_job good "{\"program\":$ADD,\"sizes\":{\"M\":4096,\"N\":4096},\"iters\":100}")
check good passed "$r" '"passed":true'
say "   good: median_us=$(field "$r" median_us) gbps=$(field "$r" gbps)"
r=$(run_job deadlock '{"fault":"deadlock","sizes":{"N":1048576},"iters":10}')
check deadlock timed_out "$r" '"launch"'
r=$(run_job illegal_address '{"fault":"illegal_address","sizes":{"N":1048576},"iters":10}')
check illegal_address error "$r" 'ILLEGAL_ADDRESS'
pid_fault=$(field "$r" pid)
r=$(run_job good_after "{\"program\":$ADD,\"sizes\":{\"M\":4096,\"N\":4096},\"iters\":100}")
check good_after_the_faults passed "$r" '"passed":true'
pid_next=$(field "$r" pid)
if [ -n "$pid_next" ] && [ "$pid_next" != "$pid_fault" ]; then
  say "PASS fresh worker on the agent after the illegal address: pid $pid_fault -> $pid_next"
else
  say "FAIL fresh worker on the agent after the illegal address: pid $pid_fault -> $pid_next"
fi
sleep 6 # a heartbeat
h=$(curl -s "$BASE/api/health")
if grep -q '"depth":0' <<<"$h" && grep -q '"completed":4' <<<"$h"; then ok=PASS; else ok=FAIL; fi
say "$ok the stream is empty and the agent ended 4 jobs: $(grep -o '"distributed":.*' <<<"$h" | cut -c1-300)"

echo "---- summary"; cat "$summary"
passed=$(grep -c '^PASS' "$summary")
failed=$(grep -c '^FAIL' "$summary")
echo "distributed-device-check: $passed passed, $failed failed" | tee -a "$summary"
[ "$failed" -eq 0 ]
