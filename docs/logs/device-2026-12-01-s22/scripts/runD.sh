#!/bin/bash
# Device run D (twenty-second session): 128 and 96 x 14336 x 4096 bf16 with 4 or 6 stages
# (two CTAs an SM with 4: 224 CTAs in one wave) against the automatic 8; FP8 and bf16 decode at
# 64 x 4096 x 4096 with 64 x 32 tiles in two K chunks against 64 x 64; ragged validation.
mkdir -p target/release && gunzip -c target/devD/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devD
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
for r in 1 2 3; do
  for m in 128 96; do
    v auto_${m}x14336_$r 60 $B run $D/lin.hf --size M=$m,N=14336,K=4096 $T
    v s4_${m}x14336_$r 60 $B run $D/n128_s4.hf --size M=$m,N=14336,K=4096 $T
    v s6_${m}x14336_$r 60 $B run $D/n128_s6.hf --size M=$m,N=14336,K=4096 $T
  done
  v fp8_n64_c2_$r 60 $B run $D/fp8_n64_c2.hf --size M=64,N=4096,K=4096 $T
  v fp8_n32_c2_$r 60 $B run $D/fp8_n32_c2.hf --size M=64,N=4096,K=4096 $T
done
v peers_s4_128x14336 120 $B run $D/n128_s4.hf --size M=128,N=14336,K=4096 $T --peers
v peers_fp8_n32_c2 120 $B run $D/fp8_n32_c2.hf --size M=64,N=4096,K=4096 $T --peers
v peers_n32_c2_16 120 $B run $D/n32_c2.hf --size M=16,N=4096,K=4096 $T --peers
v ragged_s4 60 $B run $D/n128_s4.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
v ragged_fp8_n32 60 $B run $D/fp8_n32_c2.hf --size M=61,N=1000,K=4224 --iters 1 --warmup 0 --no-ceiling
v ragged_n32 60 $B run $D/n32_c2.hf --size M=61,N=1000,K=4160 --iters 1 --warmup 0 --no-ceiling
v race_s4 120 compute-sanitizer --tool racecheck $B run $D/n128_s4.hf --size M=100,N=256,K=1152 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf rD.tgz rD && rm -r rD
cat $S
