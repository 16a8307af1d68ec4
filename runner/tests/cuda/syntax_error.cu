// Does not compile: nvrtc-check must fail with the NVRTC log.
extern "C" __global__ void syntax_error(float* y) {
    y[threadIdx.x] = undefined_name;
}
