#!/bin/bash
# Device run B (twenty-second session): the decode schedule with its M tiles on blockIdx.x
# (landed in auto/product.rs) against the N tiles first, at 128 x 4096 x 4096 and
# 128 x 14336 x 4096 bf16 and FP8 per tensor at 128 x 4096 x 4096; stage counts under the new
# raster; peers; ragged validation (one chunk and split-K).
mkdir -p target/release && gunzip -c target/devB/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devB
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
S1=M=128,N=4096,K=4096; S2=M=128,N=14336,K=4096
for r in 1 2 3; do
  v auto_128x4096_$r 60 $B run $D/lin.hf --size $S1 $T
  v old_128x4096_$r 60 $B run $D/old_128x4096.hf --size $S1 $T
  v auto_128x14336_$r 60 $B run $D/lin.hf --size $S2 $T
  v old_128x14336_$r 60 $B run $D/old_128x14336.hf --size $S2 $T
  v fp8_auto_128_$r 60 $B run $D/fp8_product.hf --size $S1 $T
  v fp8_old_128_$r 60 $B run $D/fp8_old_128.hf --size $S1 $T
done
for r in 1 2; do for s in 8 10 13; do v mf_s${s}_$r 60 $B run $D/mf_s$s.hf --size $S1 $T; done; done
v peers_128x4096 120 $B run $D/lin.hf --size $S1 $T --peers
v peers_128x14336 120 $B run $D/lin.hf --size $S2 $T --peers
v peers_fp8_128 120 $B run $D/fp8_product.hf --size $S1 $T --peers
v ragged_one_chunk 60 $B run $D/lin.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
v ragged_split_k 60 $B run $D/lin.hf --size M=100,N=1000,K=8192 --iters 1 --warmup 0 --no-ceiling
v ragged_fp8 60 $B run $D/fp8_product.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
v ragged_fp8_split 60 $B run $D/fp8_product.hf --size M=100,N=1000,K=8192 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf rB.tgz rB && rm -r rB
cat $S
