#!/bin/bash
# Session 19: pass document_tiles on the GPU. Validation against the float64 reference at a
# ragged size (packed documents of several mean lengths, and the runner's random ids, which
# meet in every tile), the sanitizers at a small size, then timing at 2k with peers.
# Run from the repository root with the release binary at target/release/hopfuse.
N=target/release/hopfuse
L=$OUT/rG; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
DOC=examples/auto/attention_document.hf
DC=examples/auto/attention_document_causal.hf
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
for len in 20 200 5000; do
  v doc_ragged_L$len 60 $N run $DOC $R --documents doc_q,doc_k:$len
  v dc_ragged_L$len 60 $N run $DC $R --documents doc_q,doc_k:$len
done
v doc_ragged_rand 60 $N run $DOC $R
v dc_ragged_rand 60 $N run $DC $R
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --documents doc_q,doc_k:40"
for tool in racecheck synccheck memcheck; do
  v doc_$tool 200 compute-sanitizer --tool $tool $N run $DOC $SZ
done
v dc_racecheck 200 compute-sanitizer --tool racecheck $N run $DC $SZ
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v doc_2k_rand 60 $N run $DOC $Z
v doc_2k_L512_peers 150 $N run $DOC $Z --documents doc_q,doc_k:512 --peers
v dc_2k_L512_peers 150 $N run $DC $Z --documents doc_q,doc_k:512 --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rG.tgz rG && rm -r rG
cat $S
