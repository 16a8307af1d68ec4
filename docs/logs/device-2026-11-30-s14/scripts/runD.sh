#!/bin/bash
# Device run D (fourteenth session): the fusions table in one run (each examples/fusions/*.hf at
# its first `// bench:` size, --peers: the twin eager and under torch.compile, 5 alternating
# rounds, same process), and add_rmsnorm with its row streamed (read again from L2, as
# torch.compile's looped reduction does).
B=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> $S
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep -m1 'ratio' $L/$n.txt | sed 's/  */ /g') $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
}
echo "== table $(date +%T)" >> $S
for f in examples/fusions/*.hf; do
  n=$(basename $f .hf); size=$(grep -m1 '// bench:' $f | sed 's#// bench: ##')
  v $n 100 $B run $f --size $size --iters 30 --warmup 5 --peers
done
echo "== add_rmsnorm streamed $(date +%T)" >> $S
for t in 256 512; do
  v stream${t}_ragged 60 $B run target/devD/addrms_stream$t.hf --size M=1001 --iters 1 --warmup 0 --no-ceiling
  v stream$t 60 $B run target/devD/addrms_stream$t.hf --size M=32768 --iters 30 --warmup 5
done
v add_rmsnorm_again 60 $B run examples/fusions/add_rmsnorm.hf --size M=32768 --iters 30 --warmup 5
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rD && rm -r rD
cat $S
