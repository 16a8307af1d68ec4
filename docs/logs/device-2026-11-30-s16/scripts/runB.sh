#!/bin/bash
# Device run B (sixteenth session): the fusions table in one run (rotary with view_vectors),
# rotary and kv_append at ragged sizes, grouped-query attention with its SDPA / cuDNN / Flex
# peers and its variants validated on the GPU, transpose_bf16 again for its spread.
N=target/release/hopfuse
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers\|vs SDPA\|vs cuDNN\|vs Flex\|ceiling' $L/$n.txt | head -5 | sed 's/  */ /g' | tr '\n' ';') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 30 --warmup 5"
echo "== fusions $(date +%T)" >> $S
for f in examples/fusions/*.hf; do
  n=$(basename $f .hf)
  size=$(grep -m1 '// bench:' $f | sed 's/.*bench: //')
  v $n 75 $N run $f --size $size $T --peers
done
echo "== ragged $(date +%T)" >> $S
v rotary_ragged 60 $N run examples/fusions/rotary.hf --size S=1037 --iters 3 --warmup 1
v kv_append_aligned 60 $N run examples/ops/kv_append.hf --size R=32768,S=4096,T=8 --iters 3 --warmup 1
v kv_append_bench 60 $N run examples/ops/kv_append.hf --size $(grep -m1 '// bench:' examples/ops/kv_append.hf | sed 's/.*bench: //') --iters 3 --warmup 1
echo "== gqa $(date +%T)" >> $S
v gqa_peers 150 $N run examples/attention/online_wgmma_gqa.hf --size B=16,G=4,S=2048,T=2048 --iters 20 --warmup 3 --peers
for f in target/devA/gqa/*.hf; do
  n=$(basename $f .hf)
  case $n in *unbatched*) s=G=3,S=1000,T=1037;; *) s=B=2,G=3,S=1000,T=1037;; esac
  v ${n}_ragged 60 $N run $f --size $s --iters 3 --warmup 1 --no-ceiling
done
v gqa_causal_peers 150 $N run target/devA/gqa/gqa_causal.hf --size B=16,G=4,S=2048,T=2048 --iters 20 --warmup 3 --peers
echo "== transpose $(date +%T)" >> $S
v transpose_again 75 $N run examples/fusions/transpose_bf16.hf --size M=16384,N=16384 $T --peers
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rB && rm -r rB
cat $S
