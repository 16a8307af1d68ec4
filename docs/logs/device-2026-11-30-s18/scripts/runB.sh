#!/bin/bash
# Session 18, run B: conditional rescaling of O (FlashAttention-4's threshold of 8 in log2 units),
# with the softcap's folded constants and a quarter of its exponentials on the FMA pipe.
N=target/release/hopfuse
D=target/devA
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
A=examples/auto/attention.hf
C=examples/auto/attention_softcap_hardware_tanh.hf
v att_gen 60 $N run $A $Z
v att_lazy 60 $N run $A $Z --cuda-file $D/att_lazy.cu
v att_lazy_scale8 60 $N run $A $Z --cuda-file $D/att_lazy.cu --scalar scale=8
v att_gen_scale8 60 $N run $A $Z --scalar scale=8
v sch_fold_poly4 60 $N run $C $Z --cuda-file $D/sch_fold_poly4.cu
v sch_fold_lazy 60 $N run $C $Z --cuda-file $D/sch_fold_lazy.cu
v sch_fold_poly4_lazy 60 $N run $C $Z --cuda-file $D/sch_fold_poly4_lazy.cu
v sch_fold_poly4_lazy_s8 60 $N run $C $Z --cuda-file $D/sch_fold_poly4_lazy.cu --scalar scale=8 --scalar cap=30
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rB.tgz rB && rm -r rB
cat $S
