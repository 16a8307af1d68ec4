#!/bin/bash
# Session 17, run E: plain attention at S = T = 8192 with pass scaled_max, D = 256 (B = 16) and
# D = 128 (B = 32), cuDNN SDPA and FlexAttention in the same process.
N=target/release/hopfuse
L=$OUT/rE; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
v d256_8k 200 $N run examples/auto/attention_d256.hf --size B=16,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --peers
v d128_8k 200 $N run examples/auto/attention.hf --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rE.tgz rE && rm -r rE
cat $S
