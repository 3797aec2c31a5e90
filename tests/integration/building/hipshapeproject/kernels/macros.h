// c10/macros/Macros.h's rule, in small: on ROCm a kernel assert is a no-op unless the build
// defines C10_USE_ROCM_KERNEL_ASSERT; then a failed condition calls __assert_fail even in a
// release build (NDEBUG does not turn it off).
#pragma once
#include <hip/hip_runtime.h>

#if defined(USE_ROCM) && !defined(C10_USE_ROCM_KERNEL_ASSERT)
#define CUDA_KERNEL_ASSERT(cond)
#else
#define CUDA_KERNEL_ASSERT(cond)                                           \
  if (__builtin_expect(!(cond), 0)) {                                      \
    __assert_fail(#cond, __FILE__, static_cast<unsigned int>(__LINE__), __func__); \
  }
#endif
