#!/bin/bash
# Device run G1 (thirteenth session): every example whose CUDA changed with exp2_ftz (online
# softmax / log-sum-exp exponentials) and the separable wgmma descriptors, validated at a ragged
# size (or its last bench size); racecheck on the attention kernels.
B=target/release/hopfuse; A=target/devcheck/att13
L=$OUT/rG1; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
while read f sz; do
  case $f in examples/matmul/*) case $sz in *1000*|*61*) ;; *) sz="M=1000,N=1032,K=1040";; esac;; esac
  case $f in examples/auto/fp8_product.hf) sz="M=61,N=4000,K=4224";; esac
  v $(basename $(dirname $f))_$(basename $f .hf) 60 $B run $f --size $sz $RS
done < $A/changed_sizes.txt
echo "== sanitize $(date +%T)" >> $S
RC="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling"
v auto_attention_race 150 compute-sanitizer --tool racecheck $B run examples/auto/attention.hf $RC
v auto_causal_race 150 compute-sanitizer --tool racecheck $B run examples/auto/attention_causal.hf $RC
v d64_mem 150 compute-sanitizer --tool memcheck $B run examples/attention/online_wgmma_batched.hf $RC
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rG1 && rm -r rG1
cat $S
