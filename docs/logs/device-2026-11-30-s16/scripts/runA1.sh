#!/bin/bash
# Device run A (sixteenth session): softcap's Newton reciprocal (old vs new binary, interleaved),
# grouped-query attention with its SDPA / cuDNN / Flex peers and its variants validated on the GPU,
# transpose_bf16's spread against torch.compile.
N=target/release/hopfuse; O=target/release/hopfuse-old
L=$OUT/rA1; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers\|vs SDPA\|vs cuDNN\|vs Flex' $L/$n.txt | head -4 | sed 's/  */ /g' | tr '\n' ';') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
A="--iters 20 --warmup 3"
echo "== persistent attention $(date +%T)" >> $S
CS=compute-sanitizer
PP=target/devA/pers/online_wgmma_overlap_pingpong_p.hf
PC=target/devA/pers/online_wgmma_overlap_pingpong_causal_p.hf
v pers_ragged 60 $N run $PP --size B=40,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling && P1=1
v pers_causal_ragged 60 $N run $PC --size B=40,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling && P2=1
if [ -n "$P1" ]; then
for r in 1 2; do
  v pp_$r 120 $N run examples/attention/online_wgmma_overlap_pingpong.hf --size B=128,S=2048,T=2048 $A --no-ceiling
  v pers_$r 120 $N run $PP --size B=128,S=2048,T=2048 $A --no-ceiling
  v ppc_$r 120 $N run examples/attention/online_wgmma_overlap_pingpong_causal.hf --size B=128,S=2048,T=2048 $A --no-ceiling
  v persc_$r 120 $N run $PC --size B=128,S=2048,T=2048 $A --no-ceiling
done
v pers_8k 200 $N run $PP --size B=32,S=8192,T=8192 $A --no-ceiling
v pp_8k 200 $N run examples/attention/online_wgmma_overlap_pingpong.hf --size B=32,S=8192,T=8192 $A --no-ceiling
v pers_race 300 $CS --tool racecheck $N run $PP --size B=140,S=128,T=200 --iters 1 --warmup 0 --no-ceiling
v pers_sync 300 $CS --tool synccheck $N run $PP --size B=140,S=128,T=200 --iters 1 --warmup 0 --no-ceiling
v persc_race 300 $CS --tool racecheck $N run $PC --size B=140,S=200,T=200 --iters 1 --warmup 0 --no-ceiling
fi
echo "== softcap $(date +%T)" >> $S
SC=examples/auto/attention_softcap.hf
for r in 1 2; do
  v softcap_old_$r 120 $O run $SC --size B=128,S=2048,T=2048 $A --no-ceiling
  v softcap_new_$r 120 $N run $SC --size B=128,S=2048,T=2048 $A --no-ceiling
done
v softcap_new_peers 200 $N run $SC --size B=128,S=2048,T=2048 $A --peers
v softcap_ragged 120 $N run $SC --size B=3,S=1000,T=1037 --iters 3 --warmup 1 --no-ceiling
v softcap_hand_ragged 120 $N run examples/attention/softcap.hf --size S=777,T=1001,D=64 --iters 3 --warmup 1 --no-ceiling
echo "== sanitizers $(date +%T)" >> $S
CS=compute-sanitizer
v softcap_mem 200 $CS --tool memcheck $N run $SC --size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rA1 && rm -r rA1
cat $S
