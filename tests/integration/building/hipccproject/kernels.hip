#include <hip/hip_runtime.h>

__global__ void scale(float* x, float by) { x[threadIdx.x] *= by; }

extern "C" int scale_launch(float* x, float by) {
  hipLaunchKernelGGL(scale, dim3(1), dim3(64), 0, 0, x, by);
  return 0;
}
