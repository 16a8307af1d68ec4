#!/usr/bin/env bash
# Runs on the lent H100 (no Rust there; carry target/release/hopfuse; needs python3 and curl):
# profiles with Nsight Compute (issue 16)
#  1. through the CLI: `hopfuse run --profile` of a TMA example, the TMA-store example and a
#     matrix product (JSON results, roofline SVGs and ncu's raw pages to $OUT);
#  2. through the service: `hopfuse serve` with its real worker, a run of tma/exp_2d with
#     "profile": true recorded as server-sent events (scripts/record-run.py) with the service's
#     /api/health, for the screenshot in docs/ (scripts/profile-screenshot.sh makes it here);
#  3. a service whose worker has no ncu (HOPFUSE_NCU names a missing file): the run passes and
#     its profile says why there is none.
# Each check prints a PASS or FAIL line; the script ends with "profile-device-check: P passed,
# F failed" and exits 1 unless every check passed (a check that could not run is a FAIL).
# Usage: scripts/profile-device-check.sh [hopfuse binary]; everything goes to $OUT.
set -uo pipefail
B=${1:-target/release/hopfuse}
OUT=${OUT:-/tmp/hopfuse-out}
mkdir -p "$OUT"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
# CUDA 13: libnvrtc on the library path, headers for cuda_fp16.h / cuda_bf16.h (as
# device-validate.sh), ncu and nvdisasm from the toolkit's bin/.
if [ -d "$cuda_home/lib64" ]; then
  export LD_LIBRARY_PATH="$cuda_home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "${HOPFUSE_CUDA_INCLUDE:-}" ] && [ -f "$cuda_home/include/cuda_bf16.h" ]; then
  export HOPFUSE_CUDA_INCLUDE="$cuda_home/include"
fi
export PATH="$PATH:$cuda_home/bin"
summary="$OUT/profile-summary.txt"
: >"$summary"
pass=0 fail=0
say() { echo "$*" | tee -a "$summary"; }
verdict() { # ok name detail
  if [ "$1" = 0 ]; then pass=$((pass + 1)); say "PASS $2: $3"; else fail=$((fail + 1)); say "FAIL $2: $3"; fi
}
for tool in python3 curl "$B"; do
  command -v "$tool" >/dev/null || { say "NOT RUN: $tool is missing"; echo "profile-device-check: 0 passed, 1 failed"; exit 1; }
done
nvidia-smi -L | tee "$OUT/gpu.txt"
command -v ncu && ncu --version | tail -1

# A profile in a JSON file (`hopfuse run --json` or a done event's data): what it has, and
# whether it has everything the issue asks for (warp stalls and a roofline included).
# Usage: check_profile FILE [roofline|no-roofline|unavailable]
check_profile() {
  python3 - "$1" "${2:-roofline}" <<'EOF'
import json, sys
path, want = sys.argv[1], sys.argv[2]
text = open(path).read()
if text.startswith("event:"):  # an SSE recording: its done event's data
    done = [b for b in text.split("\n\n") if b.startswith("event: done")]
    data = json.loads(done[0].split("\ndata: ", 1)[1])["result"]
    if data.get("status") != "passed":
        print(f"job status {data.get('status')}: {data.get('message')}"); sys.exit(1)
    if "profile" not in data.get("progress", []):
        print(f"no profile step in {data.get('progress')}"); sys.exit(1)
    result = data["result"]
else:
    result = json.loads(text)
report = result.get("profile")
if report is None:
    print("no profile in the result"); sys.exit(1)
u = report.get("unavailable")
if want == "unavailable":
    ok = u is not None and u.get("reason") == "no_ncu" and result.get("passed")
    print(f"unavailable ({u and u.get('reason')}): {u and u.get('message')}; run passed={result.get('passed')}")
    sys.exit(0 if ok else 1)
if u is not None:
    print(f"unavailable ({u.get('reason')}): {u.get('message')}"); sys.exit(1)
r = report["measured"]
p = r["profile"]
need = ["duration_ns", "dram_throughput_pct", "dram_bytes", "l2_hit_rate_pct", "sm_throughput_pct",
        "tensor_pipe_pct", "achieved_occupancy_pct", "shared_bank_conflicts"]
missing = [k for k in need if p.get(k) is None]
stalls = ", ".join(f"{s['reason']} {s['value']:.2f}" for s in p.get("stalls", []))
rl = r.get("roofline")
print(f"ncu {p.get('ncu')}; DRAM {p.get('dram_throughput_pct')}% ({p.get('dram_bytes')} B), "
      f"L2 hit {p.get('l2_hit_rate_pct')}%, SM {p.get('sm_throughput_pct')}%, tensor "
      f"{p.get('tensor_pipe_pct')}%, occupancy {p.get('achieved_occupancy_pct')}%, bank conflicts "
      f"{p.get('shared_bank_conflicts')}, flops {p.get('flops')}; stalls ({p.get('stall_unit')}): {stalls}; "
      + (f"roofline {rl['flops_per_s']:.3e} FLOP/s, {rl['bytes_per_s']:.3e} B/s at {rl['intensity']:.3f} FLOP/B "
         f"({rl['flops_from']}), copy {rl['copy_bytes_per_s']:.3e}, tensor {rl['tensor_flops_per_s']} "
         f"[{rl.get('tensor_ceiling')}]"
         if rl else f"no roofline: {r.get('roofline_missing')}")
      + (f"; MISSING {missing}" if missing else ""))
# The roofline with both roofs: the copy, and the tensor cores (cuBLAS on a matrix product's own
# shape, else the worker's bf16 GEMM).
ok = not missing and p.get("stalls") and (
    (rl is not None and rl.get("tensor_flops_per_s")) or want == "no-roofline")
sys.exit(0 if ok else 1)
EOF
}

