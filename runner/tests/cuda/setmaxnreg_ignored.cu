// Builds, but ptxas ignores setmaxnreg (C7508, printed as "ptxas info ... Potential Performance
// Loss"): without __launch_bounds__(threads, 1) the register count at entry is unknown.
// nvrtc-check must fail.
extern "C" __global__ void __launch_bounds__(384) setmaxnreg_ignored(float* y, const float* x) {
    float acc = 0.0f;
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
#pragma unroll
        for (int j = 0; j < 64; ++j) acc += x[j * 1024 + threadIdx.x] * x[j];
    }
    y[threadIdx.x] = acc;
}
