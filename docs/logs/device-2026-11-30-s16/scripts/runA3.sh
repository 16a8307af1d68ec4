#!/bin/bash
# Device run A3: persistent attention with q double-buffered by a producer warp (two
# warp-specialized loops), against the non-persistent ping-pong kernel, interleaved.
N=target/release/hopfuse
L=$OUT/rA3; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/$n.txt | tr '\n' ' ') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
A="--iters 20 --warmup 3 --no-ceiling"
CS=compute-sanitizer
PQ=target/devA/pers/online_wgmma_overlap_pingpong_pq.hf
PQC=target/devA/pers/online_wgmma_overlap_pingpong_causal_pq.hf
PP=examples/attention/online_wgmma_overlap_pingpong.hf
PPC=examples/attention/online_wgmma_overlap_pingpong_causal.hf
echo "== $(date +%T)" >> $S
v pq_ragged 60 $N run $PQ --size B=40,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling && P=1
v pqc_ragged 60 $N run $PQC --size B=40,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling
if [ -n "$P" ]; then
  v pq_race 120 $CS --tool racecheck $N run $PQ --size B=140,S=128,T=200 --iters 1 --warmup 0 --no-ceiling
  v pq_sync 120 $CS --tool synccheck $N run $PQ --size B=140,S=128,T=200 --iters 1 --warmup 0 --no-ceiling
  v pqc_race 120 $CS --tool racecheck $N run $PQC --size B=140,S=200,T=200 --iters 1 --warmup 0 --no-ceiling
  for r in 1 2; do
    v pp_$r 90 $N run $PP --size B=128,S=2048,T=2048 $A
    v pq_$r 90 $N run $PQ --size B=128,S=2048,T=2048 $A
  done
fi
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rA3 && rm -r rA3
cat $S
