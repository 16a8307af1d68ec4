# Shared by the scripts that check `hopfuse serve` on the lent H100 (sourced): starts one
# service on a free loopback port with its own data directory (killed on exit) and brings in
# `json_file`, `field` and `run_job` (api-lib.sh). Needs B (the hopfuse binary), OUT, summary and `say`
# set by the caller; SERVE_ARGS adds options to `hopfuse serve`.
. "$(dirname "${BASH_SOURCE[0]}")/api-lib.sh"
DATA=$(mktemp -d)
"$B" serve --addr 127.0.0.1:0 --data-dir "$DATA" ${SERVE_ARGS:-} \
  --static-dir "$DATA/none" >"$OUT/serve.out" 2>"$OUT/serve.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
BASE=$(service_url "$OUT/serve.out")
[ -n "${BASE:-}" ] || { say "FAIL: the service did not start"; cat "$OUT/serve.log"; exit 1; }
curl -s "$BASE/api/health" >"$OUT/health-start.json"
say "health at start: $(cat "$OUT/health-start.json" | cut -c1-400)"

