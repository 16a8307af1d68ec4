#!/bin/bash
# Device run D: the ping-pong attention kernel with three stages of K and V (224 KiB of shared
# memory, as cuDNN's 232 KiB kernel) against two, interleaved (the 2k gap, issue 35).
N=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/$n.txt | tr '\n' ' ') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
A="--iters 20 --warmup 3 --no-ceiling"
PP=examples/attention/online_wgmma_overlap_pingpong.hf
P3=target/devA/pers/pp3.hf
v pp3_ragged 40 $N run $P3 --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling && OK=1
if [ -n "$OK" ]; then
  v pp3_race 60 compute-sanitizer --tool racecheck $N run $P3 --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling
  for r in 1 2; do
    v pp_$r 60 $N run $PP --size B=128,S=2048,T=2048 $A
    v pp3_$r 60 $N run $P3 --size B=128,S=2048,T=2048 $A
  done
fi
cd $OUT && tar czf logs.tgz rD && rm -r rD
cat $S
