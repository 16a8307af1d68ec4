#!/bin/bash
# Session 17, run A: hand-edited CUDA (hopfuse run --cuda-file) against the generated kernels,
# B = 128, S = T = 2048, D = 128. Usage: runA.sh ROUND [clock]
N=target/release/hopfuse
D=target/devA
L=$OUT/rA; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 -i 'clock' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
r=$1
v att_gen$r 60 $N run examples/auto/attention.hf $Z
v att_noexp$r 60 $N run examples/auto/attention.hf $Z --cuda-file $D/probe_noexp.cu
v att_nosm$r 60 $N run examples/auto/attention.hf $Z --cuda-file $D/probe_nosoftmax.cu
v sc_gen$r 60 $N run examples/auto/attention_softcap.hf $Z
v sc_fold$r 60 $N run examples/auto/attention_softcap.hf $Z --cuda-file $D/softcap_fold.cu
v sc_tanh$r 60 $N run examples/auto/attention_softcap.hf $Z --cuda-file $D/softcap_tanhapprox.cu
v doc_gen$r 60 $N run examples/auto/attention_document.hf $Z
v doc_late$r 60 $N run examples/auto/attention_document.hf $Z --cuda-file $D/document_late.cu
v doc_late2$r 60 $N run examples/auto/attention_document.hf $Z --cuda-file $D/document_late2.cu
if [ "$2" = clock ]; then
  v att_clock 60 $N run examples/auto/attention.hf $Z --clock
  v sc_clock 60 $N run examples/auto/attention_softcap.hf $Z --clock
fi
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rA$r.tgz rA && rm -r rA
cat $S
