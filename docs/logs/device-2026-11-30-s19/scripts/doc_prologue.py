"""Hand edits of the document mask's kernel (session 19): how much of its time is the list.

Reads the kernel `hopfuse compile examples/auto/attention_document.hf --size
B=128,S=2048,T=2048 --index i32` printed (argv[1]) and writes, into the directory argv[2]:
- doc_gen.cu: the kernel as generated;
- doc_identity.cu: the list replaced by every tile in order (no ids read; exact only where every
  tile meets, as with the runner's random ids);
- doc_constant.cu: as doc_identity.cu, the count a constant (the loops' trip counts known to
  the compiler, as before the pass).
"""
import re
import sys

src = open(sys.argv[1]).read()
out = sys.argv[2]
call = re.compile(r"  const index_t hf_visited_n = hf_visit_document_tiles<[^;]*;\n")
assert len(call.findall(src)) == 1
tiles = 2048 // 128
identity = (
    "  if (threadIdx.x + blockDim.x * threadIdx.y < %d) hf_visited[threadIdx.x + blockDim.x * threadIdx.y] = threadIdx.x + blockDim.x * threadIdx.y;\n"
    "  __syncthreads();\n"
    "  const index_t hf_visited_n = %d;\n" % (tiles, tiles)
)
open(f"{out}/doc_gen.cu", "w").write(src)
open(f"{out}/doc_identity.cu", "w").write(call.sub(lambda _: identity.replace("const index_t hf_visited_n = %d" % tiles, "volatile int hf_n = %d;\n  const index_t hf_visited_n = hf_n" % tiles), src))
open(f"{out}/doc_constant.cu", "w").write(call.sub(lambda _: identity, src))
