#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <deque>
typedef long long index_t;
template <typename T> T hf_ceil_div(T a, T b) { return (a + b - 1) / b; }
template <typename T> T hf_min(T a, T b) { return a < b ? a : b; }
typedef unsigned char __nv_fp8_e4m3;
struct { unsigned x, y, z; } threadIdx = {0, 0, 0};
static unsigned char hf_smem[200000];
static unsigned long long a_s_b_s_full[4], a_s_b_s_empty[4];
static float* g_blk;            // s_acc_block base
static int KBv, TILE;
static int cur_block = -1;      // the block whose full barrier was waited for last
static std::vector<int> done;   // per block: group completed
static std::vector<int> released, promoted_rel;
struct Grp { std::vector<std::pair<int,int>> w; }; // (half, block)
static Grp open_g; static std::deque<Grp> pending;
static int stage_of(int k) { return (int)((TILE * (long long)KBv + k) % 4); }
static void fail(const char* m, int k) { printf("FAIL %s (block %d)\n", m, k); exit(1); }
void hf_mbarrier_wait(unsigned long long* bar, unsigned parity) {
  cur_block++;
  if (bar - a_s_b_s_full != stage_of(cur_block)) fail("full barrier of the wrong stage", cur_block);
  if (parity != (unsigned)(((TILE * (long long)KBv + cur_block) / 4) % 2)) fail("parity", cur_block);
}
void hf_wgmma_fence() {}
unsigned long long hf_wgmma_desc(const void*, unsigned long long) { return 0; }
static std::vector<int> nacc; // per half: wgmmas since accumulate=0
void hf_wgmma_m64n128k32_e4m3_e4m3(float* d, unsigned long long, unsigned long long, int accumulate) {
  int half = (int)((d - g_blk) / 64);
  if ((d - g_blk) % 64) fail("accumulator not at a half", cur_block);
  if (!accumulate) nacc[half] = 0;
  nacc[half]++;
  for (int r = 0; r < 64; ++r) d[r] = NAN;  // in flight: unreadable
  open_g.w.push_back({half, cur_block});
}
void hf_wgmma_commit() { pending.push_back(open_g); open_g = Grp(); }
static void complete(Grp& g) {
  for (auto& p : g.w) {
    if (nacc[p.first] != 4) fail("block accumulator not 4 wgmmas from a reset", p.second);
    for (int r = 0; r < 64; ++r) g_blk[p.first * 64 + r] = (float)(p.second + 1);
    done[p.second] = 1;
  }
}
template <int N> void hf_wgmma_wait() { while ((int)pending.size() > N) { complete(pending.front()); pending.pop_front(); } }
void hf_mbarrier_arrive_per_warp(unsigned long long* bar) {
  int s = (int)(bar - a_s_b_s_empty);
  // the oldest unreleased block must be this stage's and complete
  int k = 0; while (k < KBv && released[k]) ++k;
  if (k == KBv) fail("release past the last block", k);
  if (stage_of(k) != s) fail("released the wrong stage", k);
  if (!done[k]) fail("stage released before its group completed", k);
  released[k] = 1;
}
