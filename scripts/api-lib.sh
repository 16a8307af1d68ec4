# Shared by the scripts that talk to the runner's HTTP API with curl (sourced): `json_file`,
# `field` and `run_job` (they need BASE, the service's URL, and OUT, where event streams go),
# and `service_url`.
service_url() { # file -> the http://host:port a starting `hopfuse serve` printed there (waits up to 20 s)
  local url
  for _ in $(seq 100); do
    url=$(grep -o 'http://[0-9.:]*' "$1" 2>/dev/null | head -1)
    [ -n "$url" ] && { echo "$url"; return; }
    sleep 0.2
  done
}
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
