#!/bin/bash
# Device run B (fifteenth session): the online softmax's final division as one reciprocal per
# row. Every attention example at its ragged size (their CUDA changed), sanitizers on the
# ping-pong kernel, then the attention times with peers against run A and the last session.
B=target/release/hopfuse
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
for f in examples/attention/online*.hf examples/auto/attention*.hf $EXTRA; do
  n=$(basename $(dirname $f))_$(basename $f .hf)
  size=$(grep '// bench:' $f | tail -1 | sed 's/.*bench: //')
  v val_$n 90 $B run $f --size $size $RS
done
v race_pingpong 180 compute-sanitizer --tool racecheck $B run examples/auto/attention.hf --size B=2,S=130,T=300 $RS
v mem_online 180 compute-sanitizer --tool memcheck $B run examples/attention/online.hf --size S=130,T=300 $RS
echo "== time $(date +%T)" >> $S
T="--iters 20 --warmup 3"
v plain_2k 150 $B run examples/auto/attention.hf --size B=128,S=2048,T=2048 $T --peers
v causal_2k 150 $B run examples/auto/attention_causal.hf --size B=128,S=2048,T=2048 $T --peers
v d256_2k 150 $B run examples/auto/attention_d256.hf --size B=64,S=2048,T=2048 $T --peers
v d64_4k 150 $B run examples/attention/online_wgmma_batched.hf --size B=32,S=4096,T=4096 $T --peers
v softcap_2k 90 $B run examples/auto/attention_softcap.hf --size B=128,S=2048,T=2048 $T
v alibi_2k 90 $B run examples/auto/attention_alibi.hf --size B=128,S=2048,T=2048 $T
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rB && rm -r rB
cat $S
