// A header that only the ROCm tree's sysdeps include folder has (as TheRock ships libdrm's).
#include <rb_sysdeps_probe.h>
#include <hip/hip_runtime.h>

__global__ void scale_kernel(float* x, long n) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= RB_SYSDEPS_PROBE_SCALE;
}

extern "C" void launch_scale(float* x, long n) {
  hipLaunchKernelGGL(scale_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, x, n);
}
