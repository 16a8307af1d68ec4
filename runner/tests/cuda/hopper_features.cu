// NVRTC smoke test: the features generated kernels rely on, built for sm_90a.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" __global__ void __launch_bounds__(128, 1)
hopper_features(__nv_bfloat16* __restrict__ out, const __half* __restrict__ in, long long n) {
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem);
    float* stage = reinterpret_cast<float*>(smem + 16);
    unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar_addr), "r"(1));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    unsigned is_elected = 0;
    asm volatile(
        "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(is_elected));
    if (threadIdx.x < 32 && is_elected) {
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar_addr) : "memory");
    }
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done)
            : "r"(bar_addr), "r"(0)
            : "memory");
    }
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = i < n ? __half2float(in[i]) : 0.0f;
    __syncthreads();
    if (i < n) out[i] = __float2bfloat16(stage[blockDim.x - 1 - threadIdx.x] * 2.0f);
    if (threadIdx.x == 0) asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(bar_addr) : "memory");
}
