#!/bin/bash
# Device run G (twenty-second session): decode at M = 16, 32, 64 (N = K = 4096, 64 x 64 tiles in
# two K chunks) with the activation tile multicast to 2 or 4 CTAs of a cluster along N, against
# no cluster: at M < 64 every CTA reads the same small tile of `a` at once (run F: one L2 slice
# 41% busy against 19-28% for the others at M = 16).
mkdir -p target/release && gunzip -c target/devG/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devG
L=$OUT/rG; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
for r in 1 2; do for m in 16 32 64; do for f in n64_c2 n64_c2_cl2 n64_c2_cl4; do
  v ${f}_m${m}_$r 60 $B run $D/$f.hf --size M=$m,N=4096,K=4096 $T
done; done; done
v ragged_cl2 60 $B run $D/n64_c2_cl2.hf --size M=13,N=1024,K=4160 --iters 1 --warmup 0 --no-ceiling
v ragged_cl4 60 $B run $D/n64_c2_cl4.hf --size M=13,N=1024,K=4160 --iters 1 --warmup 0 --no-ceiling
cd $OUT && tar czf rG.tgz rG && rm -r rG
cat $S
