#!/bin/bash
# Session 21, run Q: pass mask_list with the wholly kept tiles first and pass mask_tiles' two
# loops (the kept tiles without the mask's code). Two release binaries in target/devC:
# kept.gz (this step) and prev.gz (run P's: every listed tile masked); carry=["target/devC"].
# Validation at ragged sizes and the sanitizers, then each case timed with both binaries,
# interleaved, then peers.
mkdir -p target/release
gunzip -c target/devC/kept.gz > target/release/kept && chmod +x target/release/kept
gunzip -c target/devC/prev.gz > target/release/prev && chmod +x target/release/prev
N=target/release/kept
L=$OUT/rQ; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 580 ]; then echo "$n skipped: ${t}s timeout would pass 580s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'vs peers' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
P=examples/auto/attention_prefix_lm.hf
C=examples/auto/attention_chunked_causal.hf
R="--iters 3 --warmup 1 --no-ceiling"
v pre_ragged 60 $N run $P --size B=3,S=1000,T=1037 $R
v chk_ragged 60 $N run $C --size B=3,S=1000,T=1037 $R
v pre_ragged_3k 90 $N run $P --size B=2,S=3000,T=3100 $R
v chk_ragged_3k 90 $N run $C --size B=2,S=3000,T=3100 $R
v chk_ragged_3k_i64 90 $N run $C --size B=2,S=3000,T=2900 $R --index i64
SZ="--size B=2,S=300,T=600 --iters 1 --warmup 0 --no-ceiling"
v pre_racecheck 150 compute-sanitizer --tool racecheck $N run $P $SZ
v pre_synccheck 120 compute-sanitizer --tool synccheck $N run $P $SZ
v chk_synccheck 120 compute-sanitizer --tool synccheck $N run $C $SZ
Z="--size B=128,S=2048,T=2048 --iters 10 --warmup 2 --no-ceiling --index i32"
for b in kept prev kept; do
  v ${b}_pre_2k 60 target/release/$b run $P $Z
  v ${b}_chk_2k 60 target/release/$b run $C $Z
done
v kept_pre_2k_peers 120 $N run $P $Z --peers
v kept_chk_2k_peers 120 $N run $C $Z --peers
v kept_chk_8k_peers 200 $N run $C --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --index i32 --peers
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rQ.tgz rQ && rm -r rQ
cat $S
