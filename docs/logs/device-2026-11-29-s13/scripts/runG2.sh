#!/bin/bash
# Device run G2 (thirteenth session): attention and cross-entropy times after exp2_ftz and the
# separable wgmma descriptors, peers in the same process.
B=target/release/hopfuse; A=target/devcheck/att13
L=$OUT/rG2; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 20 --warmup 3"
echo "== time $(date +%T)" >> $S
v plain_2k 120 $B run examples/auto/attention.hf --size B=128,S=2048,T=2048 $T --peers
v causal_2k 120 $B run examples/auto/attention_causal.hf --size B=128,S=2048,T=2048 $T --peers
v softcap_2k 120 $B run examples/auto/attention_softcap.hf --size B=128,S=2048,T=2048 $T --peers
v alibi_2k 120 $B run examples/auto/attention_alibi.hf --size B=128,S=2048,T=2048 $T --peers
v window_2k 60 $B run examples/auto/attention_sliding_window.hf --size B=128,S=2048,T=2048 $T
v document_2k 60 $B run examples/auto/attention_document.hf --size B=128,S=2048,T=2048 $T
v d64_4k 60 $B run examples/attention/online_wgmma_batched.hf --size B=32,S=4096,T=4096 $T
v ce 90 $B run examples/fusions/cross_entropy_labels.hf --size M=4096,V=128256 --iters 30 --warmup 3 --peers
v step15_4k 60 $B run examples/matmul/step15_persistent_raster.hf --size M=4096,N=4096,K=4096 --iters 30 --warmup 3
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rG2 && rm -r rG2
cat $S
