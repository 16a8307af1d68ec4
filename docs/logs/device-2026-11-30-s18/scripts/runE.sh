#!/bin/bash
# Session 18, run E: ALiBi's bias distributed over the index (u * (base + c) as fma(u, c, u * base),
# u * base once per tile), hand edit against the generated kernel, interleaved.
N=target/release/hopfuse
D=target/devA
L=$OUT/rE; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
AL=examples/auto/attention_alibi.hf
for r in 1 2; do
v alibi_gen$r 60 $N run $AL $Z
v alibi_dist$r 60 $N run $AL $Z --cuda-file $D/alibi_dist.cu
done
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rE.tgz rE && rm -r rE
cat $S
