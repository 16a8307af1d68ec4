#!/bin/bash
# Device run E (twenty-second session): the landed decode choices with peers (4 stages for 64 x
# 128 tiles past one wave; `matmul(a, transpose(b, 0, 1))` taking the automatic schedule);
# 64 x 32 against 64 x 64 tiles in two K chunks at M = 16, 32, 48, 64 (bf16) and 16, 64 (FP8).
mkdir -p target/release && gunzip -c target/devE/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devE
L=$OUT/rE; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
v peers_128x14336 120 $B run $D/lin.hf --size M=128,N=14336,K=4096 $T --peers
v peers_96x14336 120 $B run $D/lin.hf --size M=96,N=14336,K=4096 $T --peers
v peers_mt_128x4096 120 $B run $D/mt.hf --size M=128,N=4096,K=4096 $T --peers
v mt_ragged 60 $B run $D/mt.hf --size M=100,N=1000,K=1040 --iters 1 --warmup 0 --no-ceiling
for r in 1 2; do
  for m in 16 32 48 64; do
    v n64_c2_m${m}_$r 60 $B run $D/n64_c2.hf --size M=$m,N=4096,K=4096 $T
    v n32_c2_m${m}_$r 60 $B run $D/n32_c2.hf --size M=$m,N=4096,K=4096 $T
  done
  for m in 16 64; do
    v fp8_n64_c2_m${m}_$r 60 $B run $D/fp8_n64_c2.hf --size M=$m,N=4096,K=4096 $T
    v fp8_n32_c2_m${m}_$r 60 $B run $D/fp8_n32_c2.hf --size M=$m,N=4096,K=4096 $T
  done
done
cd $OUT && tar czf rE.tgz rE && rm -r rE
cat $S
