#!/bin/bash
# Device run E (fifteenth session): what cuBLAS runs for the decode products hopfuse trails
# (bf16 64 x 4096 x 4096 and 128 x 4096 x 4096, W [N, K]): kernel, grid, block, shared memory,
# registers and time under ncu, next to hopfuse's automatic schedule of the same product.
S=$OUT/summary.txt; L=$OUT/rE; mkdir -p $L
timeout 150 ncu --profile-from-start off --section LaunchStats --section SpeedOfLight python3 target/devA/dec.py > $L/cublas_ncu.txt 2>&1
grep -E "^  [a-zA-Z_].*\(|Grid Size|Block Size|Registers Per|Dynamic Shared|Static Shared|Duration|Memory Throughput|DRAM Throughput|Cluster Size|Waves" $L/cublas_ncu.txt >> $S
B=target/release/hopfuse
for m in 64 128; do
  timeout 120 ncu --section LaunchStats --section SpeedOfLight $B run target/devA/dec.hf --size M=$m,N=4096,K=4096 --iters 1 --warmup 0 --no-ceiling > $L/hopfuse_$m.txt 2>&1
  echo "== hopfuse M=$m" >> $S
  grep -E "^  [a-zA-Z_].*\(|Grid Size|Block Size|Registers Per|Dynamic Shared|Duration|Memory Throughput|DRAM Throughput|Cluster Size|Waves" $L/hopfuse_$m.txt >> $S
done
cd $OUT && tar czf logs.tgz rE && rm -r rE
cat $S
