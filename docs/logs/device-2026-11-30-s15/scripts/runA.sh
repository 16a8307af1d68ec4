#!/bin/bash
# Device run A (fifteenth session): attention at D = 256 (the attention scheduler's new
# PING_PONG_NARROW kernel): validation at ragged sizes, sanitizers, times with peers at 2k.
B=target/release/hopfuse
L=$OUT/rA; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
X=target/devA/ex
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
for f in attention attention_causal attention_sliding_window attention_softcap; do
  v ${f}_ragged 90 $B run $X/${f}_d256.hf --size B=3,S=1000,T=1037 $RS
done
v plain_ragged_generic 90 $B run $X/attention_d256.hf --size B=3,S=1000,T=1037 --generic $RS
v plain_race 180 compute-sanitizer --tool racecheck $B run $X/attention_d256.hf --size B=2,S=130,T=300 $RS
v plain_sync 180 compute-sanitizer --tool synccheck $B run $X/attention_d256.hf --size B=2,S=130,T=300 $RS
v causal_mem 180 compute-sanitizer --tool memcheck $B run $X/attention_causal_d256.hf --size B=2,S=130,T=300 $RS
echo "== time $(date +%T)" >> $S
T="--iters 20 --warmup 3"
v plain_2k 150 $B run $X/attention_d256.hf --size B=64,S=2048,T=2048 $T --peers
v causal_2k 150 $B run $X/attention_causal_d256.hf --size B=64,S=2048,T=2048 $T --peers
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rA && rm -r rA
cat $S
