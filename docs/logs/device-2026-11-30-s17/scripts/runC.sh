#!/bin/bash
# Session 17, run C: the scale folded into the exponent's FMA (hand edit, scale >= 0) against
# the generated plain kernel; the automatic document-mask schedule (ids cached beside K) with
# its peers, ragged at T = 1040 (cached) and T = 1037 (declined: rows of 4148 bytes).
N=target/release/hopfuse
D=target/devA
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/$n.txt | tr '\n' ' ') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
DOC=examples/auto/attention_document.hf
v doc_ragged_1040 40 $N run $DOC --size B=3,S=1000,T=1040 --iters 3 --warmup 1 --no-ceiling
v doc_ragged_1037 40 $N run $DOC --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling
v doc_peers 120 $N run $DOC $Z --peers
for r in 1 2; do
  v att_gen$r 60 $N run examples/auto/attention.hf $Z
  v att_noscale$r 60 $N run examples/auto/attention.hf $Z --cuda-file $D/attention_noscale.cu
done
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rC.tgz rC && rm -r rC
cat $S
