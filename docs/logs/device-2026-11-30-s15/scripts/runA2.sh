#!/bin/bash
# Device run A2: attention at D = 256, S = T = 8192 (B * S = 16k tokens x 8 heads), with peers.
B=target/release/hopfuse
L=$OUT/rA2; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
X=target/devA/ex
T="--iters 20 --warmup 3"
echo "== time $(date +%T)" >> $S
v plain_8k 280 $B run $X/attention_d256.hf --size B=16,S=8192,T=8192 $T --peers
v causal_8k 280 $B run $X/attention_causal_d256.hf --size B=16,S=8192,T=8192 $T --peers
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rA2 && rm -r rA2
cat $S
