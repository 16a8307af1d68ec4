#!/bin/bash
# Device run A (twelfth session): decode product sweep (bf16 and block-scaled FP8), step 19 timing.
B=target/release/hopfuse; D=target/devcheck/dec
L=$OUT/rA; mkdir -p $L; S=$L/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
R="--size M=61,N=1000,K=1040 --iters 2 --warmup 1 --no-ceiling"
RF="--size M=61,N=1000,K=1040,KB=9,NB=8 --iters 2 --warmup 1 --no-ceiling"
echo "== validate $(date +%T)" >> $S
for f in b11_n64 b20_k2_n64 b20_k4_n64 b20_s8; do v ${f}_ragged 30 $B run $D/$f.hf $R; done
for f in f21_k4 f21_n64; do v ${f}_ragged 30 $B run $D/$f.hf $RF; done
echo "== time bf16 64x4096x4096 $(date +%T)" >> $S
T="--size M=64,N=4096,K=4096 --peers --iters 30 --warmup 5"
v b11 50 $B run examples/matmul/step11_small_m_decode.hf $T
v b20 50 $B run examples/matmul/step20_split_k_decode.hf $T
for f in auto_bf16 b11_n64 b20_s8 b20_k2_n64 b20_k4_n64; do v $f 50 $B run $D/$f.hf $T; done
echo "== time fp8 64x7168x4096 $(date +%T)" >> $S
TF="--size M=64,N=7168,K=4096,KB=32,NB=56 --peers --iters 30 --warmup 5"
v f21 50 $B run examples/matmul/step21_fp8_block_split_k.hf $TF
for f in f21_k4 f21_n64; do v $f 50 $B run $D/$f.hf $TF; done
echo "== profile $(date +%T)" >> $S
v b20_prof 90 $B run examples/matmul/step20_split_k_decode.hf --size M=64,N=4096,K=4096 --iters 5 --warmup 2 --profile
v b11_prof 90 $B run examples/matmul/step11_small_m_decode.hf --size M=64,N=4096,K=4096 --iters 5 --warmup 2 --profile
echo "== step19 $(date +%T)" >> $S
v s19 120 $B run examples/matmul/step19_fp8_out_amax.hf --size M=4096,N=4096,K=4096 --peers --iters 20 --warmup 3
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cat $S
