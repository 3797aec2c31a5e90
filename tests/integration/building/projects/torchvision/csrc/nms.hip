#include <hip/hip_runtime.h>
#include "fixture_torch.h"

__global__ void nms_kernel(float* scores, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && scores[i] < 0.5f) scores[i] = 0.0f;
}

extern "C" int fixture_vision_nms(float* scores, int n) {
  hipLaunchKernelGGL(nms_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, scores, n);
  return fixture_torch_scale(scores, n, 1.0f);
}
