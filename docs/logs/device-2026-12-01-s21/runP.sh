#!/bin/bash
# Session 21: masks on indices that are no band (pass mask_list): the prefix-LM and chunked
# causal examples. Validation at ragged sizes (chunks crossed: S = 3000), racecheck and
# synccheck, then B = 128, S = T = 2048 and B = 32, S = T = 8192 with peers, each against the
# same kernel with every key tile listed (the list's condition replaced by `true`: the kernel
# this pass replaces, every tile visited and masked).
N=target/release/hopfuse
L=$OUT/rP; mkdir -p $L; S=$OUT/summary.txt
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
SZ="--size B=2,S=130,T=300 --iters 1 --warmup 0 --no-ceiling"
v pre_racecheck 120 compute-sanitizer --tool racecheck $N run $P $SZ
v chk_synccheck 120 compute-sanitizer --tool synccheck $N run $C $SZ
t() { local tag=$1 F=$2 z=$3 to=$4
  $N compile $F --cuda --size $z --index i32 > $L/$tag.cu 2>/dev/null
  sed 's/-> bool { return .*; }, hf_visited);/-> bool { return true; }, hf_visited);/' $L/$tag.cu > $L/${tag}_all.cu
  echo "$tag: $(grep -c 'return true; }, hf_visited' $L/${tag}_all.cu) list condition(s) replaced" >> $S
  v ${tag}_all $to $N run $F --size $z --iters 10 --warmup 2 --no-ceiling --index i32 --cuda-file $L/${tag}_all.cu
  v ${tag}_peers $((to + 60)) $N run $F --size $z --iters 10 --warmup 2 --no-ceiling --index i32 --peers
}
t pre_2k $P B=128,S=2048,T=2048 60
t chk_2k $C B=128,S=2048,T=2048 60
v chk_8k_peers 200 $N run $C --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --index i32 --peers
echo "== end $(date +%T) [$(( $(date +%s)-T0 ))s]" >> $S
cd $OUT && tar czf rP.tgz rP && rm -r rP
cat $S
