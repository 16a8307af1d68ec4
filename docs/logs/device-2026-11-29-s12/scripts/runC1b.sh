#!/bin/bash
# Device run C1b (twelfth session): attention variants without a schedule against FlexAttention
# and cuDNN; D = 64's automatic kernel on 128-key tiles; racechecks; 300 random causal shapes.
B=target/release/hopfuse; A=target/devcheck/att
L=$OUT/rC1b; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 2 --warmup 1 --no-ceiling"
RC="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling"
echo "== validate + sanitize $(date +%T)" >> $S
v auto64_ragged 60 $B run $A/auto64.hf --size B=3,S=1000,T=1037 $RS
v auto64_softcap_ragged 60 $B run $A/auto64_softcap.hf --size B=3,S=1000,T=1037 $RS
v alibi_race 120 compute-sanitizer --tool racecheck $B run examples/auto/attention_alibi.hf $RC
v document_race 120 compute-sanitizer --tool racecheck $B run examples/auto/attention_document.hf $RC
v auto64_race 120 compute-sanitizer --tool racecheck $B run $A/auto64.hf $RC
v alibi_mem 120 compute-sanitizer --tool memcheck $B run examples/auto/attention_document.hf $RC
echo "== time $(date +%T)" >> $S
T="--peers --iters 20 --warmup 3"
v auto64 60 $B run $A/auto64.hf --size B=32,S=4096,T=4096 --iters 20 --warmup 3
v plain_2k 150 $B run examples/auto/attention.hf --size B=128,S=2048,T=2048 $T
v causal_2k 150 $B run examples/auto/attention_causal.hf --size B=128,S=2048,T=2048 $T
for x in softcap alibi sliding_window document; do v ${x}_2k 150 $B run examples/auto/attention_$x.hf --size B=128,S=2048,T=2048 $T; done
echo "== many $(date +%T)" >> $S
v many_causal 120 $B bench --iters 3 --warmup 1 --job-timeout 60 --generic target/devcheck/many/attnc_300.hf
echo "many causal PASS $(grep -c PASS $L/many_causal.txt) FAIL $(grep -c FAIL $L/many_causal.txt)" >> $S
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rC1b && rm -r rC1b
cat $S
