#!/bin/bash
# Session 19: step 18 (block-scaled FP8, examples/matmul/step18_fp8_block.hf) with two block
# accumulators, so that each block's promotion runs while the next block's wgmmas do (hand edits
# of the generated CUDA by fp8_dual.py, written by mk_fp8.sh into target/devA, an ignored folder:
# carry it, e.g. carry=["target/release/hopfuse", "target/devA"]):
#   fp8_gen_<size>.cu    the generated kernel (checked here against the binary's, below)
#   fp8_dual_<size>.cu   the software pipeline (fp8_dual.py --unroll 2 --carry): issue block k+1
#                        into the other accumulator, wait_group 1, release block k's stage and
#                        promote block k; wait_group 0 and the last promotion after the k loop
#   fp8_dual4_<size>.cu  the compiler's step18_fp8_block_overlap form on the 128 x 128 tile
#                        (--unroll 4 --drain): wait_group 0 every fourth block
# The edits are validated against the float64 reference at a ragged size (KB = 9, odd: the
# pipeline's empty last group) and timed interleaved with the generated kernel at 4096 x 7168 x
# 16384 (every timed run validates too), then racecheck and synccheck at 256 x 256 x 1152, then
# timed at 8192^3 (last: a step whose timeout would pass 560 s is skipped and says so). An edit
# that fails its ragged validation is not timed (a hang would cost a timeout a run).
# Run from the repository root with the release binary at target/release/hopfuse.
# Session 19 ran it with 45 s timeouts: every run at 4096 x 7168 x 16384 and 8192^3 was killed
# (each takes about 53 s, mostly the float64 reference on the host: benchmarks.md, ninth
# session). The timeouts are 80 s now and each variant is timed once per size, so that the
# script fits its 560 s.
N=target/release/hopfuse
F=examples/matmul/step18_fp8_block.hf
D=target/devA
P=docs/logs/device-2026-11-30-s19/scripts/fp8_dual.py
L=$OUT/rH; mkdir -p $L; S=$OUT/summary.txt
T0=$(date +%s)
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  if [ $(( t0 - T0 + t )) -gt 560 ]; then echo "$n skipped: ${t}s timeout would pass 560s" >> $S; return 99; fi
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 'ERROR SUMMARY\|RACECHECK SUMMARY' $L/$n.txt) [$(( $(date +%s)-t0 ))s]" >> $S
  [ $rc -eq 0 ] && grep -q PASS $L/$n.txt && ! grep -q FAIL $L/$n.txt
}
BENCH=M=4096,N=7168,K=16384,KB=128,NB=56; B=4096x7168x16384
BIG=M=8192,N=8192,K=8192,KB=64,NB=64; G=8192x8192x8192
RAG=M=1000,N=1032,K=1040,KB=9,NB=9; R=1000x1032x1040
SMALL=M=256,N=256,K=1152,KB=9,NB=2; SM=256x256x1152
# The edits are of the CUDA this binary generates? (no GPU; regenerated here if not)
for s in $BENCH:$B $BIG:$G $RAG:$R $SMALL:$SM; do
  n=${s##*:}
  if $N compile $F --cuda --size ${s%%:*} 2>/dev/null > $L/gen_$n.cu && cmp -s $L/gen_$n.cu $D/fp8_gen_$n.cu; then
    echo "gen_$n: the binary's CUDA is fp8_gen_$n.cu" >> $S
  else
    echo "gen_$n: the binary's CUDA DIFFERS from fp8_gen_$n.cu: edits regenerated here" >> $S
    diff $D/fp8_gen_$n.cu $L/gen_$n.cu > $L/gen_$n.diff
    cp $L/gen_$n.cu $D/fp8_gen_$n.cu
    python3 $P $D/fp8_gen_$n.cu $D/fp8_dual_$n.cu --unroll 2 --carry >> $S 2>&1 || echo "  fp8_dual.py failed (dual)" >> $S
    python3 $P $D/fp8_gen_$n.cu $D/fp8_dual4_$n.cu --unroll 4 --drain >> $S 2>&1 || echo "  fp8_dual.py failed (dual4)" >> $S
  fi
done
echo "== checks done $(date +%T)" >> $S
Q="--iters 3 --warmup 1 --no-ceiling"
v dual_ragged 40 $N run $F --size $RAG $Q --cuda-file $D/fp8_dual_$R.cu; OK2=$?
v dual4_ragged 40 $N run $F --size $RAG $Q --cuda-file $D/fp8_dual4_$R.cu; OK4=$?
Z="--iters 20 --warmup 3 --no-ceiling"
for r in 1; do
  v gen_bench$r 80 $N run $F --size $BENCH $Z
  [ $OK2 -eq 0 ] && v dual_bench$r 80 $N run $F --size $BENCH $Z --cuda-file $D/fp8_dual_$B.cu
  [ $OK4 -eq 0 ] && v dual4_bench$r 80 $N run $F --size $BENCH $Z --cuda-file $D/fp8_dual4_$B.cu
done
SZ="--size $SMALL --iters 1 --warmup 0 --no-ceiling --cuda-file $D/fp8_dual_$SM.cu"
if [ $OK2 -eq 0 ]; then
  v dual_racecheck 150 compute-sanitizer --tool racecheck $N run $F $SZ
  v dual_synccheck 150 compute-sanitizer --tool synccheck $N run $F $SZ
fi
for r in 1; do
  v gen_8k$r 80 $N run $F --size $BIG $Z
  [ $OK2 -eq 0 ] && v dual_8k$r 80 $N run $F --size $BIG $Z --cuda-file $D/fp8_dual_$G.cu
  [ $OK4 -eq 0 ] && v dual4_8k$r 80 $N run $F --size $BIG $Z --cuda-file $D/fp8_dual4_$G.cu
done
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rH.tgz rH && rm -r rH
cat $S
