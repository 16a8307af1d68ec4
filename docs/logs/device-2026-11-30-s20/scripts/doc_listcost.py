"""Hand edits of the document mask's kernel (session 20): what a list made before the kernel
would save.

Reads the kernel `hopfuse compile examples/auto/attention_document.hf --size
B=128,S=2048,T=2048 --index i32` printed (argv[1]) and writes, into the directory argv[2]:
- doc_gen.cu: the kernel as generated (the list made by every block: hf_visit_document_tiles);
- doc_constant.cu: no list, every tile in order, the count a constant (session 19's edit);
- doc_identity.cu: as doc_constant.cu, the count a run-time value (session 19's edit);
- doc_l2list.cu: what the attention kernel would do with a list made by a kernel before it:
  warp 0 reads one int per key tile from global memory (here each tile's first key id: one
  round trip, as a row of a precomputed list would be), lists the tiles by a ballot (every
  tile: the read value only feeds the test), writes the list and its count, one block barrier.
  Exact only where every tile meets, as with the runner's random ids.
Each edit keeps the line after the call (session 20's `__builtin_assume(hf_visited_n >= 1)`).
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
l2list = (
    "  if (threadIdx.y == 0 && threadIdx.x < 32) {\n"
    "    const int lane = threadIdx.x;\n"
    "    const int x = lane < %d ? __ldg(&doc_k[b * 2048 + lane * 128]) : (-0x7fffffff - 1);\n"
    "    const unsigned ballot = __ballot_sync(0xffffffffu, x != (-0x7fffffff - 1));\n"
    "    if (x != (-0x7fffffff - 1)) hf_visited[__popc(ballot & ((1u << lane) - 1u))] = lane;\n"
    "    if (lane == 0) hf_visited[1024] = __popc(ballot);\n"
    "  }\n"
    "  __syncthreads();\n"
    "  const index_t hf_visited_n = hf_visited[1024];\n" % tiles
)
open(f"{out}/doc_gen.cu", "w").write(src)
open(f"{out}/doc_identity.cu", "w").write(call.sub(lambda _: identity.replace("const index_t hf_visited_n = %d" % tiles, "volatile int hf_n = %d;\n  const index_t hf_visited_n = hf_n" % tiles), src))
open(f"{out}/doc_constant.cu", "w").write(call.sub(lambda _: identity, src))
open(f"{out}/doc_l2list.cu", "w").write(call.sub(lambda _: l2list, src))
