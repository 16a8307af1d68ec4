#!/bin/bash
# Device run C (twenty-second session): the automatic decode schedule with 8 stages for several
# M tiles (landed) with peers; 128 x 14336 x 4096 with 64 x 64 tiles (448 CTAs) against the
# automatic 64 x 128; 64 x 4096 x 4096 with N tiles of 32 against 64; other M with peers.
mkdir -p target/release && gunzip -c target/devC/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devC
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 50 --warmup 10 --no-ceiling"
S2=M=128,N=14336,K=4096
for r in 1 2 3; do
  v auto_128x14336_$r 60 $B run $D/lin.hf --size $S2 $T
  v n64_s8_128x14336_$r 60 $B run $D/n64_s8.hf --size $S2 $T
  v n64_s12_128x14336_$r 60 $B run $D/n64_s12.hf --size $S2 $T
  v m64_n64_c2_$r 60 $B run $D/m64_n64_c2_s8.hf --size M=64,N=4096,K=4096 $T
  v m64_n32_c2_$r 60 $B run $D/m64_n32_c2_s8.hf --size M=64,N=4096,K=4096 $T
done
v peers_128x4096 120 $B run $D/lin.hf --size M=128,N=4096,K=4096 $T --peers
v peers_128x4096_b 120 $B run $D/lin.hf --size M=128,N=4096,K=4096 $T --peers
v peers_m64_n32_c2 120 $B run $D/m64_n32_c2_s8.hf --size M=64,N=4096,K=4096 $T --peers
for m in 16 32 96; do v peers_${m}x4096 120 $B run $D/lin.hf --size M=$m,N=4096,K=4096 $T --peers; done
v peers_96x14336 120 $B run $D/lin.hf --size M=96,N=14336,K=4096 $T --peers
cd $OUT && tar czf rC.tgz rC && rm -r rC
cat $S
