# Shared by the scripts that check `hopfuse serve` on the lent H100 (sourced): starts one
# service on a free loopback port with its own data directory (killed on exit) and defines
# `json_file`, `field` and `run_job`. Needs B (the hopfuse binary), OUT, summary and `say`
# set by the caller; SERVE_ARGS adds options to `hopfuse serve`.
DATA=$(mktemp -d)
"$B" serve --addr 127.0.0.1:0 --data-dir "$DATA" ${SERVE_ARGS:-} \
  --static-dir "$DATA/none" >"$OUT/serve.out" 2>"$OUT/serve.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 100); do
  BASE=$(grep -o 'http://[0-9.:]*' "$OUT/serve.out" 2>/dev/null | head -1)
  [ -n "$BASE" ] && break
  sleep 0.2
done
[ -n "${BASE:-}" ] || { say "FAIL: the service did not start"; cat "$OUT/serve.log"; exit 1; }
curl -s "$BASE/api/health" >"$OUT/health-start.json"
say "health at start: $(cat "$OUT/health-start.json" | cut -c1-400)"

json_file() { # file -> JSON string of its text
  printf '"%s"' "$(sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' "$1" | awk '{printf "%s\\n", $0}')"
}
field() { # json key -> first string or number value of key
  grep -o "\"$2\":\(\"[^\"]*\"\|[-0-9.e]*\|true\|false\)" <<<"$1" | head -1 | cut -d: -f2- | tr -d '"'
}
run_job() { # name body -> prints the done event's data; the SSE stream goes to $OUT/NAME.sse
  local name=$1 body=$2 answer id
  answer=$(curl -s -X POST "$BASE/api/run" -d "$body")
  id=$(field "$answer" job_id)
  if [ -z "$id" ]; then echo "{\"submit_error\": $answer}"; return; fi
  curl -s -N --max-time 120 "$BASE/api/jobs/$id/events" >"$OUT/$name.sse"
  grep '^data: {"stage":"done"' "$OUT/$name.sse" | head -1 | cut -c7-
}
