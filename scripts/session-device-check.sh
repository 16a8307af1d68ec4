#!/bin/bash
# A session's device checks in one call (the device tool gives a few calls per session): runs the
# named SECTIONs in order, keeps every log, writes summary.txt (GPU clocks and power before and
# after) and logs.tgz under $OUT. Carry target/release/hopfuse (and target/wheels for D, T).
#
#   PAIRS=... QPAIRS=... bash scripts/session-device-check.sh SECTION...
#
#   E  export: scripts/export-device-check.sh (C++ and Python launchers against the twin)
#   D  the Python package: scripts/python-device-check.sh
#   T  the wheel's launch overhead (scripts/launch_overhead.py) and the transformer block
#      (python/examples/transformer_block.py, batch 8 x seq 1024, hidden 2048, 16 heads)
#   A  hopfuse bench of examples/matmul;  C  of tma/, ws/, basics/
#   V  validation against the float64 reference of FILE:SIZES pairs ($PAIRS)
#   Z  compute-sanitizer memcheck, racecheck, synccheck of FILE:SIZES pairs ($ZPAIRS)
#   Q  hopfuse run --peers of examples/FILE:SIZES pairs ($QPAIRS), one line each
#   B  hopfuse bench --peers of $BENCHFILES at their bench sizes;  P  with 50 iterations ($PEERFILES)
#   X  one more command line, $XCMD (a profile, say)
B=target/release/hopfuse
FINAL=$OUT
OUT=/tmp/dc; rm -rf $OUT; mkdir -p $OUT/logs
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader >> $S
export HOPFUSE_DATA_DIR=$(mktemp -d)
for sec in "$@"; do
  echo "== $sec $(date +%T)" >> $S
  case $sec in
  E) timeout 400 bash scripts/export-device-check.sh $B > $OUT/logs/E.log 2>&1
     echo "export rc=$?" >> $S
     cp $OUT/export-device-check/summary.md $OUT/logs/E-summary.md 2>/dev/null
     cat $OUT/export-device-check/summary.md >> $S 2>/dev/null ;;
  D) timeout 300 bash scripts/python-device-check.sh > $OUT/logs/D.log 2>&1
     echo "python rc=$?" >> $S
     cp $OUT/python-device-check/summary.md $OUT/logs/D-summary.md 2>/dev/null
     grep -A12 "Launch overhead" $OUT/python-device-check/summary.md >> $S 2>/dev/null
     grep "| NO" $OUT/python-device-check/summary.md >> $S ;;
  A) timeout 420 $B bench --iters 3 --warmup 1 examples/matmul/*.hf > $OUT/logs/A.md 2> $OUT/logs/A.err
     echo "bench rc=$? rows=$(grep -c '^| matmul' $OUT/logs/A.md) pass=$(grep -c 'PASS' $OUT/logs/A.md) fail=$(grep -c 'FAIL' $OUT/logs/A.md)" >> $S ;;
  C) timeout 420 $B bench --iters 3 --warmup 1 examples/tma/*.hf examples/ws/*.hf examples/basics/*.hf > $OUT/logs/C.md 2> $OUT/logs/C.err
     echo "bench rc=$? pass=$(grep -c 'PASS' $OUT/logs/C.md) fail=$(grep -c 'FAIL' $OUT/logs/C.md)" >> $S ;;
  V) # validate + time given example:sizes pairs ($PAIRS) with peers
     OUT=$OUT/val timeout 500 bash scripts/device-validate.sh --bin $B --iters 20 --warmup 3 --timeout 120 $PAIRS > $OUT/logs/V.log 2>&1
     echo "validate rc=$? $(grep -c PASS $OUT/val/summary.txt 2>/dev/null) PASS, $(grep -c FAIL $OUT/val/summary.txt 2>/dev/null) FAIL" >> $S
     grep FAIL $OUT/val/summary.txt >> $S 2>/dev/null ;;
  P) timeout 540 $B bench --peers --iters 50 --warmup 5 $PEERFILES > $OUT/logs/P.md 2> $OUT/logs/P.err
     echo "peers rc=$? pass=$(grep -c PASS $OUT/logs/P.md)" >> $S ;;
  Q) # automatic schedules (and two hand schedules) against torch eager / torch.compile, one run each
     for pair in $QPAIRS; do
       f=${pair%%:*}; sz=${pair#*:}
       timeout 150 $B run examples/$f --size $sz --peers --iters 20 --warmup 3 --json-file $OUT/logs/Q-$(echo $f | tr / _)-$sz.json > $OUT/logs/Q-$(echo $f | tr / _)-$sz.txt 2>&1
       echo "$f $sz rc=$? $(grep -o 'PASS[^|]*\|FAIL[^|]*' $OUT/logs/Q-$(echo $f | tr / _)-$sz.txt | head -1) | $(grep -o '[0-9.]* GB/s' $OUT/logs/Q-$(echo $f | tr / _)-$sz.txt | head -1) | $(grep -o '[0-9.]*% of copy' $OUT/logs/Q-$(echo $f | tr / _)-$sz.txt | head -1) | $(grep -o 'x[0-9.]* vs [a-z. ]*' $OUT/logs/Q-$(echo $f | tr / _)-$sz.txt | head -1)" >> $S
     done ;;
  T) python3 -m pip install --no-deps --target /tmp/hf target/wheels/hopfuse-*-abi3-*.whl > $OUT/logs/pip.log 2>&1
     PYTHONPATH=/tmp/hf timeout 120 python3 scripts/launch_overhead.py > $OUT/logs/O.log 2>&1; echo "overhead rc=$?" >> $S; tail -12 $OUT/logs/O.log >> $S
     PYTHONPATH=/tmp/hf timeout 300 python3 python/examples/transformer_block.py --batch 8 --seq 1024 --hidden 2048 --heads 16 --intermediate 5632 --iters 20 > $OUT/logs/T.log 2>&1; echo "block rc=$?" >> $S; tail -30 $OUT/logs/T.log >> $S ;;
  X) # one more command line ($XCMD), logged as X.log
     timeout 300 bash -c "$XCMD" > $OUT/logs/X.log 2>&1; echo "command rc=$?" >> $S; tail -40 $OUT/logs/X.log >> $S ;;
  Z) OUT=$OUT/san timeout 300 bash scripts/device-validate.sh --bin $B --sanitize --timeout 120 $ZPAIRS > $OUT/logs/Z.log 2>&1
     echo "sanitize rc=$?" >> $S; tail -15 $OUT/san/summary.txt >> $S 2>/dev/null ;;
  B) timeout 540 $B bench --peers --iters 20 --warmup 3 $BENCHFILES > $OUT/logs/B.md 2> $OUT/logs/B.err
     echo "bench-peers rc=$? pass=$(grep -c PASS $OUT/logs/B.md) fail=$(grep -c FAIL $OUT/logs/B.md)" >> $S
     cat $OUT/logs/B.md >> $S ;;
  esac
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv,noheader >> $S
cat $S
cp $S $FINAL/summary.txt
tar czf $FINAL/logs.tgz -C $OUT .
