#!/bin/bash
# Session 19: the document mask's list made in one round of loads (the second form of
# hf_visit_document_tiles). Its cost at 2k with the runner's random ids (every tile listed),
# against hand edits without the list (doc_prologue.py: doc_identity.cu, doc_constant.cu),
# interleaved; then packed documents with peers at 2k and 8k.
N=target/release/hopfuse
L=$OUT/rI; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
DOC=examples/auto/attention_document.hf
DC=examples/auto/attention_document_causal.hf
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v doc_ragged_L100 60 $N run $DOC --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling --documents doc_q,doc_k:100
v dc_ragged_L100 60 $N run $DC --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling --documents doc_q,doc_k:100
v doc_racecheck 200 compute-sanitizer --tool racecheck $N run $DOC --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --documents doc_q,doc_k:40
for r in 1 2; do
  v gen$r 60 $N run $DOC $Z
  v identity$r 60 $N run $DOC $Z --cuda-file target/devA/doc_identity.cu
  v constant$r 60 $N run $DOC $Z --cuda-file target/devA/doc_constant.cu
done
v doc_2k_L512_peers 150 $N run $DOC $Z --documents doc_q,doc_k:512 --peers
v dc_2k_L512_peers 150 $N run $DC $Z --documents doc_q,doc_k:512 --peers
v dc_8k_L2048_peers 240 $N run $DC --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --documents doc_q,doc_k:2048 --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rI.tgz rI && rm -r rI
cat $S
