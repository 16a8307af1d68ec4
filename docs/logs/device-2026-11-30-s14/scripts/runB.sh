#!/bin/bash
# Device run B (fourteenth session): block reductions combining the warps' partials by a shuffle
# tree (new) against a loop over them (old, the binary before the change), interleaved.
B=target/release/hopfuse; O=target/devB/old
L=$OUT/rB; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
for f in softmax_scale:M=1000,N=4099 rmsnorm:M=1001 layernorm:M=1001 layernorm_two_pass:M=1001 add_rmsnorm:M=1001 quantize_fp8:M=1001 causal_softmax:M=1000,N=4099 cross_entropy_labels:M=1000,V=4099; do
  v ${f%%:*}_ragged 60 $B run examples/fusions/${f%%:*}.hf --size ${f#*:} $RS
done
v sm_race 120 compute-sanitizer --tool racecheck $B run examples/fusions/softmax_scale.hf --size M=64,N=4099 $RS
v sm_sync 120 compute-sanitizer --tool synccheck $B run examples/fusions/softmax_scale.hf --size M=64,N=4099 $RS
echo "== time $(date +%T)" >> $S
T="--iters 30 --warmup 3"
for f in softmax_scale:M=8192,N=16384 softmax_scale:M=32768,N=4096 rmsnorm:M=32768 layernorm:M=32768 layernorm_two_pass:M=32768 add_rmsnorm:M=32768 quantize_fp8:M=32768 causal_softmax:M=8192,N=8192 cross_entropy_labels:M=4096,V=128256; do
  n=${f%%:*}_${f#*:}; n=${n//[=,]/_}
  v old_$n 60 $O run examples/fusions/${f%%:*}.hf --size ${f#*:} $T
  v new_$n 60 $B run examples/fusions/${f%%:*}.hf --size ${f#*:} $T
  v old2_$n 60 $O run examples/fusions/${f%%:*}.hf --size ${f#*:} $T
  v new2_$n 60 $B run examples/fusions/${f%%:*}.hf --size ${f#*:} $T
done
A=target/devB/s14
for k in 256 512; do
  v addrms_${k}_ragged 60 $B run $A/addrms_$k.hf --size M=1001 $RS
  v addrms_$k 60 $B run $A/addrms_$k.hf --size M=32768 $T
done
v addrms_peers 90 $B run examples/fusions/add_rmsnorm.hf --size M=32768 $T --peers
v addrms_256_again 60 $B run $A/addrms_256.hf --size M=32768 $T
v addrms_512_again 60 $B run $A/addrms_512.hf --size M=32768 $T
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rB && rm -r rB
cat $S
