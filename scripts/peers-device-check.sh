#!/usr/bin/env bash
# The peers table of docs/benchmarks.md, on the GPU machine: every example at its `// bench:`
# sizes and at a mid size (4096^2 elements; 4096^3 for a matrix product), timed against its
# PyTorch twin eagerly and under torch.compile (and cuBLASLt's fused epilogue where it applies)
# with `hopfuse bench --peers`, every peer validated against the float64 reference.
# Needs CUDA 13 and a Python with torch (and Triton for torch.compile) there, no Rust: carry
# target/release/hopfuse built elsewhere.
#
#   scripts/peers-device-check.sh [--bin PATH] [--python PATH] [--iters N] [FILE...]
#
#   --bin PATH     the hopfuse binary (default: $HOPFUSE or target/release/hopfuse)
#   --python PATH  the interpreter with torch (default: $HOPFUSE_PYTHON or python3)
#   --iters N      timed iterations per run (default 100)
#   FILE...        programs (default: examples/*/*.hf)
#
# Files under $OUT (default ./device-logs): env.txt (GPU, driver, torch, Triton), peers.md (the
# table: bench sizes first, then the mid sizes), bench.log (stderr of the runs). Exit status 1
# when a kernel or a peer did not validate, or a peer could not be timed.
set -uo pipefail

bin=${HOPFUSE:-target/release/hopfuse}
python=${HOPFUSE_PYTHON:-python3}
iters=100
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ ${#files[@]} -gt 0 ] || files=(examples/*/*.hf)
out=${OUT:-device-logs}
mkdir -p "$out"
export HOPFUSE_PYTHON=$python

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  "$python" -c 'import torch; print("torch:", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  "$python" -c 'import triton; print("triton:", triton.__version__)' 2>&1
  echo "binary: $("$bin" --version)"
} | tee "$out/env.txt"

# The mid size of a program: 4096^2 elements over its size symbols.
mid_size() {
  local syms
  syms=$(sed -n 's|^// bench: *||p' "$1" | head -n 1 | tr ',' '\n' | sed 's/=.*//' | sort | tr '\n' ' ')
  case "$syms" in
    "K M N ") echo "M=4096,N=4096,K=4096" ;;
    "M N ") echo "M=4096,N=4096" ;;
    "N ") echo "N=16777216" ;;
    "B M N ") echo "B=16,M=256,N=4096" ;;
    *) echo "" ;;
  esac
}

table="$out/peers.md"
: > "$table"
status=0
run_bench() {
  # $1: the label; the rest: bench arguments. Appends the rows (the header only once).
  local label=$1; shift
  local lines
  lines=$("$bin" bench --peers --iters "$iters" "$@" 2>>"$out/bench.log" | grep '^|')
  [ -s "$table" ] || printf '%s\n' "$lines" | head -n 2 >> "$table"
  printf '%s\n' "$lines" | tail -n +3 >> "$table"
  echo "peers-device-check: $label done" >&2
}

run_bench "bench sizes" "${files[@]}"
for f in "${files[@]}"; do
  sizes=$(mid_size "$f")
  [ -n "$sizes" ] && run_bench "$f at $sizes" --size "$sizes" "$f"
done

cat "$table"
# A FAIL anywhere (the kernel's validation or a peer's), a peer that was not timed, or no peers.
if grep -qE 'FAIL|not timed|peers unavailable|no peer validated' "$table"; then
  echo "peers-device-check: some kernel or peer did not validate or was not timed (see $table)" >&2
  status=1
fi
exit $status
