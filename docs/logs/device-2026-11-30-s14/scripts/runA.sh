#!/bin/bash
# Device run A (fourteenth session): gelu's one-range erfc, softmax's row kept in shared memory
# (recompute(from=x_c)), validation and times with peers.
B=target/release/hopfuse; A=target/devcheck/s14
L=$OUT/rA; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
v gelu_ragged 60 $B run examples/fusions/gelu_exact.hf --size M=1000,N=4099 $RS
v gelu_auto_ragged 60 $B run examples/auto/gelu_bias.hf --size M=1000,N=4099 $RS
v smem_ragged 60 $B run $A/softmax_smem.hf --size M=1000,N=4099 $RS
v regproj_ragged 60 $B run $A/softmax_regproj.hf --size M=1000,N=4099 $RS
v smem_race 120 compute-sanitizer --tool racecheck $B run $A/softmax_smem.hf --size M=64,N=4099 $RS
echo "== time $(date +%T)" >> $S
T="--iters 30 --warmup 3"
v gelu 90 $B run examples/fusions/gelu_exact.hf --size M=16384,N=16384 $T --peers
v sm_orig 90 $B run examples/fusions/softmax_scale.hf --size M=8192,N=16384 $T --peers
v sm_smem 60 $B run $A/softmax_smem.hf --size M=8192,N=16384 $T
v sm_regproj 60 $B run $A/softmax_regproj.hf --size M=8192,N=16384 $T
v sm_orig4k 60 $B run examples/fusions/softmax_scale.hf --size M=32768,N=4096 $T
v sm_smem4k 60 $B run $A/softmax_smem.hf --size M=32768,N=4096 $T
v sm_orig_b 60 $B run examples/fusions/softmax_scale.hf --size M=8192,N=16384 $T
v sm_smem_b 60 $B run $A/softmax_smem.hf --size M=8192,N=16384 $T
v addrms 90 $B run examples/fusions/add_rmsnorm.hf --size M=32768 $T --peers
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rA && rm -r rA
cat $S
