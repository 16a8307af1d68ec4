#!/bin/bash
# Device run C (fifteenth session): the automatic schedules with l2=evict_last (branch autol2)
# against the hand schedules, one after the other at each example's first bench size, and each
# automatic one validated at its ragged size.
B=target/release/hopfuse
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 30 --warmup 5"
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== auto vs hand $(date +%T)" >> $S
for n in add_rmsnorm causal_softmax gelu_exact layernorm_two_pass rmsnorm swiglu softmax_scale dropout_residual layernorm; do
  size=$(grep -m1 '// bench:' examples/fusions/$n.hf | sed 's/.*bench: //')
  ragged=$(grep '// bench:' examples/fusions/$n.hf | tail -1 | sed 's/.*bench: //')
  v ${n}_hand 60 $B run examples/fusions/$n.hf --size $size $T
  v ${n}_auto 60 $B run target/devA/auto/${n}_auto.hf --size $size $T
  v ${n}_hand2 60 $B run examples/fusions/$n.hf --size $size $T
  v ${n}_auto_ragged 60 $B run target/devA/auto/${n}_auto.hf --size $ragged $RS
done
v gelu_mem 120 compute-sanitizer --tool memcheck $B run target/devA/auto/gelu_exact_auto.hf --size $(grep '// bench:' examples/fusions/gelu_exact.hf | tail -1 | sed 's/.*bench: //') $RS
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rC && rm -r rC
cat $S
