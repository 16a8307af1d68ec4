#!/bin/bash
# Session 18, run C: the softcap's scales merged (pass merged_scales), its max before the cap
# (scaled_max on `cap * tanh`) and a quarter of its exponentials on the FMA pipe (fma_exp2):
# timings with peers, ragged and negative-cap validation; ALiBi against FlexAttention.
N=target/release/hopfuse
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
SCA=examples/auto/attention_softcap_hardware_tanh.hf
SC=examples/auto/attention_softcap.hf
v sca_ragged 40 $N run $SCA $R
v sc_ragged 40 $N run $SC $R
v sca_negcap 40 $N run $SCA $R --scalar cap=-50
v sca_peers 150 $N run $SCA $Z --peers
v sc_peers 150 $N run $SC $Z --peers
v sca_b 60 $N run $SCA $Z --cuda-file target/devA/sch_fold_poly4.cu

echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rC.tgz rC && rm -r rC
cat $S
