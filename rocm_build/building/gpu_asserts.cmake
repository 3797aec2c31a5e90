# Included by CMake before every project() of torch's build (CMAKE_PROJECT_INCLUDE_BEFORE) when
# rocm-build's features.gpu_asserts is on. torch's cmake/Dependencies.cmake turns HIP kernel asserts
# off unless ROCM_FORCE_ENABLE_GPU_ASSERTS is set, and its setup.py forwards to CMake only
# variables named BUILD_*, USE_*, CMAKE_* (and a fixed list), so the switch travels this way.
set(ROCM_FORCE_ENABLE_GPU_ASSERTS ON CACHE BOOL "HIP kernel asserts (rocm-build features.gpu_asserts)")
