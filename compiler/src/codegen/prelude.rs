//! Device helpers, each emitted only when the kernel uses it. No CUDA headers are needed, so
//! the source compiles with NVRTC alone.

pub const CEIL_DIV: &str = "template <typename T>
__device__ __forceinline__ T hf_ceil_div(T a, T b) { return (a + b - 1) / b; }
";

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

pub const VECTOR: &str = "// N elements moved as one access of sizeof(T) * N bytes.
template <typename T, int N>
struct alignas(sizeof(T) * N) hf_vec { T v[N]; };
";

pub const BLOCK_REDUCE: &str = "struct hf_sum { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct hf_max { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; } };
struct hf_min { template <typename T> __device__ __forceinline__ T operator()(T a, T b) const { return a < b ? a : b; } };

// Reduces `val` over the threads that differ only in the reduced dims (RX, RY, RZ) and returns
// the result to every one of them. Every thread of the block must call it (it has barriers).
// `scratch` holds one T per thread.
template <bool RX, bool RY, bool RZ, typename T, typename Op>
__device__ __forceinline__ T hf_block_reduce(T val, Op op, T* scratch) {
  const unsigned bx = blockDim.x, by = blockDim.y, bz = blockDim.z;
  if (RX && !RY && !RZ && (bx % 32u == 0u || by * bz == 1u)) {
    // Warp shuffles (the last warp may be partial), then one partial per warp through shared
    // memory; every thread combines the partials of its row.
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
    __syncthreads();
    T r = scratch[row * warps];
    for (unsigned w = 1; w < warps; ++w) r = op(r, scratch[row * warps + w]);
    __syncthreads();
    return r;
  }
  scratch[threadIdx.x + bx * (threadIdx.y + by * threadIdx.z)] = val;
  __syncthreads();
  const unsigned nx = RX ? bx : 1u, ny = RY ? by : 1u, nz = RZ ? bz : 1u;
  const unsigned x0 = RX ? 0u : threadIdx.x, y0 = RY ? 0u : threadIdx.y, z0 = RZ ? 0u : threadIdx.z;
  T r = scratch[x0 + bx * (y0 + by * z0)];
  for (unsigned z = 0; z < nz; ++z)
    for (unsigned y = 0; y < ny; ++y)
      for (unsigned x = 0; x < nx; ++x)
        if (x + y + z != 0u) r = op(r, scratch[(x0 + x) + bx * ((y0 + y) + by * (z0 + z))]);
  __syncthreads();
  return r;
}
";
