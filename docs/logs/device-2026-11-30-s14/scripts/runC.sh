#!/bin/bash
# Device run C (fourteenth session): ALiBi's index_float (branch alibi) and the softcap's
# tanh_abs on the merged main: validation, sanitizers, times with peers; torch.compile's
# add_rmsnorm kernel read and timed against two copies.
B=target/release/hopfuse
L=$OUT/rC; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 1 --warmup 0 --no-ceiling"
echo "== validate $(date +%T)" >> $S
v alibi_ragged 60 $B run examples/auto/attention_alibi.hf --size B=3,S=1000,T=1037 $RS
v alibi_ragged_generic 60 $B run examples/auto/attention_alibi.hf --size B=3,S=1000,T=1037 --generic $RS
v softcap_ragged 60 $B run examples/auto/attention_softcap.hf --size B=3,S=1000,T=1037 $RS
v softcap_hand_ragged 60 $B run examples/attention/softcap.hf --size S=1000,T=1037,D=64 $RS
v plain_ragged 60 $B run examples/auto/attention.hf --size B=3,S=1000,T=1037 $RS
v alibi_mem 120 compute-sanitizer --tool memcheck $B run examples/auto/attention_alibi.hf --size B=2,S=130,T=300 $RS
v alibi_race 120 compute-sanitizer --tool racecheck $B run examples/auto/attention_alibi.hf --size B=2,S=130,T=300 $RS
v softcap_mem 120 compute-sanitizer --tool memcheck $B run examples/auto/attention_softcap.hf --size B=2,S=130,T=300 $RS
echo "== time $(date +%T)" >> $S
T="--iters 20 --warmup 3"
v plain_2k 120 $B run examples/auto/attention.hf --size B=128,S=2048,T=2048 $T --peers
v alibi_2k 120 $B run examples/auto/attention_alibi.hf --size B=128,S=2048,T=2048 $T --peers
v softcap_2k 120 $B run examples/auto/attention_softcap.hf --size B=128,S=2048,T=2048 $T --peers
v alibi_8k 90 $B run examples/auto/attention_alibi.hf --size B=32,S=8192,T=8192 $T
v softcap_8k 90 $B run examples/auto/attention_softcap.hf --size B=32,S=8192,T=8192 $T
echo "== torch.compile add_rmsnorm $(date +%T)" >> $S
$B compile --torch examples/fusions/add_rmsnorm.hf > $L/twin.py 2>/dev/null
TORCH_LOGS=output_code timeout 180 python3 target/devC2/dump.py $L/twin.py > $L/tc_add_rmsnorm.txt 2>&1
grep 'median' $L/tc_add_rmsnorm.txt >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rC && rm -r rC
cat $S
