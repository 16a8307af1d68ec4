//! Device helpers, each emitted only when the kernel uses it. No CUDA headers are needed, so
//! the source compiles with NVRTC alone.

use crate::dtype::DType;

pub const CEIL_DIV: &str = "template <typename T>
__device__ __forceinline__ T hf_ceil_div(T a, T b) { return (a + b - 1) / b; }
";

pub const MIN: &str = "template <typename T>
__device__ __forceinline__ T hf_min(T a, T b) { return a < b ? a : b; }
";

/// An index read from data (`gather`, `index_select`), clamped into `[0, n)` in 64 bits (an
/// i64 index beyond the index type clamps rather than wraps).
pub const INDEX_IN: &str = "template <typename T, typename I>
__device__ __forceinline__ T hf_index_in(I v, T n) { long long i = (long long)v; return (T)(i < 0 ? 0 : (i < (long long)n ? i : (long long)n - 1)); }
";

/// The key tiles a CTA of a document-masked attention visits (`kir::VisitedTiles`), called by
/// every thread of the block (a whole number of warps) before the body. Its time is on every
/// block's critical path (no copy starts before the list), so its chain is short: one round of
/// loads, two block barriers. Each warp reads the tile's query ids (queries `q0 ..` of the
/// row's `queries`, at most BQ) itself and reduces their range with shuffles, so no warp waits
/// for another's; it tests its key ids (`tid + r * threads` of the `nk` from `kids`) against
/// that range and marks a tile holding one in its own words of marks (a bit per tile; one
/// store by lane 0 when a warp's 32 ids lie in one tile, else shared `atomicOr`s). A key id
/// outside the queries' range equals none of them, so an unmarked tile is masked whole for
/// every query. After a barrier, warp 0 ORs the warps' marks and lists the marked tiles that
/// also hold a pair with `lower <= j - i <= upper`, in order (a ballot per 32 tiles), in
/// `table`; `table[CAP]` is how many, at least one (tile 0, masked whole, when none is marked:
/// a row with no key ends as `0 / 0`, as without the list). The marks sit after it (CAP / 32
/// words per warp, up to 32 warps). Ids narrower than 32 bits compare as `int`. Ends with a
/// block barrier; returns the count.
const VISITED: &str = "template <typename I, bool NARROW> struct hf_id { using type = I; };
template <typename I> struct hf_id<I, true> { using type = int; };
template <int BQ, int BK, int CAP, typename I>
__device__ int hf_visit_document_tiles(const I* qids, long long q0, long long queries, const I* kids, long long nk, long long upper, long long lower, int* table) {
  using R = typename hf_id<I, (sizeof(I) < 4)>::type;
  constexpr int ROUND = 8, QROUND = (BQ + 31) / 32, WORDS = CAP / 32;
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  const int lane = tid % 32, warp = tid / 32, warps = threads / 32;
  const long long nq = queries - q0 < BQ ? queries - q0 : (long long)BQ;
  const long long tiles = (nk + BK - 1) / BK;
  const int words = (int)((tiles + 31) / 32);
  unsigned* const marks = reinterpret_cast<unsigned*>(table + CAP + 4);
  unsigned* const own = marks + warp * WORDS;
  // Every load of the first round at once: the queries' ids (a repeat of the first one is
  // neutral for their range) and the thread's first ROUND key ids.
  R qx[QROUND];
  #pragma unroll
  for (int r = 0; r < QROUND; ++r) {
    const long long i = lane + 32LL * r;
    qx[r] = nq > 0 ? (R)qids[q0 + (i < nq ? i : 0)] : (R)0;
  }
  R x[ROUND];
  #pragma unroll
  for (int r = 0; r < ROUND; ++r) {
    const long long j = tid + (long long)r * threads;
    x[r] = j < nk ? (R)kids[j] : (R)0;
  }
  for (int w = lane; w < words; w += 32) own[w] = 0u;
  R lo = qx[0], hi = qx[0];
  #pragma unroll
  for (int r = 1; r < QROUND; ++r) {
    lo = qx[r] < lo ? qx[r] : lo;
    hi = qx[r] > hi ? qx[r] : hi;
  }
  #pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    const R a = __shfl_xor_sync(0xffffffffu, lo, d), b = __shfl_xor_sync(0xffffffffu, hi, d);
    lo = a < lo ? a : lo;
    hi = b > hi ? b : hi;
  }
  // The warp's marks are zero before any lane sets one.
  __syncwarp();
  // A warp's 32 ids lie in one tile when BK is a multiple of 32 and rounds start at multiples
  // of 32 (`threads` is).
  for (long long base = 0; base < nk; base += (long long)ROUND * threads) {
    #pragma unroll
    for (int r = 0; r < ROUND; ++r) {
      const long long j = base + tid + (long long)r * threads;
      if (base > 0) x[r] = j < nk ? (R)kids[j] : (R)0;
    }
    #pragma unroll
    for (int r = 0; r < ROUND; ++r) {
      const long long j = base + tid + (long long)r * threads;
      const bool in = nq > 0 && j < nk && lo <= x[r] && x[r] <= hi;
      const long long t = j / BK;
      if (BK % 32 == 0) {
        if (__any_sync(0xffffffffu, in) && lane == 0) own[t / 32] |= 1u << (t % 32);
      } else if (in) {
        atomicOr(&own[t / 32], 1u << (t % 32));
      }
    }
  }
  __syncthreads();
  if (warp == 0) {
    const long long first = q0, last = q0 + nq - 1;
    int n = 0;
    for (int w = 0; w < words; ++w) {
      unsigned word = lane < warps ? marks[lane * WORDS + w] : 0u;
      #pragma unroll
      for (int d = 16; d > 0; d /= 2) word |= __shfl_xor_sync(0xffffffffu, word, d);
      const long long t = 32LL * w + lane;
      const long long end = (t + 1) * BK < nk ? (t + 1) * BK : nk;
      // The band: the tile's first key past the last query by at most `upper`, its last key
      // before the first query by at most `-lower`.
      const bool listed = t < tiles && (word >> lane & 1u) != 0u && t * BK - last <= upper && end - 1 - first >= lower;
      const unsigned ballot = __ballot_sync(0xffffffffu, listed);
      if (listed) table[n + __popc(ballot & ((1u << lane) - 1u))] = (int)t;
      n += __popc(ballot);
    }
    if (lane == 0) {
      if (n == 0) { table[0] = 0; n = 1; }
      table[CAP] = n;
    }
  }
  __syncthreads();
  return table[CAP];
}
";

/// Which helper lists the key tiles a CTA visits (`kir::TileTest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Visited {
    Ids,
    Bounds,
}

