#!/bin/bash
# Device run G (fifteenth session): grouped-query attention (q [B, G, S, 128] against k, v
# [B, T, 128], broadcast over the G query heads of a K/V head) with a hand schedule: the
# D = 128 ping-pong kernel with G on blockIdx.z. Validation, racecheck, time next to the
# plain kernel at the same work (B x G = 64 heads).
B=target/release/hopfuse
L=$OUT/rG; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
v gqa_ragged 90 $B run target/devA/gqa.hf --size B=2,G=3,S=1000,T=1037 $RS
v gqa_race 120 compute-sanitizer --tool racecheck $B run target/devA/gqa.hf --size B=1,G=2,S=130,T=300 $RS
T="--iters 20 --warmup 3"
v gqa_2k 120 $B run target/devA/gqa.hf --size B=16,G=4,S=2048,T=2048 $T --peers
v plain_b64 60 $B run examples/auto/attention.hf --size B=64,S=2048,T=2048 $T
cd $OUT && tar czf logs.tgz rG && rm -r rG
cat $S
