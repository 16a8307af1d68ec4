#!/bin/bash
# Session 18, run D: plain attention with its peers (cuDNN's plain kernel for the variants'
# ratio) and its SM clock at two scales; the softcap with the hardware tanh at 8k with peers.
N=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
v() { local n=$1; local t=$2; shift 2; local t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; local rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') $(grep -m1 -i 'clock' $L/$n.txt | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  return $rc
}
Z="--size B=128,S=2048,T=2048 --iters 20 --warmup 3 --no-ceiling"
A=examples/auto/attention.hf
SCA=examples/auto/attention_softcap_hardware_tanh.hf
v att_peers 150 $N run $A $Z --peers
v att_clock 60 $N run $A $Z --clock
v att_clock_scale8 60 $N run $A $Z --clock --scalar scale=8
v sca_clock 60 $N run $SCA $Z --clock
v sca_8k_peers 240 $N run $SCA --size B=32,S=8192,T=8192 --iters 10 --warmup 2 --no-ceiling --peers
echo "== end $(date +%T)" >> $S
cd $OUT && tar czf rD.tgz rD && rm -r rD
cat $S
