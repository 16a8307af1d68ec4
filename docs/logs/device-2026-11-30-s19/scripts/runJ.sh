#!/bin/bash
# Session 19: the third form of hf_visit_document_tiles (one round of loads, a key id tested
# against the queries' range, a shared atomicOr per warp and tile). Validation, sanitizers, its
# cost at 2k on the runner's random ids (every tile listed) against run I's doc_constant.cu
# (no list, constant trip counts), then packed documents with peers.
N=target/release/hopfuse
L=$OUT/rJ; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
DOC=examples/auto/attention_document.hf
DC=examples/auto/attention_document_causal.hf
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
v doc_ragged_L100 60 $N run $DOC $R --documents doc_q,doc_k:100
v dc_ragged_L100 60 $N run $DC $R --documents doc_q,doc_k:100
v doc_ragged_rand 60 $N run $DOC $R
v dc_ragged_L3000 60 $N run $DC $R --documents doc_q,doc_k:3000
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --documents doc_q,doc_k:40"
v doc_racecheck 200 compute-sanitizer --tool racecheck $N run $DOC $SZ
v doc_synccheck 200 compute-sanitizer --tool synccheck $N run $DOC $SZ
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v gen1 60 $N run $DOC $Z
v constant1 60 $N run $DOC $Z --cuda-file target/devA/doc_constant.cu
v gen2 60 $N run $DOC $Z
v doc_2k_L512_peers 150 $N run $DOC $Z --documents doc_q,doc_k:512 --peers
v dc_2k_L512_peers 150 $N run $DC $Z --documents doc_q,doc_k:512 --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rJ.tgz rJ && rm -r rJ
cat $S
