#!/bin/bash
# Device run E (fourteenth session): inputs read with an L2 evict_last policy
# (cache_after(x, l2=evict_last)) against plain loads, every fusions example; peers for the
# four rows that trailed torch.compile.
B=target/release/hopfuse; V=target/devE/v
L=$OUT/rE; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1 lim=$2; shift 2; local t0=$(date +%s)
  timeout $lim "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
v add_ragged 60 $B run $V/add_rmsnorm.hf --size M=1001 $RS
v rotary_ragged 60 $B run $V/rotary.hf --size S=1037 $RS
v swiglu_ragged 60 $B run $V/swiglu.hf --size M=1000,N=4099 $RS
v transpose_ragged 60 $B run $V/transpose_bf16.hf --size M=1001,N=1499 $RS
v add_mem 120 compute-sanitizer --tool memcheck $B run $V/add_rmsnorm.hf --size M=64 $RS
echo "== peers $(date +%T)" >> $S
for f in add_rmsnorm rotary swiglu transpose_bf16; do
  size=$(grep -m1 '// bench:' examples/fusions/$f.hf | sed 's#// bench: ##')
  v ${f}_l2_peers 100 $B run $V/$f.hf --size $size --iters 30 --warmup 5 --peers
done
v add512_l2 60 $B run $V/add_rmsnorm_512.hf --size M=32768 --iters 30 --warmup 5
echo "== plain vs l2 $(date +%T)" >> $S
for f in add_rmsnorm causal_softmax cross_entropy_labels dropout_residual gelu_exact layernorm layernorm_two_pass quantize_fp8 rmsnorm rotary softmax_scale swiglu transpose_bf16; do
  size=$(grep -m1 '// bench:' examples/fusions/$f.hf | sed 's#// bench: ##')
  v ${f}_plain 60 $B run examples/fusions/$f.hf --size $size --iters 30 --warmup 5
  v ${f}_l2 60 $B run $V/$f.hf --size $size --iters 30 --warmup 5
done
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rE && rm -r rE
cat $S
