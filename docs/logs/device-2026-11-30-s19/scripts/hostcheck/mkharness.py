import sys,re
src=open(sys.argv[1]).read()
a=src.index("          alignas(16) float s_acc[64];")
b=src.index("          hf_bf16* c_s =")
body=src[a:b]
decl=re.search(r"alignas\(16\) float s_acc_block\[\d+\];", body).group(0)
body=body.replace(decl, decl+" g_blk = s_acc_block; nacc.assign(2, 0);")
print('#include "stubs.h"')
print("static float sa[1<<16], sb[1<<16];")
print("float run(int tile) { const index_t tile_v0 = 0, tile_v1 = 0, m_io = 0; TILE = tile;")
print(body)
print("  if (s_acc[0] != s_acc[63]) fail(\"registers differ\", -1); return s_acc[0]; }")
print('''int main() {
  for (int i = 0; i < (1<<16); ++i) { sa[i] = (float)((i % KBv_) % 3 + 1); sb[i] = 1.0f; }
  KBv = KBv_;
  for (int tile = 0; tile < 3; ++tile) {
    cur_block = -1; done.assign(KBv, 0); released.assign(KBv, 0); pending.clear();
    float got = run(tile); double want = 0;
    for (int k = 0; k < KBv; ++k) want += (k + 1) * (k % 3 + 1);
    if (got != want) { printf("FAIL tile %d: %g != %g\\n", tile, got, want); return 1; }
    for (int k = 0; k < KBv; ++k) if (!released[k]) fail("stage never released", k);
    if (!pending.empty() || !open_g.w.empty()) fail("groups left in flight", -1);
    if (cur_block != KBv - 1) fail("blocks issued", cur_block);
  }
  printf("ok KB=%d\\n", KBv); return 0; }''')
