#!/bin/bash
# Device run C (twelfth session): attention variants (no schedule) against FlexAttention and
# cuDNN, the D = 64 forms, the decode re-check, 300 random attention shapes.
B=target/release/hopfuse; A=target/devcheck/att
L=$OUT/rC2; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 2 --warmup 1 --no-ceiling"
T="--peers --iters 20 --warmup 3"
for f in a64_2x128 a64_2x64; do v ${f}_ragged 60 $B run $A/$f.hf --size B=3,S=1000,T=1037 $RS; done
echo "== time $(date +%T)" >> $S
v a64_1 120 $B run examples/attention/online_wgmma_batched.hf --size B=32,S=4096,T=4096 $T
for f in a64_2x128 a64_2x64; do v $f 120 $B run $A/$f.hf --size B=32,S=4096,T=4096 $T; done
v plain_8k 150 $B run examples/auto/attention.hf --size B=32,S=8192,T=8192 $T
echo "== many $(date +%T)" >> $S
v many_attn 200 $B bench --iters 3 --warmup 1 --job-timeout 60 --generic target/devcheck/many/attn_300.hf
echo "many PASS $(grep -c PASS $L/many_attn.txt) FAIL $(grep -c FAIL $L/many_attn.txt)" >> $S
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rC2 && rm -r rC2
cat $S
