#!/bin/bash
# Device run F2 (thirteenth session): ncu of the D = 128 attention kernel against cuDNN's at S = 2k and 8k.
B=target/release/hopfuse; A=target/devcheck/att13
L=$OUT/rF2; mkdir -p $L; S=$OUT/summary.txt
M="--section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_elapsed.avg,sm__warps_active.avg.pct_of_peak_sustained_active,gpc__cycles_elapsed.max,smsp__cycles_active.avg"
n() { name=$1; shift; t0=$(date +%s); timeout 150 ncu $M "$@" > $L/$name.txt 2>&1; echo "$name rc=$? [$(( $(date +%s)-t0 ))s]" >> $S; }
n ours_2k --kernel-name regex:attention --launch-count 1 $B run $A/pp.hf --size B=128,S=2048,T=2048 --iters 1 --warmup 0 --no-ceiling
n cudnn_2k --kernel-name regex:'sdpa|fprop|fmha|flash|cudnn' --launch-skip 3 --launch-count 1 python3 $A/cudnn_sdpa.py 128 2048 2048
n ours_8k --kernel-name regex:attention --launch-count 1 $B run $A/pp.hf --size B=32,S=8192,T=8192 --iters 1 --warmup 0 --no-ceiling
n cudnn_8k --kernel-name regex:'sdpa|fprop|fmha|flash|cudnn' --launch-skip 3 --launch-count 1 python3 $A/cudnn_sdpa.py 32 8192 8192
for f in $L/*.txt; do echo "== $f" >> $S; grep -E 'Duration|Grid Size|Block Size|Registers Per|Shared Memory Configuration Size|Dynamic Shared|Static Shared|Achieved Occupancy|Compute \(SM\) Throughput|gmma|inst_executed.sum|cycles_elapsed.avg|smsp__cycles_active|SM Frequency|Issued Warp|No Eligible|Warp Cycles Per Issued|  [a-z_0-9]+::|Function|sm90|attention' $f | head -40 >> $S; done
cd $OUT && tar czf logs.tgz rF2 && rm -r rF2
cat $S
