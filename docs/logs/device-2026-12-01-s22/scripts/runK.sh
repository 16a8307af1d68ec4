#!/bin/bash
# Device run K (twenty-second session): the compiler's form of run J's edit (Q's copy in the
# init guard, the list after it) on every kernel with a list: the document masks and the
# masks listed by `mask_list` (prefix-LM, chunked causal). PASS at the ragged size, racecheck
# on the prefix-LM kernel, and prefix-LM / chunked timed before and after (run Q's binaries' CUDA).
mkdir -p target/release && gunzip -c target/devK/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
N=target/release/hopfuse; D=target/devK; E=examples/auto
L=$OUT/rK; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 250 ]; then echo "$n skipped: ${t}s timeout would pass 250s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling"
v doc_ragged 60 $N run $E/attention_document.hf $R --documents doc_q,doc_k:100
v doc_causal_ragged 60 $N run $E/attention_document_causal.hf $R --documents doc_q,doc_k:100
v prefix_lm_ragged 60 $N run $E/attention_prefix_lm.hf $R
v chunked_ragged 60 $N run $E/attention_chunked_causal.hf --size B=2,S=3000,T=3100 --iters 3 --warmup 1 --no-ceiling
v prefix_lm_racecheck 90 compute-sanitizer --tool racecheck $N run $E/attention_prefix_lm.hf --size B=2,S=300,T=600 --iters 1 --warmup 0 --no-ceiling
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling --index i32"
v prefix_lm_old 45 $N run $E/attention_prefix_lm.hf $Z --cuda-file $D/attention_prefix_lm_old.cu
v prefix_lm_new 45 $N run $E/attention_prefix_lm.hf $Z
v chunked_old 45 $N run $E/attention_chunked_causal.hf $Z --cuda-file $D/attention_chunked_causal_old.cu
v chunked_new 45 $N run $E/attention_chunked_causal.hf $Z
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rK.tgz rK && rm -r rK
cat $S
