#!/bin/bash
# Device run J (twenty-second session): document masks with the mbarrier init, the tensor-map
# prefetch and Q's TMA issue moved above the list of visited key tiles (hand edit,
# scripts/hoist.py), so Q's load overlaps the list; against the generated kernel, interleaved.
# Validation of the edit at the ragged size, racecheck and synccheck.
mkdir -p target/release && gunzip -c target/devJ/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
N=target/release/hopfuse; D=target/devJ
L=$OUT/rJ; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 420 ]; then echo "$n skipped: ${t}s timeout would pass 420s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
R="--size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling --index i32"
for p in attention_document attention_document_causal; do
  for l in 20 100; do v ${p}_h_ragged_L$l 60 $N run $D/$p.hf $R --documents doc_q,doc_k:$l --cuda-file $D/${p}_rag_h.cu; done
done
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling --index i32 --documents doc_q,doc_k:40"
for p in attention_document attention_document_causal; do
  v ${p}_h_racecheck 120 compute-sanitizer --tool racecheck $N run $D/$p.hf $SZ --cuda-file $D/${p}_san_h.cu
  v ${p}_h_synccheck 120 compute-sanitizer --tool synccheck $N run $D/$p.hf $SZ --cuda-file $D/${p}_san_h.cu
done
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling --index i32 --documents doc_q,doc_k:512"
for r in 1 2; do for p in attention_document attention_document_causal; do
  v ${p}_gen_$r 60 $N run $D/$p.hf $Z --cuda-file $D/${p}_big.cu
  v ${p}_hoist_$r 60 $N run $D/$p.hf $Z --cuda-file $D/${p}_big_h.cu
done; done
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rJ.tgz rJ && rm -r rJ
cat $S
