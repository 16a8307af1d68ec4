#!/bin/bash
# Session 20: the document mask's key-tile loop with `__builtin_assume(hf_visited_n >= 1)`
# (codegen: the query ids read once before the loop, not in every iteration, as with a
# constant count). Validation at ragged sizes, then at B = 128, S = T = 2048 on the runner's
# random ids (every tile listed) against hand edits of the same kernel (doc_listcost.py):
# no list with a constant count (doc_constant.cu), and a list read in one round trip
# (doc_l2list.cu: what a list made by a kernel before attention would cost the attention
# kernel). Then packed documents with peers.
N=target/release/hopfuse
L=$OUT/rK; mkdir -p $L; S=$OUT/summary.txt
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
$N compile $DOC --cuda --size B=128,S=2048,T=2048 --index i32 > $L/gen.cu 2>/dev/null
python3 docs/logs/device-2026-11-30-s20/scripts/doc_listcost.py $L/gen.cu $D
grep -c "__builtin_assume(hf_visited_n >= 1)" $D/doc_gen.cu $D/doc_constant.cu $D/doc_l2list.cu >> $S
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
v doc_ragged_L100 60 $N run $DOC $R --documents doc_q,doc_k:100
v dc_ragged_L100 60 $N run $DC $R --documents doc_q,doc_k:100
v doc_ragged_rand 60 $N run $DOC $R
v dc_ragged_L3000 60 $N run $DC $R --documents doc_q,doc_k:3000
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
v gen1 60 $N run $DOC $Z
v constant1 60 $N run $DOC $Z --cuda-file $D/doc_constant.cu
v l2list1 60 $N run $DOC $Z --cuda-file $D/doc_l2list.cu
v gen2 60 $N run $DOC $Z
v doc_2k_L512_peers 150 $N run $DOC $Z --documents doc_q,doc_k:512 --peers
v dc_2k_L512_peers 150 $N run $DC $Z --documents doc_q,doc_k:512 --peers
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rK.tgz rK && rm -r rK
cat $S
