#!/bin/bash
# Device run F (twenty-second session): why the decode product at M = 16 is slower than at
# M = 64 with the same kernel (64 x 64 tiles in two K chunks; only the epilogue's row
# predicates differ): Nsight Compute on both.
mkdir -p target/release && gunzip -c target/devF/hopfuse.gz > target/release/hopfuse && chmod +x target/release/hopfuse
B=target/release/hopfuse; D=target/devF
L=$OUT/rF; mkdir -p $L; S=$OUT/summary.txt
for m in 16 64; do
  timeout 200 $B run $D/n64_c2.hf --size M=$m,N=4096,K=4096 --iters 20 --warmup 5 --no-ceiling --profile --json-file $L/m$m.json > $L/m$m.txt 2>&1
  echo "== M=$m rc=$?" >> $S; sed -n '/profile/,$p' $L/m$m.txt | head -40 >> $S
  timeout 200 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats $B run $D/n64_c2.hf --size M=$m,N=4096,K=4096 --iters 1 --warmup 0 --no-ceiling > $L/ncu_m$m.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit|Stall|Warp Cycles|Grid Size|Waves" $L/ncu_m$m.txt | head -30 >> $S
done
cd $OUT && tar czf rF.tgz rF && rm -r rF
cat $S
