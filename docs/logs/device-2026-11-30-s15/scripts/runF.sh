#!/bin/bash
# Device run F (fifteenth session): bf16 decode 128 x 4096 x 4096 with the weight's tile
# multicast to the two M tiles of a cluster (cuBLAS's choice, run E) against the automatic
# schedule, one after the other; the cluster variant validated at a ragged size.
B=target/release/hopfuse
L=$OUT/rF; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 30 --warmup 5 --no-ceiling"
for r in 1 2; do
  v auto_$r 60 $B run target/devA/dec.hf --size M=128,N=4096,K=4096 $T
  v cluster_$r 60 $B run target/devA/dec128_cluster.hf --size M=128,N=4096,K=4096 $T
done
v cluster_peers 90 $B run target/devA/dec128_cluster.hf --size M=128,N=4096,K=4096 $T --peers
v cluster_ragged 60 $B run target/devA/dec128_cluster.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
v cluster_race 120 compute-sanitizer --tool racecheck $B run target/devA/dec128_cluster.hf --size M=128,N=256,K=1152 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf logs.tgz rF && rm -r rF
cat $S
