#!/bin/bash
# For the next session (branch kept-first): the document list's wholly kept tiles first, run
# without the mask in the overlapped loop only (pass mask_tiles: two loops); the first
# iteration keeps the mask so that its reads of the queries' ids stay before the loops
# (run N's form branched there and lost 48 us on random ids). Needs two release binaries in
# target/devA: kept.gz (this branch) and main.gz (main), carry=["target/devA"].
# Validation at ragged sizes and the sanitizers, then each case timed with both binaries,
# interleaved, then peers for the branch.
mkdir -p target/release
gunzip -c target/devA/kept.gz > target/release/kept && chmod +x target/release/kept
gunzip -c target/devA/main.gz > target/release/main && chmod +x target/release/main
K=target/release/kept; M=target/release/main
L=$OUT/rO; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 570 ]; then echo "$n skipped: ${t}s timeout would pass 570s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
DOC=examples/auto/attention_document.hf
DC=examples/auto/attention_document_causal.hf
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
for l in 20 100 3000; do
  v doc_ragged_L$l 60 $K run $DOC $R --documents doc_q,doc_k:$l
  v dc_ragged_L$l 60 $K run $DC $R --documents doc_q,doc_k:$l
done
v doc_ragged_rand 60 $K run $DOC $R
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --documents doc_q,doc_k:40"
v doc_racecheck 120 compute-sanitizer --tool racecheck $K run $DOC $SZ
v dc_synccheck 120 compute-sanitizer --tool synccheck $K run $DC $SZ
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v kept_rand 60 $K run $DOC $Z
for b in kept main kept; do
  v ${b}_doc_L512 60 target/release/$b run $DOC $Z --documents doc_q,doc_k:512
  v ${b}_dc_L512 60 target/release/$b run $DC $Z --documents doc_q,doc_k:512
done
v main_rand 60 $M run $DOC $Z
v kept_dc_8k_L2048 60 $K run $DC --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --documents doc_q,doc_k:2048
v main_dc_8k_L2048 60 $M run $DC --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --documents doc_q,doc_k:2048
v kept_doc_2k_L512_peers 150 $K run $DOC $Z --documents doc_q,doc_k:512 --peers
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rO.tgz rO && rm -r rO
cat $S
