#!/bin/bash
# Session 18, run A: hand-edited CUDA (hopfuse run --cuda-file): the row statistics in independent
# chains (tree), part of the exponentials on the FMA pipe (poly), softcap constants folded.
# B = 128, S = T = 2048, D = 128.
N=target/release/hopfuse
D=target/devA
L=$OUT/rA; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
A=examples/auto/attention.hf
C=examples/auto/attention_softcap_hardware_tanh.hf
r=1
v att_gen$r 60 $N run $A $Z
for k in att_tree att_poly8 att_poly4 att_tree_poly4; do v $k$r 60 $N run $A $Z --cuda-file $D/$k.cu; done
v sch_gen$r 60 $N run $C $Z
for k in sch_fold sch_fold_poly4 sch_fold_poly2 sch_fold_tree_poly2; do v $k$r 60 $N run $C $Z --cuda-file $D/$k.cu; done
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rA.tgz rA && rm -r rA
cat $S
