#include <hip/hip_runtime.h>
#include "fixture_torch.h"

__global__ void scale_kernel(float* data, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

extern "C" int fixture_torch_scale(float* data, int n, float factor) {
  hipLaunchKernelGGL(scale_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, data, n, factor);
  return static_cast<int>(hipGetLastError());
}
