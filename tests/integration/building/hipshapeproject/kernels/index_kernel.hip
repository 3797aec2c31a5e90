#include "macros.h"

// An index check as torch's indexing kernels make it.
__global__ void index_kernel(float* out, const float* src, const long* index, long n, long size) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  long j = index[i];
  CUDA_KERNEL_ASSERT(j >= 0 && j < size);
  out[i] = src[j];
}

extern "C" void launch_index(float* out, const float* src, const long* index, long n, long size) {
  hipLaunchKernelGGL(index_kernel, dim3((n + 255) / 256), dim3(256), 0, 0, out, src, index, n, size);
}
