#!/bin/bash
# For the next session (written in session 18, not yet run): branch `alibi-distribute`'s ALiBi
# kernels (pass distributed_bias), compiled at f8f8b41 (the branch rebased as c1355a9: the same kernels), launched by main's binary with
# `--cuda-file`: validated against the float64 reference (bench and ragged sizes) and timed
# interleaved with main's kernel, then with peers. Run from the repository root with main's
# release binary at target/release/hopfuse.
N=target/release/hopfuse
D=docs/logs/device-2026-11-30-s18/scripts/next
L=$OUT/rF; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
AL=examples/auto/attention_alibi.hf
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v ragged_dist 40 $N run $AL --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling --cuda-file $D/alibi_ragged_distributed.cu
for r in 1 2; do
  v gen$r 60 $N run $AL $Z
  v dist$r 60 $N run $AL $Z --cuda-file $D/alibi_2k_distributed.cu
done
v dist_peers 150 $N run $AL $Z --cuda-file $D/alibi_2k_distributed.cu --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rF.tgz rF && rm -r rF
cat $S
