#!/bin/bash
# Device run C (twelfth session): attention variants (no schedule) against FlexAttention and
# cuDNN, the D = 64 forms, the decode re-check, 300 random attention shapes.
B=target/release/hopfuse; A=target/devcheck/att
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 2 --warmup 1 --no-ceiling"
echo "== validate $(date +%T)" >> $S
v softcap_mul_ragged 60 $B run $A/softcap_mul.hf --size B=3,S=1000,T=1037 $RS
for x in softcap alibi sliding_window document; do v ${x}_ragged 60 $B run examples/auto/attention_$x.hf --size B=3,S=1000,T=1037 $RS; done
for f in a64_1x128 a64_1_cb2 a64_1x128_cb2; do v ${f}_ragged 60 $B run $A/$f.hf --size B=3,S=1000,T=1037 $RS; done
v ab_r2 30 $B run target/devcheck/dec/auto_bf16.hf --size M=61,N=4000,K=4104 $RS
for c in 2 4; do v cl${c}_r1 30 $B run target/devcheck/dec/b20_k2_n64_cl$c.hf --size M=61,N=1000,K=4104 $RS; v cl${c}_r2 30 $B run target/devcheck/dec/b20_k2_n64_cl$c.hf --size M=61,N=4000,K=4104 $RS; done
echo "== sanitize $(date +%T)" >> $S
for x in alibi; do v ${x}_race 120 compute-sanitizer --tool racecheck $B run examples/auto/attention_$x.hf --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling; done
v a64_cb2_race 120 compute-sanitizer --tool racecheck $B run $A/a64_1_cb2.hf --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling
echo "== time $(date +%T)" >> $S
T="--peers --iters 20 --warmup 3"
v ab_64 30 $B run target/devcheck/dec/auto_bf16.hf --size M=64,N=4096,K=4096 --iters 30 --warmup 5
for c in 2 4; do v cl$c 30 $B run target/devcheck/dec/b20_k2_n64_cl$c.hf --size M=64,N=4096,K=4096 --iters 30 --warmup 5; done
v a64_1 60 $B run examples/attention/online_wgmma_batched.hf --size B=32,S=4096,T=4096 --iters 20 --warmup 3
for f in a64_1x128 a64_1_cb2 a64_1x128_cb2; do v $f 60 $B run $A/$f.hf --size B=32,S=4096,T=4096 --iters 20 --warmup 3; done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rC1a && rm -r rC1a
cat $S