/// The key tiles a CTA visits under a mask on indices (`kir::TileTest::Bounds`), called by every
/// thread of the block before the body. Warp 0 classifies 32 key tiles at a time with `kind`
/// (the query tile's first and last query, the key tile's first and last key; 0 where the mask
/// keeps no pair, 2 where it keeps every pair, else 1) and lists, in order, first the tiles of
/// kind 2, then those of kind 1 (a ballot per 32 tiles each), in `table`; `table[CAP]` is how
/// many, at least one (tile 0, masked whole, when none: a row with no key ends as `0 / 0`, as
/// without the list), `table[CAP + 1]` how many of them are of kind 2. No memory is read, so
/// the list costs one block barrier and a few instructions per 32 tiles. Returns the count.
const VISITED_BOUNDS: &str = "template <int BQ, int BK, int CAP, typename F>
__device__ int hf_visit_mask_tiles(long long q0, long long queries, long long nk, F kind, int* table) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (tid < 32) {
    const int lane = tid;
    const long long q1 = (q0 + BQ < queries ? q0 + BQ : queries) - 1;
    const long long tiles = (nk + BK - 1) / BK;
    int n = 0, kept = 0;
    for (int wanted = 2; wanted >= 1; --wanted) {
      for (long long base = 0; base < tiles; base += 32) {
        const long long t = base + lane;
        const long long k0 = t * BK, k1 = ((t + 1) * BK < nk ? (t + 1) * BK : nk) - 1;
        const bool listed = t < tiles && kind(q0, q1, k0, k1) == wanted;
        const unsigned ballot = __ballot_sync(0xffffffffu, listed);
        if (listed) table[n + __popc(ballot & ((1u << lane) - 1u))] = (int)t;
        n += __popc(ballot);
      }
      if (wanted == 2) kept = n;
    }
    if (lane == 0) {
      if (n == 0) { table[0] = 0; n = 1; }
      table[CAP] = n;
      table[CAP + 1] = kept;
    }
  }
  __syncthreads();
  return table[CAP];
}
";

/// Elementwise ops with PyTorch's semantics that are more than one CUDA expression, by the
/// name `Uses::math` records (emitted in this order, each only when used).
pub const MATH: &[(&str, &str)] = &[
    (
        "maximum",
        "// torch.maximum and torch.minimum: a NaN operand gives NaN where fmaxf would return the
// other one. In f32 one PTX max.NaN / min.NaN (sm_80+: FMNMX.NAN); PTX has no f64 form.
// Integers (the block reductions' combines) compare.
__device__ __forceinline__ float hf_maximum(float a, float b) { float r; asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r; }
__device__ __forceinline__ float hf_minimum(float a, float b) { float r; asm(\"min.NaN.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(a), \"f\"(b)); return r; }
__device__ __forceinline__ double hf_maximum(double a, double b) { return isnan(a) || isnan(b) ? a + b : fmax(a, b); }
__device__ __forceinline__ double hf_minimum(double a, double b) { return isnan(a) || isnan(b) ? a + b : fmin(a, b); }
template <typename T> __device__ __forceinline__ T hf_maximum(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T hf_minimum(T a, T b) { return a < b ? a : b; }
",
    ),
    (
        "exp2_ftz",
        "// 2^x with subnormal results flushed to 0: one MUFU.EX2, where exp2f (ex2.approx.f32)
// adds a compare and two multiplies to scale subnormal results.
__device__ __forceinline__ float hf_exp2_ftz(float x) { float r; asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(x)); return r; }
",
    ),
    (
        "exp2_fma",
        "// 2^x on the FMA pipe (FlashAttention-4's software exponential), for the exponentials the
// MUFU has no time for: x = n + f, n = rint(x) (the 1.5 * 2^23 shifter), f in [-1/2, 1/2],
// 2^f by a degree-3 minimax polynomial (relative error 7.5e-5), n added to its exponent bits;
// below 2^-125 (and for -inf) 0. Ten FMA-pipe instructions where exp2 is one MUFU.EX2.
__device__ __forceinline__ float hf_exp2_fma(float x) {
  const float j = x + 12582912.0f;
  const float f = x - (j - 12582912.0f);
  const float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611155f), f, 0.693260968f), f, 0.999928057f);
  const float r = __int_as_float(__float_as_int(p) + (__float_as_int(j) << 23));
  return x < -125.0f ? 0.0f : r;
}
",
    ),
    (
        "tanh_abs",
        "// tanh(x) = 1 - 2 / (e^(2x) + 1): one MUFU.EX2 and one MUFU.RCP, within about 2^-21 of tanh(x)
// (0.76 * 2^-22 with correctly rounded exp2 and reciprocal, measured over [-20, 20]; the two
// approximations add at most about 2^-22); near 0, where tanh(x) ~ x, that is not a relative
// bound. Made only where the value is used in absolute terms (the pass online_softmax: a
// softcap's scores).
__device__ __forceinline__ float hf_tanh_abs(float x) {
  float e, r;
  asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(x * 2.88539008177792681f));
  asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(e + 1.0f));
  return fmaf(-2.0f, r, 1.0f);
}
",
    ),
    (
        "tanh_approx",
        "// tanh(x, approximate=hardware): one MUFU.TANH, relative error at most about 2^-11.
__device__ __forceinline__ float hf_tanh_approx(float x) { float r; asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(r) : \"f\"(x)); return r; }
",
    ),
    (
        "sign",
        "__device__ __forceinline__ float hf_sign(float x) { return (float)((0.0f < x) - (x < 0.0f)); }
__device__ __forceinline__ double hf_sign(double x) { return (double)((0.0 < x) - (x < 0.0)); }
__device__ __forceinline__ int hf_sign(int x) { return (0 < x) - (x < 0); }
",
    ),
    (
        "sign_i64",
        "__device__ __forceinline__ long long hf_sign(long long x) { return (0LL < x) - (x < 0LL); }
",
    ),
    (
        "silu",
        "__device__ __forceinline__ float hf_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ double hf_silu(double x) { return x / (1.0 + exp(-x)); }
",
    ),
    (
        "gelu",
        "// x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2, erfc(z) for z = |x| / sqrt 2 by Numerical
// Recipes' erfcc (a Chebyshev fit, relative error < 1.2e-7 for z >= 0): t = 1 / (1 + z / 2),
// erfc(z) = t exp(P(t) - z^2). One range and two MUFU operations, about 20 instructions where
// torch's 0.5 x (1 + erff(x / sqrt 2)) takes about 27 (erff evaluates both of its ranges and
// selects). Against the float64 result, evaluated in f32 on the host at steps of 3e-5 over
// [-14, 14] (exact rcp and exp2; MUFU's approximations add about 2 ulp): absolute error at most
// 3.9e-7 (torch's form: 4.5e-7), relative 4.2e-7 for x >= 0 (torch's: 1.2e-7), and no
// cancellation in 1 + erf for negative x: relative error 2e-6 down to x = -4 and 1e-5 down to
// x = -10, where torch's form has 5e-4 at x = -4 and no correct digit from x = -6. gelu(-inf)
// is NaN (-inf * 0), as in torch's form and the reference.
__device__ __forceinline__ float hf_gelu(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  float t;
  asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(t) : \"f\"(fmaf(0.5f, z, 1.0f)));
  float p = fmaf(t, 0.17087277f, -0.82215223f);
  p = fmaf(t, p, 1.48851587f);
  p = fmaf(t, p, -1.13520398f);
  p = fmaf(t, p, 0.27886807f);
  p = fmaf(t, p, -0.18628806f);
  p = fmaf(t, p, 0.09678418f);
  p = fmaf(t, p, 0.37409196f);
  p = fmaf(t, p, 1.00002368f);
  p = fmaf(t, p, -1.26551223f);
  float e;  // exp(P - z^2) / 2 = 2^((P - z^2) log2(e) - 1)
  asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(fmaf(fmaf(-z, z, p), 1.44269504088896341f, -1.0f)));
  const float q = t * e;  // erfc(z) / 2
  return x * (x >= 0.0f ? 1.0f - q : q);
}
__device__ __forceinline__ double hf_gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752)); }
",
    ),
    (
        "gelu_tanh",
        "__device__ __forceinline__ float hf_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ double hf_gelu_tanh(double x) {
  return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}
