#!/bin/bash
# Session 17, run D: pass scaled_max (the row maximum before the scale) on the GPU: ragged,
# a negative and a zero scale (the branch's other side), synccheck of the quad shuffles under
# the branch; plain attention, GQA and D = 256 against cuDNN in the same process.
N=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/$n.txt | tr '\n' ' ') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
A=examples/auto/attention.hf
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v ragged 40 $N run $A $R
v ragged_neg 40 $N run $A $R --scalar scale=-0.08838834764831845
v ragged_zero 40 $N run $A $R --scalar scale=0
v gqa_ragged 40 $N run examples/attention/online_wgmma_gqa.hf --size B=2,G=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling
v sync 90 compute-sanitizer --tool synccheck $N run $A --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling
v race 90 compute-sanitizer --tool racecheck $N run $A --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling
v att_peers 120 $N run $A $Z --peers
v gqa_peers 120 $N run examples/attention/online_wgmma_gqa.hf --size B=16,G=4,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling --peers
v d256_peers 150 $N run examples/auto/attention_d256.hf --iters 20 --warmup 3 --no-ceiling --peers $(grep -m1 '^// bench:' examples/auto/attention_d256.hf | sed 's/\/\/ bench: /--size /')
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rD.tgz rD && rm -r rD
cat $S
