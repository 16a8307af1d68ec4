#!/bin/bash
# Device run E (thirteenth session): persistent attention (persistent(BIDx|BIDy, 16)) and
# FlashAttention-3's 176-key tiles at D = 128; validation across tiles, sanitizers, times.
B=target/release/hopfuse; A=target/devcheck/att13
L=$OUT/rE; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') $(grep -m1 'SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
}
RS="--iters 2 --warmup 1 --no-ceiling"
echo "== validate $(date +%T)" >> $S
for f in pp_pers_x pp_pers_y pp176 pp176_pers_x; do
  v ${f}_ragged 60 $B run $A/$f.hf --size B=3,S=1000,T=1037 $RS
  v ${f}_multi 90 $B run $A/$f.hf --size B=40,S=1000,T=1037 $RS
done
v d64_pers_x_multi 90 $B run $A/d64_pers_x.hf --size B=40,S=1000,T=1037 $RS
echo "== sanitize $(date +%T)" >> $S
RC="--size B=67,S=250,T=300 --iters 1 --warmup 0 --no-ceiling"
v pp_pers_x_race 150 compute-sanitizer --tool racecheck $B run $A/pp_pers_x.hf $RC
v pp_pers_x_sync 150 compute-sanitizer --tool synccheck $B run $A/pp_pers_x.hf $RC
echo "== time $(date +%T)" >> $S
T="--iters 20 --warmup 3"
v pp_2k 150 $B run $A/pp.hf --size B=128,S=2048,T=2048 $T --peers
for f in pp_pers_x pp_pers_y pp176 pp176_pers_x pp; do v ${f}_2k_t 90 $B run $A/$f.hf --size B=128,S=2048,T=2048 $T; done
for f in pp pp_pers_x pp176_pers_x; do v ${f}_8k_t 120 $B run $A/$f.hf --size B=32,S=8192,T=8192 $T; done
for f in d64 d64_pers_x; do v ${f}_4k_t 90 $B run $A/$f.hf --size B=32,S=4096,T=4096 $T; done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rE && rm -r rE
cat $S