",
    ),
    (
        "softplus",
        "__device__ __forceinline__ float hf_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ double hf_softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }
",
    ),
    (
        "remainder",
        "__device__ __forceinline__ float hf_remainder(float a, float b) {
  float r = fmodf(a, b);
  return r != 0.0f && ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
}
__device__ __forceinline__ double hf_remainder(double a, double b) {
  double r = fmod(a, b);
  return r != 0.0 && ((r < 0.0) != (b < 0.0)) ? r + b : r;
}
__device__ __forceinline__ int hf_remainder(int a, int b) {
  int r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
",
    ),
    (
        "remainder_i64",
        "__device__ __forceinline__ long long hf_remainder(long long a, long long b) {
  long long r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
",
    ),
    (
        "shift",
        "// Shifts by a negative amount or by 32 or more: 0 to the left, the sign to the right.
__device__ __forceinline__ int hf_shl(int a, int b) { return (unsigned)b >= 32u ? 0 : (int)((unsigned)a << b); }
__device__ __forceinline__ int hf_shr(int a, int b) { return (unsigned)b >= 32u ? (a >> 31) : (a >> b); }
",
    ),
    (
        "clamp",
        "// A NaN in x, lo or hi gives NaN (torch.clamp's CUDA kernel with tensor bounds).
__device__ __forceinline__ float hf_clamp(float x, float lo, float hi) { return hf_minimum(hf_maximum(x, lo), hi); }
__device__ __forceinline__ double hf_clamp(double x, double lo, double hi) { return hf_minimum(hf_maximum(x, lo), hi); }
__device__ __forceinline__ int hf_clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
",
    ),
    (
        "clamp_i64",
        "__device__ __forceinline__ long long hf_clamp(long long x, long long lo, long long hi) { return min(max(x, lo), hi); }
",
    ),
    ("philox", crate::fusion::philox::CUDA),
    (
        "lerp",
        "__device__ __forceinline__ float hf_lerp(float a, float b, float w) {
  return fabsf(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}
__device__ __forceinline__ double hf_lerp(double a, double b, double w) {
  return fabs(w) < 0.5 ? a + w * (b - a) : b - (b - a) * (1.0 - w);
}
",
    ),
];

pub const BF16: &str = "// bfloat16 storage; arithmetic happens in float.
struct __align__(2) hf_bf16 { unsigned short bits; };
__device__ __forceinline__ float hf_bf16_to_float(hf_bf16 h) { return __uint_as_float(((unsigned)h.bits) << 16); }
__device__ __forceinline__ hf_bf16 hf_float_to_bf16(float f) {
  hf_bf16 h;
  asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h.bits) : \"f\"(f));
  return h;
}
";

pub const F16: &str = "// IEEE half storage; arithmetic happens in float.
struct __align__(2) hf_f16 { unsigned short bits; };
__device__ __forceinline__ float hf_f16_to_float(hf_f16 h) {
  float f;
  asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h.bits));
  return f;
}
__device__ __forceinline__ hf_f16 hf_float_to_f16(float f) {
  hf_f16 h;
  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h.bits) : \"f\"(f));
  return h;
}
";

pub const FP8: &str =
    "// 8-bit float storage (cuda_fp8.h); arithmetic happens in float. Conversions to e4m3/e5m2
// are torch's: round to nearest even, and beyond the midpoint above the largest finite value
// NaN (e4m3) or an infinity (e5m2). The hardware's conversion saturates, so those are replaced.
#include <cuda_fp8.h>
__device__ __forceinline__ float hf_e4m3_to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
__device__ __forceinline__ float hf_e5m2_to_float(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
__device__ __forceinline__ __nv_fp8_e4m3 hf_float_to_e4m3(float f) {
  __nv_fp8_e4m3 r;
  r.__x = fabsf(f) <= 464.0f ? __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)
                             : (__nv_fp8_storage_t)(signbit(f) ? 0xffu : 0x7fu);
  return r;
}
__device__ __forceinline__ __nv_fp8_e5m2 hf_float_to_e5m2(float f) {
  __nv_fp8_e5m2 r;
  r.__x = isnan(f) ? (__nv_fp8_storage_t)0x7fu
        : fabsf(f) < 61440.0f ? __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2)
                              : (__nv_fp8_storage_t)(signbit(f) ? 0xfcu : 0x7cu);
  return r;
}
";

pub const VECTOR: &str = "// N elements moved as one access of sizeof(T) * N bytes.
template <typename T, int N>
struct alignas(sizeof(T) * N) hf_vec { T v[N]; };
";

