#!/bin/bash
# Session 20: the document list's tiles wholly kept (one document, inside the band) listed
# first, and run without the mask (pass mask_tiles: an If on the first loop, two loops for the
# overlapped one). Validation at ragged sizes (packed documents of mean length 20, 100 and
# 3000, random ids; i64 ids: target/devA/dc_i64.hf, attention_document_causal.hf with i64 ids),
# racecheck, synccheck and memcheck, then B = 128, S = T = 2048: random ids (every tile listed,
# none kept), packed documents against the kernel before (doc_prev_L512.cu: a7bf60d's, run L,
# every listed tile masked), then with peers, and the causal document mask at 8k.
N=target/release/hopfuse
L=$OUT/rM; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 570 ]; then echo "$n skipped: ${t}s timeout would pass 570s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
DOC=examples/auto/attention_document.hf
DC=examples/auto/attention_document_causal.hf
D=target/devA
# doc_prev_L512.cu: the kernel of a7bf60d (run L), every listed tile masked.
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
for l in 20 100 3000; do
  v doc_ragged_L$l 60 $N run $DOC $R --documents doc_q,doc_k:$l
  v dc_ragged_L$l 60 $N run $DC $R --documents doc_q,doc_k:$l
done
v doc_ragged_rand 60 $N run $DOC $R
v dc_ragged_rand 60 $N run $DC $R
v dc_i64_ragged_L100 60 $N run $D/dc_i64.hf $R --documents doc_q,doc_k:100
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --documents doc_q,doc_k:40"
v doc_racecheck 120 compute-sanitizer --tool racecheck $N run $DOC $SZ
v dc_racecheck 120 compute-sanitizer --tool racecheck $N run $DC $SZ
v doc_synccheck 120 compute-sanitizer --tool synccheck $N run $DOC $SZ
v doc_memcheck 120 compute-sanitizer --tool memcheck $N run $DOC $SZ
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v gen1 60 $N run $DOC $Z
v gen_L512 60 $N run $DOC $Z --documents doc_q,doc_k:512
v prev_L512 60 $N run $DOC $Z --documents doc_q,doc_k:512 --cuda-file $D/doc_prev_L512.cu
v doc_2k_L512_peers 150 $N run $DOC $Z --documents doc_q,doc_k:512 --peers
v dc_2k_L512_peers 150 $N run $DC $Z --documents doc_q,doc_k:512 --peers
v dc_8k_L2048_peers 150 $N run $DC --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --documents doc_q,doc_k:2048 --peers
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rM.tgz rM && rm -r rM
cat $S
