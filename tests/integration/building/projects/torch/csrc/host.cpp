// Host-only part of the library; also what a build that fell back to CPU would contain.
#include "fixture_torch.h"

#ifdef FIXTURE_WITH_HIP
#include <hip/hip_runtime_api.h>
extern "C" int fixture_torch_device_count() {
  int count = 0;
  return hipGetDeviceCount(&count) == hipSuccess ? count : 0;
}
#else
extern "C" int fixture_torch_device_count() { return 0; }
extern "C" int fixture_torch_scale(float* data, int n, float factor) {
  for (int i = 0; i < n; ++i) data[i] *= factor;
  return 0;
}
#endif