/// A load of a fusion input with an L2 eviction policy (`cache_after(x, l2=evict_last)`:
/// `LAST`; `evict_first`: not): `createpolicy.fractional` over the whole line, then
/// `ld.global.L2::cache_hint` of 1 to 16 bytes.
pub const L2_HINT: &str = "// A load with an L2 eviction policy (LAST: evict_last, else evict_first) on the lines it reads.
template <bool LAST, typename T>
__device__ __forceinline__ T hf_ld_l2(const T* p) {
  unsigned long long pol;
  if (LAST) asm(\"createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\" : \"=l\"(pol));
  else asm(\"createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\" : \"=l\"(pol));
  T v;
  if constexpr (sizeof(T) == 16) {
    unsigned* r = reinterpret_cast<unsigned*>(&v);
    asm(\"ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\" : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"l\"(p), \"l\"(pol));
  } else if constexpr (sizeof(T) == 8) {
    unsigned* r = reinterpret_cast<unsigned*>(&v);
    asm(\"ld.global.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;\" : \"=r\"(r[0]), \"=r\"(r[1]) : \"l\"(p), \"l\"(pol));
  } else if constexpr (sizeof(T) == 4) {
    asm(\"ld.global.L2::cache_hint.u32 %0, [%1], %2;\" : \"=r\"(*reinterpret_cast<unsigned*>(&v)) : \"l\"(p), \"l\"(pol));
  } else if constexpr (sizeof(T) == 2) {
    asm(\"ld.global.L2::cache_hint.u16 %0, [%1], %2;\" : \"=h\"(*reinterpret_cast<unsigned short*>(&v)) : \"l\"(p), \"l\"(pol));
  } else {
    static_assert(sizeof(T) == 1, \"a load of 1, 2, 4, 8 or 16 bytes\");
    unsigned short r;
    asm(\"ld.global.L2::cache_hint.u8 %0, [%1], %2;\" : \"=h\"(r) : \"l\"(p), \"l\"(pol));
    *reinterpret_cast<unsigned char*>(&v) = (unsigned char)r;
  }
  return v;
}
";

/// The block reduction's combines beyond `hf_sum` (which [`BLOCK_REDUCE`] defines), by the name
/// `Uses::combines` records (emitted after it, each only when used). `hf_max` and `hf_min` call
/// [`MATH`]'s `maximum` helpers, which `Uses::math` then holds.
pub const COMBINES: &[(&str, &str)] = &[
    (
        "hf_max",
        "struct hf_max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return hf_maximum(a, b); } };
",
    ),
    (
        "hf_min",
        "struct hf_min { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return hf_minimum(a, b); } };
",
    ),
    (
        "hf_prod",
        "struct hf_prod { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a * b; } };
",
    ),
    (
        "hf_any",
        "struct hf_any { __device__ __forceinline__ bool operator()(bool a, bool b) const { return a || b; } };
",
    ),
    (
        "hf_all",
        "struct hf_all { __device__ __forceinline__ bool operator()(bool a, bool b) const { return a && b; } };
",
    ),
];

pub const BLOCK_REDUCE: &str = "struct hf_sum { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };

// Reduces `val` over the threads that differ only in the reduced dims (RX, RY, RZ) and returns
// the result to every one of them. Every thread of the block must call it (it has barriers).
// `scratch` holds one T per thread.
template <bool RX, bool RY, bool RZ, unsigned BAR = 0u, typename T, typename Op>
__device__ __forceinline__ T hf_block_reduce(T val, Op op, T* scratch) {
  const unsigned bx = blockDim.x, by = blockDim.y, bz = blockDim.z;
  if (RX && !RY && !RZ && (bx % 32u == 0u || by * bz == 1u)) {
    // Warp shuffles (the last warp may be partial), then one partial per warp through shared
    // memory; every thread combines the partials of its row: with whole warps by a second
    // shuffle tree over them (lane w holds warp w's partial; five levels where a loop over the
    // warps is a chain of up to 31 dependent combines), then lane 0's result to the warp. Every
    // warp combines the same partials in the same order, so every thread has the same value.
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
    const unsigned warps = (bx + 31u) / 32u;
    const unsigned active = bx - warp * 32u < 32u ? bx - warp * 32u : 32u;
    const unsigned mask = active == 32u ? 0xffffffffu : ((1u << active) - 1u);
#pragma unroll
    for (unsigned offset = 16; offset > 0; offset >>= 1) {
      const T other = __shfl_down_sync(mask, val, offset);
      if (lane + offset < active) val = op(val, other);
    }
    const unsigned row = threadIdx.y + by * threadIdx.z;
    if (lane == 0u) scratch[row * warps + warp] = val;
    hf_bar_sync<BAR>();
    T r = scratch[row * warps + (lane < warps ? lane : 0u)];
    if (bx % 32u == 0u) {
#pragma unroll
      for (unsigned offset = 16; offset > 0; offset >>= 1) {
        const T other = __shfl_down_sync(0xffffffffu, r, offset);
        if (lane + offset < warps) r = op(r, other);
      }
      r = __shfl_sync(0xffffffffu, r, 0);
    } else {
      r = scratch[row * warps];
      for (unsigned w = 1; w < warps; ++w) r = op(r, scratch[row * warps + w]);
    }
    hf_bar_sync<BAR>();
    return r;
  }
  scratch[threadIdx.x + bx * (threadIdx.y + by * threadIdx.z)] = val;
  hf_bar_sync<BAR>();
  const unsigned nx = RX ? bx : 1u, ny = RY ? by : 1u, nz = RZ ? bz : 1u;
  const unsigned x0 = RX ? 0u : threadIdx.x, y0 = RY ? 0u : threadIdx.y, z0 = RZ ? 0u : threadIdx.z;
  T r = scratch[x0 + bx * (y0 + by * z0)];
  for (unsigned z = 0; z < nz; ++z)
    for (unsigned y = 0; y < ny; ++y)
      for (unsigned x = 0; x < nx; ++x)
        if (x + y + z != 0u) r = op(r, scratch[(x0 + x) + bx * ((y0 + y) + by * (z0 + z))]);
  hf_bar_sync<BAR>();
  return r;
}
";

/// Welford statistics across the block ([`crate::kir::Stmt::BlockWelford`]): the same shape
/// as `hf_block_reduce` (warp shuffles, then a partial per warp through the scratch; else one
/// slot per thread). Across the warp each step is Chan's parallel combine of two (mean, m2,
/// count) triples, its weight `b.n / n` by the fast division (`__fdividef`, 2 ulp: a weight in
/// [0, 1], not a statistic, so the mean and m2 keep f32's accuracy) rather than IEEE's, whose
/// refinement and slow-path check would lie on the shuffle tree's dependent chain. Across the
/// warps every thread reads the warps' partials (independent loads) and combines them in two
/// passes: the count and the mean from their sums, then `m2 = sum(m2_w + n_w * (mean_w -
/// mean)^2)`, one division instead of one per warp on a chain. (The slot-per-thread form, for
/// reductions over y or z, combines its slots in order.)
pub const BLOCK_WELFORD: &str = "// Welford statistics of a set of values: their mean, the sum of their squared deviations from
// it (m2) and their count.
struct hf_welford { float mean, m2, n; };
// Chan, Golub and LeVeque's combine of the statistics of two disjoint sets (either may be empty);
// the weight b.n / n in [0, 1] by the fast division (2 ulp).
__device__ __forceinline__ hf_welford hf_welford_combine(hf_welford a, hf_welford b) {
  const float n = a.n + b.n;
  if (n == 0.0f) return a;
  const float delta = b.mean - a.mean, wb = __fdividef(b.n, n);
  return {a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.n * wb, n};
}
// The statistics of `count` disjoint sets at once, in two passes over them: the count and the
// mean from their sums, then m2 = sum(m2_i + n_i * (mean_i - mean)^2) (exact; no set's weight on a
// dependent chain). `at(i)` gives the i-th set's statistics.
template <typename At>
__device__ __forceinline__ hf_welford hf_welford_combine_all(unsigned count, At at) {
  float n = 0.0f, sum = 0.0f;
  for (unsigned i = 0; i < count; ++i) {
    const hf_welford s = at(i);
    n += s.n;
    sum += s.n * s.mean;
  }
  const float mean = n == 0.0f ? 0.0f : sum / n;
  float m2 = 0.0f;
  for (unsigned i = 0; i < count; ++i) {
    const hf_welford s = at(i);
    const float d = s.mean - mean;
    m2 += s.m2 + s.n * d * d;
  }
  return {mean, m2, n};
}
// Every thread gets the combined statistics of the threads that differ only in the reduced
// dims (RX, RY, RZ). Every thread of the block must call it (it has barriers). `scratch` holds
// one hf_welford per thread.
template <bool RX, bool RY, bool RZ, unsigned BAR = 0u>
__device__ __forceinline__ void hf_block_welford(float& mean, float& m2, float& count, hf_welford* scratch) {
  const unsigned bx = blockDim.x, by = blockDim.y, bz = blockDim.z;
  hf_welford val{mean, m2, count};
  hf_welford r;
  if (RX && !RY && !RZ && (bx % 32u == 0u || by * bz == 1u)) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
    const unsigned warps = (bx + 31u) / 32u;
    const unsigned active = bx - warp * 32u < 32u ? bx - warp * 32u : 32u;
    const unsigned mask = active == 32u ? 0xffffffffu : ((1u << active) - 1u);
#pragma unroll
    for (unsigned offset = 16; offset > 0; offset >>= 1) {
      const hf_welford other{__shfl_down_sync(mask, val.mean, offset),
                             __shfl_down_sync(mask, val.m2, offset),
                             __shfl_down_sync(mask, val.n, offset)};
      if (lane + offset < active) val = hf_welford_combine(val, other);
    }
    const unsigned row = threadIdx.y + by * threadIdx.z;
    if (lane == 0u) scratch[row * warps + warp] = val;
    hf_bar_sync<BAR>();
    r = hf_welford_combine_all(warps, [&](unsigned w) { return scratch[row * warps + w]; });
  } else {
    scratch[threadIdx.x + bx * (threadIdx.y + by * threadIdx.z)] = val;
    hf_bar_sync<BAR>();
    const unsigned nx = RX ? bx : 1u, ny = RY ? by : 1u, nz = RZ ? bz : 1u;
    const unsigned x0 = RX ? 0u : threadIdx.x, y0 = RY ? 0u : threadIdx.y, z0 = RZ ? 0u : threadIdx.z;
    r = scratch[x0 + bx * (y0 + by * z0)];
    for (unsigned z = 0; z < nz; ++z)
      for (unsigned y = 0; y < ny; ++y)
        for (unsigned x = 0; x < nx; ++x)
          if (x + y + z != 0u) r = hf_welford_combine(r, scratch[(x0 + x) + bx * ((y0 + y) + by * (z0 + z))]);
  }
  hf_bar_sync<BAR>();
  mean = r.mean;
  m2 = r.m2;
  count = r.n;
}
";

pub const BAR_SYNC: &str =
    "// BAR = 0: the block's barrier; BAR = n: named barrier 1 over the n consumer threads of a
// warp-specialized kernel (the producer warps do not take part).
template <unsigned BAR>
__device__ __forceinline__ void hf_bar_sync() {
  if (BAR == 0u) __syncthreads();
  else asm volatile(\"bar.sync 1, %0;\" :: \"n\"(BAR) : \"memory\");
}
";

pub const GROUP_BAR_SYNC: &str =
    "// A thread group's barrier: named barrier `id` (2 + the group's index) over its N threads.
template <unsigned N>
__device__ __forceinline__ void hf_bar_sync_group(unsigned id) {
  asm volatile(\"bar.sync %0, %1;\" :: \"r\"(id), \"n\"(N) : \"memory\");
}
";

pub const TURN_BAR_ARRIVE: &str =
    "// Ping-pong groups pass their turn: arrive on the next group's barrier without waiting.
template <unsigned N>
__device__ __forceinline__ void hf_bar_arrive_group(unsigned id) {
  asm volatile(\"bar.arrive %0, %1;\" :: \"r\"(id), \"n\"(N) : \"memory\");
}
";

pub const TMA: &str = "// TMA and mbarriers (sm_90). A tensor map is 128 opaque bytes encoded on the host by
// cuTensorMapEncodeTiled and passed by value as a const __grid_constant__ parameter.
struct __align__(64) hf_tensor_map { unsigned long long opaque[16]; };
__device__ __forceinline__ unsigned hf_smem_addr(const void* p) {
  unsigned r;
  asm(\"{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\" : \"=r\"(r) : \"l\"(p));
  return r;
}
__device__ __forceinline__ void hf_mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\" :: \"r\"(hf_smem_addr(bar)), \"r\"(count) : \"memory\");
}
__device__ __forceinline__ void hf_fence_mbarrier_init() {
  asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");
}
// Starts fetching a tensor map's 128 bytes into the TMA unit's descriptor cache, so the first
// copy does not wait for them.
__device__ __forceinline__ void hf_prefetch_tensormap(const hf_tensor_map* map) {
  asm volatile(\"prefetch.tensormap [%0];\" :: \"l\"(map) : \"memory\");
}
__device__ __forceinline__ void hf_mbarrier_inval(unsigned long long* bar) {
  asm volatile(\"mbarrier.inval.shared::cta.b64 [%0];\" :: \"r\"(hf_smem_addr(bar)) : \"memory\");
}
__device__ __forceinline__ void hf_mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(hf_smem_addr(bar)), \"r\"(bytes) : \"memory\");
}
// Announces more bytes without arriving (a copy issued under a condition).
__device__ __forceinline__ void hf_mbarrier_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile(\"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\" :: \"r\"(hf_smem_addr(bar)), \"r\"(bytes) : \"memory\");
}
__device__ __forceinline__ void hf_mbarrier_arrive(unsigned long long* bar) {
  asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\" :: \"r\"(hf_smem_addr(bar)) : \"memory\");
}
// Lane 0 arrives once for its warp, after every lane of the (converged) warp is done.
__device__ __forceinline__ void hf_mbarrier_arrive_per_warp(unsigned long long* bar) {
  __syncwarp();
  unsigned lane;
  asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane));
  if (lane == 0) hf_mbarrier_arrive(bar);
}
// elect.sync: true on exactly one lane; the whole warp must execute it.
__device__ __forceinline__ bool hf_elect_one() {
  unsigned elected;
  asm volatile(\"{ .reg .pred p; elect.sync _|p, 0xffffffff; selp.u32 %0, 1, 0, p; }\" : \"=r\"(elected));
  return elected != 0;
}
// Every thread waits until the phase with this parity has completed.
__device__ __forceinline__ void hf_mbarrier_wait(unsigned long long* bar, unsigned parity) {
  const unsigned addr = hf_smem_addr(bar);
  unsigned done;
  do {
    asm volatile(\"{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\"
                 : \"=r\"(done) : \"r\"(addr), \"r\"(parity) : \"memory\");
  } while (!done);
}
// One contiguous run of `bytes` (a multiple of 16, 16-byte aligned) from global to shared memory.
__device__ __forceinline__ void hf_bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(src), \"r\"(bytes), \"r\"(hf_smem_addr(bar)) : \"memory\");
}
// One box of a tensor map at element coordinates (innermost first) to shared memory.
__device__ __forceinline__ void hf_tma_load_1d(void* dst, const hf_tensor_map* map, int c0, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)), \"r\"(c0) : \"memory\");
}
__device__ __forceinline__ void hf_tma_load_2d(void* dst, const hf_tensor_map* map, int c0, int c1, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)), \"r\"(c0), \"r\"(c1) : \"memory\");
}
__device__ __forceinline__ void hf_tma_load_3d(void* dst, const hf_tensor_map* map, int c0, int c1, int c2, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)), \"r\"(c0), \"r\"(c1), \"r\"(c2) : \"memory\");
}
__device__ __forceinline__ void hf_tma_load_4d(void* dst, const hf_tensor_map* map, int c0, int c1, int c2, int c3, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3) : \"memory\");
}
__device__ __forceinline__ void hf_tma_load_5d(void* dst, const hf_tensor_map* map, int c0, int c1, int c2, int c3, int c4, unsigned long long* bar) {
  asm volatile(\"cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\"
               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(c4) : \"memory\");
}
";

pub const CLUSTER: &str = "// Thread-block clusters (sm_90): the CTA's rank in its cluster, the cluster barrier (every
// thread of every CTA), and arrivals on the same mbarrier of a peer CTA (its shared::cluster
// address from mapa). The arrive is CTA-scoped release, as CUTLASS's ClusterBarrier::arrive:
// it only releases reads that wgmma.wait_group already completed; a cluster-scoped release
// compiles to MEMBAR.ALL.GPU before every arrival (measured: half the throughput).
__device__ __forceinline__ unsigned hf_cluster_ctarank() {
  unsigned r;
  asm volatile(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(r));
  return r;
}
__device__ __forceinline__ void hf_cluster_sync() {
  asm volatile(\"barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;\" ::: \"memory\");
}
__device__ __forceinline__ void hf_mbarrier_arrive_on(unsigned long long* bar, unsigned cta) {
  asm volatile(\"{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [remote]; }\"
               :: \"r\"(hf_smem_addr(bar)), \"r\"(cta) : \"memory\");
}
// Every thread arrives on the barrier of each of the cluster's `ctas` CTAs.
__device__ __forceinline__ void hf_mbarrier_arrive_cluster(unsigned long long* bar, unsigned ctas) {
  for (unsigned r = 0; r < ctas; ++r) hf_mbarrier_arrive_on(bar, r);
}
// Each warp arrives once on the barrier of each of the `ctas` CTAs (lane r on CTA r's), after
// every lane of the (converged) warp is done.
__device__ __forceinline__ void hf_mbarrier_arrive_cluster_per_warp(unsigned long long* bar, unsigned ctas) {
  __syncwarp();
  unsigned lane;
  asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane));
  if (lane < ctas) hf_mbarrier_arrive_on(bar, lane);
}
";

/// `hf_tma_load_{rank}d_multicast`: one box (a slice of a tile every CTA of the cluster loads)
/// to the same shared-memory offset of each CTA in `mask`, completing on the same barrier of each.
pub fn tma_multicast_function(rank: usize) -> String {
    let params: String = (0..rank).map(|i| format!("int c{i}, ")).collect();
    let slots: Vec<String> = (0..rank).map(|i| format!("%{}", i + 3)).collect();
    let args: String = (0..rank).map(|i| format!(", \"r\"(c{i})")).collect();
    format!(
        "__device__ __forceinline__ void hf_tma_load_{rank}d_multicast(void* dst, const hf_tensor_map* map, {params}unsigned long long* bar, unsigned short mask) {{\n  asm volatile(\"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {{{}}}], [%2], %{};\"\n               :: \"r\"(hf_smem_addr(dst)), \"l\"(map), \"r\"(hf_smem_addr(bar)){args}, \"h\"(mask) : \"memory\");\n}}\n",
        slots.join(", "),
        rank + 3
    )
}

pub const TMA_STORE: &str = "// TMA stores (shared to global, bulk async-groups) and the async-proxy fence.
__device__ __forceinline__ void hf_tma_store_1d(const hf_tensor_map* map, int c0, const void* src) {
  asm volatile(\"cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];\"
               :: \"l\"(map), \"r\"(hf_smem_addr(src)), \"r\"(c0) : \"memory\");
}
__device__ __forceinline__ void hf_tma_store_2d(const hf_tensor_map* map, int c0, int c1, const void* src) {
  asm volatile(\"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\"
               :: \"l\"(map), \"r\"(hf_smem_addr(src)), \"r\"(c0), \"r\"(c1) : \"memory\");
}
__device__ __forceinline__ void hf_tma_store_3d(const hf_tensor_map* map, int c0, int c1, int c2, const void* src) {
  asm volatile(\"cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\"
               :: \"l\"(map), \"r\"(hf_smem_addr(src)), \"r\"(c0), \"r\"(c1), \"r\"(c2) : \"memory\");
}
__device__ __forceinline__ void hf_tma_store_4d(const hf_tensor_map* map, int c0, int c1, int c2, int c3, const void* src) {
  asm volatile(\"cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\"
               :: \"l\"(map), \"r\"(hf_smem_addr(src)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3) : \"memory\");
}
__device__ __forceinline__ void hf_tma_store_5d(const hf_tensor_map* map, int c0, int c1, int c2, int c3, int c4, const void* src) {
  asm volatile(\"cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\"
               :: \"l\"(map), \"r\"(hf_smem_addr(src)), \"r\"(c0), \"r\"(c1), \"r\"(c2), \"r\"(c3), \"r\"(c4) : \"memory\");
}
__device__ __forceinline__ void hf_bulk_commit_group() {
  asm volatile(\"cp.async.bulk.commit_group;\" ::: \"memory\");
}
// Waits until at most N bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void hf_bulk_wait_group_read() {
  asm volatile(\"cp.async.bulk.wait_group.read %0;\" :: \"n\"(N) : \"memory\");
}
// Orders this thread's generic shared-memory writes before later async-proxy reads.
__device__ __forceinline__ void hf_fence_proxy_async() {
  asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");
}
";

pub const STMATRIX: &str = "// The warp stores four 8 x 8 matrices of 16-bit values to shared memory: `src` holds this
// lane's two values of each (adjacent columns), `dst` is the 16-byte row this lane addresses
// (lanes 8q..8q+7 give the rows of matrix q).
__device__ __forceinline__ void hf_stmatrix_x4(void* dst, const void* src) {
  const unsigned* r = reinterpret_cast<const unsigned*>(src);
  asm volatile(\"stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\"
               :: \"r\"(hf_smem_addr(dst)), \"r\"(r[0]), \"r\"(r[1]), \"r\"(r[2]), \"r\"(r[3]) : \"memory\");
}
";

pub const STREAM_K: &str = "// Stream-K: slot `cta` holds R / 4 runs of T float4s, run i the threads' registers 4i..4i+3.
template <int R, int T>
__device__ __forceinline__ void hf_sk_store(float* ws, long long cta, const float* a, unsigned t) {
  float4* w = reinterpret_cast<float4*>(ws) + cta * (R / 4) * T + t;
  #pragma unroll
  for (int i = 0; i < R / 4; ++i) w[i * T] = make_float4(a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]);
}
template <int R, int T>
__device__ __forceinline__ void hf_sk_add(const float* ws, long long cta, float* a, unsigned t) {
  const float4* w = reinterpret_cast<const float4*>(ws) + cta * (R / 4) * T + t;
  #pragma unroll
  for (int i = 0; i < R / 4; ++i) {
    const float4 v = __ldcg(w + i * T);
    a[4 * i] += v.x; a[4 * i + 1] += v.y; a[4 * i + 2] += v.z; a[4 * i + 3] += v.w;
  }
}
__device__ __forceinline__ void hf_sk_raise(unsigned* f) {
  asm volatile(\"st.release.gpu.global.u32 [%0], 1;\" :: \"l\"(f) : \"memory\");
}
__device__ __forceinline__ void hf_sk_wait(unsigned* f) {
  unsigned v;
  do asm volatile(\"ld.acquire.gpu.global.u32 %0, [%1];\" : \"=r\"(v) : \"l\"(f) : \"memory\"); while (v == 0);
  asm volatile(\"st.relaxed.gpu.global.u32 [%0], 0;\" :: \"l\"(f) : \"memory\");
}
";

pub const WGMMA: &str = "// Tensor cores (wgmma, sm_90a). A shared-memory matrix descriptor: the operand's start
// address (bits 0..13, in 16-byte units) over the constant LBO, SBO and swizzle bits.
__device__ __forceinline__ unsigned long long hf_wgmma_desc(const void* tile, unsigned long long bits) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(tile);
  return bits | (unsigned long long)((a & 0x3FFFFu) >> 4);
}
__device__ __forceinline__ void hf_wgmma_fence() { asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\"); }
__device__ __forceinline__ void hf_wgmma_commit() { asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\"); }
template <int N>
__device__ __forceinline__ void hf_wgmma_wait() { asm volatile(\"wgmma.wait_group.sync.aligned %0;\" :: \"n\"(N) : \"memory\"); }
";

/// One wgmma shape a kernel issues: N, A's and B's types, whether A and B are transposed
/// (MN-major; 16-bit types only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WgmmaShape {
    pub n: i64,
    pub a: DType,
    pub b: DType,
    pub trans_a: bool,
    pub trans_b: bool,
    /// A from registers (the RS form, 16-bit types only; `trans_a` is then false).
    pub a_registers: bool,
}

impl WgmmaShape {
    /// The instruction's K (`target::wgmma_k` of the operand type).
    fn k(&self) -> i64 {
        crate::target::wgmma_k(self.a).expect("a wgmma operand type")
    }

    /// 8-bit operands: PTX names both types and has no transpose immediates.
    fn eight_bit(&self) -> bool {
        !crate::target::wgmma_transposable(self.a)
    }
}

/// A wgmma operand type as PTX spells it.
fn wgmma_ptx_type(t: DType) -> &'static str {
    match t {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F8E4M3 => "e4m3",
        DType::F8E5M2 => "e5m2",
        other => unreachable!("{other} is not a wgmma operand type (target::wgmma_input)"),
    }
}

/// The name of the device function issuing one `wgmma.mma_async.m64nNkK` of `shape` with an
/// f32 accumulator: `hf_wgmma_m64n256k16_bf16_nt` (16-bit: the operand type and A's and B's
/// layouts) or `hf_wgmma_m64n256k32_e4m3_e5m2` (8-bit: A's and B's types, both K-major).
pub fn wgmma_name(shape: &WgmmaShape) -> String {
    let (n, k, a, b) = (
        shape.n,
        shape.k(),
        wgmma_ptx_type(shape.a),
        wgmma_ptx_type(shape.b),
    );
    if shape.eight_bit() {
        format!("hf_wgmma_m64n{n}k{k}_{a}_{b}")
    } else {
        format!(
            "hf_wgmma_m64n{n}k{k}_{a}_{}{}",
            if shape.a_registers {
                'r'
            } else if shape.trans_a {
                't'
            } else {
                'n'
            },
            if shape.trans_b { 't' } else { 'n' }
        )
    }
}

/// The device function [`wgmma_name`] names: N / 2 accumulator registers bound as `+f`
/// operands (the array is indexed by constants only, so they stay registers), both operands
/// through descriptors, `scale-d` from a run-time flag. The transpose immediates are written
/// for 16-bit types only (PTX has none for 8-bit ones).
pub fn wgmma_function(shape: &WgmmaShape) -> String {
    if shape.a_registers {
        return wgmma_rs_function(shape);
    }
    let (n, k, a, b) = (
        shape.n,
        shape.k(),
        wgmma_ptx_type(shape.a),
        wgmma_ptx_type(shape.b),
    );
    let regs = n / 2;
    let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let transposes = if shape.eight_bit() {
        String::new()
    } else {
        format!(", {}, {}", u8::from(shape.trans_a), u8::from(shape.trans_b))
    };
    format!(
        "__device__ __forceinline__ void {name}(float* d, unsigned long long a, unsigned long long b, int accumulate) {{
  asm volatile(
      \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n\"
      \"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{a}.{b} {{{d}}}, %{da}, %{db}, p, 1, 1{transposes};\\n}}\\n\"
      : {outs}
      : \"l\"(a), \"l\"(b), \"r\"(accumulate));
}}
",
        name = wgmma_name(shape),
        acc = regs + 2,
        da = regs,
        db = regs + 1,
        d = d.join(", "),
        outs = outs.join(", "),
    )
}

/// The RS form of [`wgmma_function`]: A is the thread's eight 16-bit values `a[0..8]` (a
/// register fragment, `target::fragment_a_row_col`), read in pairs as the four `.b32`
/// registers the instruction takes (the lower column in the low half: the array's order on a
/// little-endian GPU); B through its descriptor. PTX's RS form has no transpose for A.
/// The pairs are read as 32-bit words, not packed with shifts and ors: packing code in the
/// helper sits after the group's `wgmma.fence` in PTX, and ptxas then injects a
/// `warpgroup.arrive` before each wgmma (its info C7519), which splits the unrolled loop's
/// wgmmas into one group each; read as words, the conversion that writes the fragment comes
/// before the fence and the wgmmas stay one group, so `wait_group 1` after them leaves the
/// whole product in flight (online_softmax's `overlap=products`).
fn wgmma_rs_function(shape: &WgmmaShape) -> String {
    let (n, k, t) = (shape.n, shape.k(), wgmma_ptx_type(shape.a));
    let storage = if shape.a == DType::BF16 {
        "hf_bf16"
    } else {
        "hf_f16"
    };
    let regs = n / 2;
    let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let a: Vec<String> = (0..4).map(|i| format!("%{}", regs + i)).collect();
    let packs: Vec<String> = (0..4)
        .map(|i| format!("  const unsigned a{i} = reinterpret_cast<const unsigned*>(a)[{i}];\n"))
        .collect();
    format!(
        "__device__ __forceinline__ void {name}(float* d, const {storage}* a, unsigned long long b, int accumulate) {{
{packs}  asm volatile(
      \"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{acc}, 0;\\n\"
      \"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{t}.{t} {{{d}}}, {{{a}}}, %{db}, p, 1, 1, {trans_b};\\n}}\\n\"
      : {outs}
      : \"r\"(a0), \"r\"(a1), \"r\"(a2), \"r\"(a3), \"l\"(b), \"r\"(accumulate));
}}
",
        name = wgmma_name(shape),
        packs = packs.concat(),
        acc = regs + 5,
        db = regs + 4,
        d = d.join(", "),
        a = a.join(", "),
        outs = outs.join(", "),
        trans_b = u8::from(shape.trans_b),
    )
}

/// The helpers a kernel's code uses, noted while it is emitted: the prelude holds those only.
#[derive(Default)]
pub(super) struct Uses {
    pub(super) ceil_div: bool,
    pub(super) min: bool,
    /// An index read from data (`hf_index_in`).
    pub(super) index_in: bool,
    /// The key tiles a CTA visits: by ids ([`VISITED`]) or by bounds ([`VISITED_BOUNDS`]).
    pub(super) visited: Option<Visited>,
    pub(super) bf16: bool,
    pub(super) f16: bool,
    /// 8-bit floats (`cuda_fp8.h` and the conversions of [`FP8`]).
    pub(super) fp8: bool,
    /// The elementwise helpers of [`MATH`] used, by name.
    pub(super) math: std::collections::BTreeSet<&'static str>,
    pub(super) vector: bool,
    /// Loads of an input with an L2 policy ([`L2_HINT`]).
    pub(super) l2_hint: bool,
    pub(super) block_reduce: bool,
    /// Welford statistics combined across the block ([`BLOCK_WELFORD`]).
    pub(super) block_welford: bool,
    /// The combines of [`COMBINES`] the block reductions use, by name.
    pub(super) combines: std::collections::BTreeSet<&'static str>,
    pub(super) tma: bool,
    pub(super) tma_store: bool,
    /// The warp index (`hf_warp`) is read.
    pub(super) warp: bool,
    /// Consumer-only (named) barriers.
    pub(super) named_barrier: bool,
    /// Thread groups' barriers (`hf_bar_sync_group`).
    pub(super) group_barrier: bool,
    /// Ping-pong groups pass turns (`bar.arrive` on a group barrier).
    pub(super) turn_barrier: bool,
    /// Tensor-core helpers, and each wgmma shape issued (N, input type, transposed A, B).
    pub(super) wgmma: bool,
    pub(super) wgmma_shapes: std::collections::BTreeSet<WgmmaShape>,
    /// `stmatrix` (register fragments to shared memory).
    pub(super) stmatrix: bool,
    /// Cluster barriers and arrivals on peers' mbarriers; the ranks of multicast TMA loads.
    pub(super) cluster: bool,
    pub(super) multicast_ranks: std::collections::BTreeSet<usize>,
    /// Stream-K's hand-over of partial sums.
    pub(super) stream_k: bool,
    /// Grid reductions (`hf_grid_reduce`, after the block reduction it calls).
    pub(super) grid_reduce: bool,
    /// A warp-specialized kernel's grid reductions over its consumers
    /// (`grid::CONSUMERS_PRELUDE`).
    pub(super) grid_reduce_consumers: bool,
    /// Split-K's combine of a product's fragment (`grid::SPLIT_K_PRELUDE`).
    pub(super) split_k: bool,
    /// The clock probe (`CompileOptions::clock_probe`; written only with its feature).
    #[cfg_attr(not(feature = "clock-probe"), allow(dead_code))]
    pub(super) clock_probe: bool,
}

impl Uses {
    /// Appends the prelude of every helper used (`tensor_maps`: the kernel takes tensor maps).
    pub(super) fn write_prelude(&self, tensor_maps: bool, src: &mut String) {
        if self.ceil_div {
            src.push('\n');
            src.push_str(CEIL_DIV);
        }
        if self.min {
            src.push('\n');
            src.push_str(MIN);
        }
        if let Some(v) = self.visited {
            src.push('\n');
            src.push_str(match v {
                Visited::Ids => VISITED,
                Visited::Bounds => VISITED_BOUNDS,
            });
        }
        if self.index_in {
            src.push('\n');
            src.push_str(INDEX_IN);
        }
        if !self.math.is_empty() {
            src.push_str("\n// Elementwise ops as PyTorch defines them.\n");
            for (name, text) in MATH {
                if self.math.contains(name) {
                    src.push_str(text);
                }
            }
        }
        if self.bf16 {
            src.push('\n');
            src.push_str(BF16);
        }
        if self.f16 {
            src.push('\n');
            src.push_str(F16);
        }
        if self.fp8 {
            src.push('\n');
            src.push_str(FP8);
        }
        if self.vector {
            src.push('\n');
            src.push_str(VECTOR);
        }
        if self.l2_hint {
            src.push('\n');
            src.push_str(L2_HINT);
        }
        if self.block_reduce || self.block_welford || self.named_barrier {
            src.push('\n');
            src.push_str(BAR_SYNC);
        }
        if self.group_barrier {
            src.push('\n');
            src.push_str(GROUP_BAR_SYNC);
        }
        if self.turn_barrier {
            src.push_str(TURN_BAR_ARRIVE);
        }
        if self.block_reduce {
            src.push('\n');
            src.push_str(BLOCK_REDUCE);
            for (name, text) in COMBINES {
                if self.combines.contains(name) {
                    src.push_str(text);
                }
            }
        }
        if self.block_welford {
            src.push('\n');
            src.push_str(BLOCK_WELFORD);
        }
        if self.grid_reduce && !self.grid_reduce_consumers {
            src.push('\n');
            src.push_str(super::grid::PRELUDE);
        }
        if self.grid_reduce_consumers {
            src.push('\n');
            src.push_str(super::grid::CONSUMERS_PRELUDE);
        }
        if self.split_k {
            src.push('\n');
            src.push_str(super::grid::SPLIT_K_PRELUDE);
        }
        if self.tma || tensor_maps {
            src.push('\n');
            src.push_str(TMA);
        }
        if self.cluster {
            src.push('\n');
            src.push_str(CLUSTER);
            for &rank in &self.multicast_ranks {
                src.push_str(&tma_multicast_function(rank));
            }
        }
        if self.tma_store {
            src.push('\n');
            src.push_str(TMA_STORE);
        }
        if self.stmatrix {
            src.push('\n');
            src.push_str(STMATRIX);
        }
        if self.stream_k {
            src.push('\n');
            src.push_str(STREAM_K);
        }
        if self.wgmma {
            src.push('\n');
            src.push_str(WGMMA);
            for shape in &self.wgmma_shapes {
                src.push_str(&wgmma_function(shape));
            }
        }
        #[cfg(feature = "clock-probe")]
        if self.clock_probe {
            src.push('\n');
            src.push_str(super::clock_probe::PRELUDE);
        }
    }
}
