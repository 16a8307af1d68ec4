#!/bin/bash
# Device run H (thirteenth session): the merged main (exp2_ftz, separable descriptors, a
# division by a scalar as a reciprocal, s * (1.0 / cap) lowered): validation and times.
B=target/release/hopfuse; A=target/devcheck/att13
L=$OUT/rH; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
v softcap_ragged 60 $B run examples/auto/attention_softcap.hf --size B=3,S=1000,T=1037 $RS
v softcap_inline_ragged 60 $B run $A/softcap_inline_recip.hf --size B=3,S=1000,T=1037 $RS
v softcap_named_ragged 60 $B run $A/softcap_named_recip.hf --size B=3,S=1000,T=1037 $RS
v softcap64_ragged 60 $B run examples/attention/softcap.hf --size S=1000,T=1000,D=64 $RS
v dropout_ragged 60 $B run examples/fusions/dropout_residual.hf --size M=1000,N=4099 $RS
v softcap_mem 120 compute-sanitizer --tool memcheck $B run examples/auto/attention_softcap.hf --size B=2,S=130,T=300 $RS
echo "== time $(date +%T)" >> $S
T="--iters 20 --warmup 3 --peers"
v softcap_2k 120 $B run examples/auto/attention_softcap.hf --size B=128,S=2048,T=2048 $T
v d64_4k 120 $B run examples/attention/online_wgmma_batched.hf --size B=32,S=4096,T=4096 $T
v ce_16k 120 $B run examples/fusions/cross_entropy_labels.hf --size M=16384,V=128256 --iters 30 --warmup 3 --peers
v dropout 90 $B run examples/fusions/dropout_residual.hf --size M=16384,N=16384 --iters 30 --warmup 3 --peers
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rH && rm -r rH
cat $S