# 1. The CLI.
profile() { # name example sizes
  local name=$1 ex=$2 sizes=$3 detail
  echo "=== hopfuse run --profile $ex $sizes"
  "$B" run "examples/$ex.hf" --size "$sizes" --iters 50 --profile \
    --roofline "$OUT/roofline-$name.svg" --profile-csv "$OUT/ncu-raw-$name.csv" \
    --json-file "$OUT/profile-$name.json"
  detail=$(check_profile "$OUT/profile-$name.json")
  verdict $? "cli $ex $sizes" "$detail"
  [ -s "$OUT/roofline-$name.svg" ] || say "   (no roofline SVG written)"
}
profile exp_2d tma/exp_2d M=8192,N=8192
profile exp_store tma/exp_store M=8192,N=8192
profile matmul basics/matmul M=2048,N=2048,K=2048
# The compile side on the device too: SASS mapped to CUDA, IR and passes.
if "$B" compile --sass examples/tma/exp_2d.hf --size M=8192,N=8192 >"$OUT/exp_2d.sass"; then
  verdict 0 "compile --sass" "$(head -1 "$OUT/exp_2d.sass")"
else
  verdict 1 "compile --sass" "failed"
fi

# 2. and 3. The service.
start_serve() { # name [env...] -> sets BASE and SERVER
  local name=$1 data
  shift
  data=$(mktemp -d)
  env "$@" "$B" serve --addr 127.0.0.1:0 --data-dir "$data" --job-timeout 300 \
    --static-dir "$data/none" >"$OUT/serve-$name.out" 2>"$OUT/serve-$name.log" &
  SERVER=$!
  BASE=""
  for _ in $(seq 300); do
    BASE=$(grep -o 'http://[0-9.:]*' "$OUT/serve-$name.out" 2>/dev/null | head -1)
    [ -n "$BASE" ] && break
    sleep 0.2
  done
}
start_serve profile
if [ -n "$BASE" ]; then
  curl -s "$BASE/api/health" >"$OUT/health-profile.json"
  python3 scripts/record-run.py "$BASE" examples/tma/exp_2d.hf M=8192,N=8192 \
    "$OUT/exp_2d_profile_h100.sse" --profile
  detail=$(check_profile "$OUT/exp_2d_profile_h100.sse")
  verdict $? "service exp_2d 8192x8192 with profile" "$detail"
  h=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/api/health")
  [ "$h" = 200 ]; verdict $? "service healthy after the profile" "health=$h"
else
  verdict 1 "service exp_2d 8192x8192 with profile" "the service did not start: $(tail -5 "$OUT/serve-profile.log")"
fi
kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null

start_serve no-ncu HOPFUSE_NCU=/nonexistent/ncu
if [ -n "$BASE" ]; then
  python3 scripts/record-run.py "$BASE" examples/tma/exp_2d.hf M=1024,N=1024 \
    "$OUT/exp_2d_no_ncu.sse" --profile
  detail=$(check_profile "$OUT/exp_2d_no_ncu.sse" unavailable)
  verdict $? "service without ncu: the run passes, the profile says why" "$detail"
else
  verdict 1 "service without ncu" "the service did not start: $(tail -5 "$OUT/serve-no-ncu.log")"
fi
kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null

say "profile-device-check: $pass passed, $fail failed"
[ "$fail" = 0 ]
