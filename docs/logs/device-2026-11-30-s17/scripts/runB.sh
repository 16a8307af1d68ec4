#!/bin/bash
# Session 17, run B: tanh(x, approximate=hardware), the document ids cached beside K (the
# stage released after the mask reads it), B = 128, S = T = 2048, D = 128; ragged and sanitizers.
N=target/release/hopfuse
D=target/devA
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $L/$n.txt | tr '\n' ' ') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
SM="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling"
SCA=examples/auto/attention_softcap_hardware_tanh.hf
if [ "$1" = checks ]; then
v sca_ragged 40 $N run $SCA $R
v doc_smem_ragged 40 $N run $D/document_smem.hf --size B=3,S=1000,T=1040 --iters 3 --warmup 1 --no-ceiling
v doc_smem_race 90 compute-sanitizer --tool racecheck $N run $D/document_smem.hf $SM
v doc_smem_sync 90 compute-sanitizer --tool synccheck $N run $D/document_smem.hf $SM
v sca_peers 120 $N run $SCA $Z --peers
else
for r in 1 2; do
  v sc_gen$r 60 $N run examples/auto/attention_softcap.hf $Z
  v sca$r 60 $N run $SCA $Z
  v sc_hand_tanh$r 60 $N run examples/auto/attention_softcap.hf $Z --cuda-file $D/softcap_tanhapprox.cu
  v doc_gen$r 60 $N run examples/auto/attention_document.hf $Z
  v doc_smem$r 60 $N run $D/document_smem.hf $Z
done
fi
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rB$1.tgz rB && rm -r rB
cat $S
