#!/bin/bash
# Device run D (fifteenth session): the fusions table in one run, each examples/fusions/*.hf
# at its first bench size with peers (torch eager, torch.compile) in the same process.
B=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ceiling' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
T="--iters 30 --warmup 5"
echo "== fusions $(date +%T)" >> $S
for f in examples/fusions/*.hf; do
  n=$(basename $f .hf)
  size=$(grep -m1 '// bench:' $f | sed 's/.*bench: //')
  v $n 75 $B run $f --size $size $T --peers
done
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rD && rm -r rD
cat $S
