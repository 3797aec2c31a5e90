#include <hip/hip_runtime.h>

__global__ void axpy_kernel(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

extern "C" int axpy_launch(float a, const float *x, float *y, int n) {
    hipLaunchKernelGGL(axpy_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, a, x, y, n);
    return static_cast<int>(hipGetLastError());
}
