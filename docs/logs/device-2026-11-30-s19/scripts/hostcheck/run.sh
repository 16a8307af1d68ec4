#!/bin/bash
# Host check of fp8_dual.py's k loop (no GPU): the consumer's k loop of the generated step-18
# kernel and of its edits, cut out by mkharness.py and compiled with g++ against stubs.h, which
# models wgmma groups (an accumulator half is NaN from issue until its group completes at a
# wait_group), checks every full-barrier wait's stage and parity, that each stage is released once,
# in order, after its block's group completed, and that each block's accumulator is 4 wgmmas from a
# scale-d reset; the result must be sum_k (k + 1) * sa(k) (each block promoted once, from its own
# half, with its own scales), for tiles 0..2 (the stage index moves with the tile when KB % 4 != 0).
# Run from the repository root; HOPFUSE = the binary (default target/release/hopfuse).
set -e
H=${HOPFUSE:-target/release/hopfuse}
S=docs/logs/device-2026-11-30-s19/scripts
W=$(mktemp -d)
for kb in 1 2 3 4 5 6 7 8 9 12 13 16; do
  K=$((kb * 128)); [ $kb = 9 ] && K=1040
  $H compile examples/matmul/step18_fp8_block.hf --cuda --size M=256,N=256,K=$K,KB=$kb,NB=2 2>/dev/null > $W/g$kb.cu
  python3 $S/fp8_dual.py $W/g$kb.cu $W/d$kb.cu --unroll 2 --carry
  python3 $S/fp8_dual.py $W/g$kb.cu $W/e$kb.cu --unroll 4 --drain
  line="KB=$kb:"
  for v in g d e; do
    python3 $S/hostcheck/mkharness.py $W/$v$kb.cu > $W/h_$v$kb.cpp
    g++ -std=c++17 -O1 -w -I$S/hostcheck -DKBv_=$kb $W/h_$v$kb.cpp -o $W/h_$v$kb
    line="$line $v $($W/h_$v$kb)"
  done
  echo "$line"
done
rm -r $W
