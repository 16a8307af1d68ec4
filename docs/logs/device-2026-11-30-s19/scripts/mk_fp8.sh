#!/bin/bash
# Writes step 18's generated kernels (target/devA/fp8_gen_<size>.cu) and their hand edits
# (fp8_dual_<size>.cu: fp8_dual.py --unroll 2 --carry, the software pipeline; fp8_dual4_<size>.cu:
# --unroll 4 --drain, a wait_group 0 every 4 blocks, the compiler's step18_fp8_block_overlap form) for the
# sizes runH.sh runs. Run from the repository root; HOPFUSE = the binary (default
# target/release/hopfuse). No GPU needed.
set -e
H=${HOPFUSE:-target/release/hopfuse}
D=target/devA; mkdir -p $D
P=docs/logs/device-2026-11-30-s19/scripts/fp8_dual.py
F=examples/matmul/step18_fp8_block.hf
for s in M=4096,N=7168,K=16384,KB=128,NB=56 M=8192,N=8192,K=8192,KB=64,NB=64 \
         M=1000,N=1032,K=1040,KB=9,NB=9 M=256,N=256,K=1152,KB=9,NB=2; do
  n=$(echo $s | sed 's/M=\([0-9]*\),N=\([0-9]*\),K=\([0-9]*\),.*/\1x\2x\3/')
  $H compile $F --cuda --size $s 2>/dev/null > $D/fp8_gen_$n.cu
  python3 $P $D/fp8_gen_$n.cu $D/fp8_dual_$n.cu --unroll 2 --carry
  python3 $P $D/fp8_gen_$n.cu $D/fp8_dual4_$n.cu --unroll 4 --drain
  echo "$n: $(wc -l < $D/fp8_gen_$n.cu) -> $(wc -l < $D/fp8_dual_$n.cu) / $(wc -l < $D/fp8_dual4_$n.cu) lines"
done
