#!/bin/bash
# Device run A (twenty-second session): bf16 decode products (W [N, K]) at 64 and 128 x 4096 x 4096:
# the automatic schedule against N tiles of 32 (cuBLAS's nvjet 64x32 tile), other stage counts,
# and M tiles along blockIdx.x (the two M tiles of a weight tile adjacent); two rounds each,
# then the automatic schedule and the best variants with peers.
mkdir -p target/release && gunzip -c target/devA/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse
L=$OUT/rA; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
for r in 1 2; do
  for f in m64_n64_c2_s8 m64_n32_c2_s8 m64_n32_c2_s12 m64_n32_s8 m64_n32_s12 m64_n32_s16; do
    v ${f}_$r 60 $B run target/devA/$f.hf --size M=64,N=4096,K=4096 $T
  done
  for f in m128_n64_s12 m128_n64_s12_mf m128_n32_s8 m128_n32_s12 m128_n32_s16 m128_n32_s12_mf; do
    v ${f}_$r 60 $B run target/devA/$f.hf --size M=128,N=4096,K=4096 $T
  done
done
v m64_peers 120 $B run target/devA/m64_n64_c2_s8.hf --size M=64,N=4096,K=4096 $T --peers
v m128_peers 120 $B run target/devA/m128_n64_s12.hf --size M=128,N=4096,K=4096 $T --peers
v m64_n32_s12_ragged 60 $B run target/devA/m64_n32_s12.hf --size M=61,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
v m128_n32_s12_ragged 60 $B run target/devA/m128_n32_s12.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf rA.tgz rA && rm -r rA
cat $S
