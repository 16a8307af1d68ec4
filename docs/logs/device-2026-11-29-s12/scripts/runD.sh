#!/bin/bash
# Device run D (twelfth session): the FlexAttention peer of softcap and the sliding window
# after the twin module is registered in sys.modules.
B=target/release/hopfuse
L=$OUT/rD; mkdir -p $L; S=$OUT/summary.txt
v() { n=$1; t=$2; shift 2; t0=$(date +%s)
  timeout $t "$@" > $L/$n.txt 2>&1; rc=$?
  echo "$n rc=$rc $(grep -o 'PASS\|FAIL' $L/$n.txt | sort | uniq -c | tr '\n' ' ') $(grep -m1 'median' $L/$n.txt | sed 's/  */ /g') | $(grep 'vs peers' $L/$n.txt | head -1 | sed 's/  */ /g') [$(( $(date +%s)-t0 ))s]" >> $S
  grep -E "^\s+(FlexAttention|torch.compile|cuDNN)" $L/$n.txt >> $S
}
T="--peers --iters 20 --warmup 3"
v softcap_2k 120 $B run examples/auto/attention_softcap.hf --size B=128,S=2048,T=2048 $T
v sliding_window_2k 120 $B run examples/auto/attention_sliding_window.hf --size B=128,S=2048,T=2048 $T
echo "== done $(date +%T)" >> $S
cd $OUT && tar czf logs.tgz rD && rm -r rD
cat $S
