#!/bin/bash
# Device run B (twelfth session): the automatic decode tiling, validated and timed; profiles
# of the math-heavy fusions.
B=target/release/hopfuse; D=target/devcheck/dec
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
echo "== validate $(date +%T)" >> $S
v ab_r1 30 $B run $D/auto_bf16.hf --size M=61,N=1000,K=1040 --iters 2 --warmup 1 --no-ceiling
v ab_r2 30 $B run $D/auto_bf16.hf --size M=61,N=4000,K=4100 --iters 2 --warmup 1 --no-ceiling
v af_r1 30 $B run $D/auto_fp8.hf --size M=61,N=4000,K=4224 --iters 2 --warmup 1 --no-ceiling
v af_r2 30 $B run $D/auto_fp8.hf --size M=100,N=1000,K=1040 --iters 2 --warmup 1 --no-ceiling
v ar_128 40 $B run $D/auto_rowwise.hf --size M=128,N=4096,K=4096 --iters 2 --warmup 1 --no-ceiling
v ab_mem 60 compute-sanitizer --tool memcheck $B run $D/auto_bf16.hf --size M=61,N=4000,K=4100 --iters 1 --warmup 0 --no-ceiling
echo "== time $(date +%T)" >> $S
T="--peers --iters 30 --warmup 5"
v ab_64_4096 50 $B run $D/auto_bf16.hf --size M=64,N=4096,K=4096 $T
v ab_128_4096 50 $B run $D/auto_bf16.hf --size M=128,N=4096,K=4096 $T
v b11_128_4096 50 $B run examples/matmul/step11_small_m_decode.hf --size M=128,N=4096,K=4096 $T
v ab_64_7168 50 $B run $D/auto_bf16.hf --size M=64,N=7168,K=4096 $T
v b20_64_7168_k2 50 $B run $D/b20_k2_n128.hf --size M=64,N=7168,K=4096 $T
v ab_64_14336 50 $B run $D/auto_bf16.hf --size M=64,N=14336,K=4096 $T
v af_64_4096 50 $B run $D/auto_fp8.hf --size M=64,N=4096,K=4096 $T
v af_64_7168 50 $B run $D/auto_fp8.hf --size M=64,N=7168,K=4096 $T
v ab_k2_n64_s12 50 $B run $D/b20_k2_n64_s12.hf --size M=64,N=4096,K=4096 $T
echo "== profiles $(date +%T)" >> $S
v gelu_prof 90 $B run examples/fusions/gelu_exact.hf --size M=16384,N=16384 --iters 5 --warmup 2 --profile
v smax_prof 90 $B run examples/fusions/softmax_scale.hf --size M=8192,N=16384 --iters 5 --warmup 2 --profile
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rB && rm -r rB
cat $S
