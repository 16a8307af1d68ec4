// Compiles, but NVRTC warns (#177-D: declared but never referenced): nvrtc-check must fail.
extern "C" __global__ void unused_variable(float* y, const float* x, int n) {
    int unused = 42;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
