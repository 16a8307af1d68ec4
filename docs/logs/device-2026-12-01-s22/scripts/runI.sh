#!/bin/bash
# Device run I (twenty-second session): decode at M = 16 and 32 (N = K = 4096) with more K
# chunks, so the CTAs read several tiles of `a` at once instead of one (run F's L2 hot spot):
# 64 x 64 tiles in 2, 4, 8 chunks and 64 x 128 tiles in 4.
mkdir -p target/release && gunzip -c target/devI/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devI
L=$OUT/rI; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
for r in 1 2 3; do for m in 16 32; do for f in n64_c2 n64_c4 n64_c8 n128_c4; do
  v ${f}_m${m}_$r 60 $B run $D/$f.hf --size M=$m,N=4096,K=4096 $T
done; done; done
cd $OUT && tar czf rI.tgz rI && rm -r rI
cat $S
