#!/bin/bash
# Device run H (twenty-second session): the landed automatic decode schedules (M tiles first, 8
# stages for several M tiles, 4 for 64 x 128 tiles past one wave, 64 x 32 tiles in two chunks
# for full M tiles) against torch eager (cuBLAS) and torch.compile in one process, bf16 at
# M = 16..128 x N = 4096 / 14336 and FP8 per tensor; ragged validation of the new choices.
mkdir -p target/release && gunzip -c target/devH/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devH
L=$OUT/rH; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  grep -E "^    (eager|torch.compile|torch._scaled_mm) " $L/$n.txt | sed 's/  */ /g' >> $S
}
T="--iters 50 --warmup 10 --no-ceiling --peers"
for n in 4096 14336; do for m in 16 32 64 96 128; do
  v bf16_${m}x${n} 120 $B run $D/lin.hf --size M=$m,N=$n,K=4096 $T
done; done
v bf16_64x7168 120 $B run $D/lin.hf --size M=64,N=7168,K=4096 $T
for m in 64 128; do v fp8_${m}x4096 120 $B run $D/fp8_product.hf --size M=$m,N=4096,K=4096 $T; done
v ragged_n32 60 $B run $D/lin.hf --size M=128,N=2000,K=8320 --iters 1 --warmup 0 --no-ceiling
v ragged_fp8_n32 60 $B run $D/fp8_product.hf --size M=64,N=4000,K=4224 --iters 1 --warmup 0 --no-ceiling
v ragged_mt 60 $B run $D/mt.hf --size M=61,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf rH.tgz rH && rm -r rH
cat $S
