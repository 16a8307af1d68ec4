#!/bin/bash
# Device run C: ncu of hopfuse's plain attention kernel (auto/attention.hf) and of cuDNN's SDPA
# kernel at B = 128, S = T = 2048, D = 128 (the 2k gap, issue 35).
N=target/release/hopfuse; S=$OUT/summary.txt
SEC="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy --section SchedulerStats --section InstructionStats"
timeout 200 ncu $SEC -k regex:attention_kernel -c 1 $N run examples/auto/attention.hf --size B=128,S=2048,T=2048 --iters 1 --warmup 0 --no-ceiling > $OUT/ncu_hopfuse.txt 2>&1; echo "hopfuse rc=$?" >> $S
timeout 200 ncu $SEC --profile-from-start off python3 target/devA/sdpa_ncu.py > $OUT/ncu_cudnn.txt 2>&1; echo "cudnn rc=$?" >> $S
for f in hopfuse cudnn; do echo "== $f" >> $S; grep -E "^\s+[a-zA-Z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Executed Ipc Active|Issue Slots Busy|SM Busy|Registers Per|Grid Size|Block Size|Shared Memory Configuration Size|Dynamic Shared|Achieved Occupancy|Warp Cycles Per Issued|No Eligible|One or More Eligible|Executed Instructions  " $OUT/ncu_$f.txt | head -40 >> $S; done
cat $S
