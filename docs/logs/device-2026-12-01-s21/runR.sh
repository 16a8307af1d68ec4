#!/bin/bash
# Session 21, run R: the sliding window at D = 128 on the ping-pong kernel, its tiles listed by
# pass mask_list (a circular-buffered key loop cannot start at the window), against the
# one-group kernel that starts its loop at the window (run Q's binary). target/devD: win.gz
# (this step), prev.gz (run Q's); carry=["target/devD"]. Steps stop before 380 s.
mkdir -p target/release
gunzip -c target/devD/win.gz > target/release/win && chmod +x target/release/win
gunzip -c target/devD/prev.gz > target/release/prev && chmod +x target/release/prev
N=target/release/win
L=$OUT/rR; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 380 ]; then echo "$n skipped: ${t}s timeout would pass 380s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
W=examples/auto/attention_sliding_window.hf
R="--iters 3 --warmup 1 --no-ceiling"
v win_ragged 60 $N run $W --size B=3,S=1000,T=1037 $R
v win_ragged_3k 90 $N run $W --size B=2,S=3000,T=3100 $R
SZ="--size B=2,S=300,T=1500 --iters 1 --warmup 0 --no-ceiling"
v win_racecheck 120 compute-sanitizer --tool racecheck $N run $W $SZ
v win_synccheck 90 compute-sanitizer --tool synccheck $N run $W $SZ
Z="--size B=128,S=2048,T=2048 --iters 10 --warmup 2 --no-ceiling --index i32"
for b in win prev win; do
  v ${b}_2k 60 target/release/$b run $W $Z
done
v win_2k_peers 100 $N run $W $Z --peers
Z8="--size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --index i32"
v win_8k 100 $N run $W $Z8
v prev_8k 100 target/release/prev run $W $Z8
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rR.tgz rR && rm -r rR
cat $S
