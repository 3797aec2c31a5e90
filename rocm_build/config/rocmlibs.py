"""What rocm-build knows of ROCm's libraries: the built-in defaults of the ``[bundle]``
settings that name them (``bundle.dlopen_libs``, ``bundle.rocm_libs``, ``bundle.data_trees``),
kept apart from the schema because they are knowledge of ROCm that grows with each release (as
the projects and trains of ``defaults.toml`` are), not the shape of a setting. A config file
replaces each list whole."""

from __future__ import annotations

__all__ = ["DATA_TREES", "DLOPEN_LIBS", "ROCM_LIBS"]

#: Libraries ROCm loads with dlopen() (LoadLibrary() on Windows) by name: no NEEDED entry (no
#: import) points at them, so a closure walk alone misses them. Matched against file names in the
#: ROCm tree (fnmatch patterns); the .dll patterns serve Windows trees.
DLOPEN_LIBS = (
    "libamd_comgr.so*",
    "libhiprtc-builtins.so*",
    "libhiprtc.so*",
    "librocm_smi64.so*",
    "libamd_smi.so*",
    "librocprofiler-register.so*",
    "libhsa-amd-aqlprofile64.so*",
    "librocm-core.so*",
    "librocm_kpack.so*",  # TheRock's kpack loader: finds code objects in .kpack archives
    "amd_comgr*.dll",
    "hiprtc*.dll",
)

#: ROCm's own libraries (fnmatch patterns): never taken from the build machine.
ROCM_LIBS = (
    "libamdhip64.so*",
    "libamd_comgr.so*",
    "libamd_smi.so*",
    "libhsa-runtime64.so*",
    "libhsakmt.so*",
    "libhsa-amd-aqlprofile64.so*",
    "libhip*.so*",
    "librocm*.so*",
    "librocblas.so*",
    "librocsolver.so*",
    "librocsparse.so*",
    "librocfft.so*",
    "librocrand.so*",
    "libroctracer*.so*",
    "libroctx*.so*",
    "librocprofiler*.so*",
    "librocroller.so*",
    "librocshmem.so*",
    "libMIOpen*.so*",
    "librccl.so*",
    "libaotriton*.so*",
)

#: Data the bundled libraries find next to themselves, relative to the ROCm tree, kept in the
#: same layout. Files whose names carry a gfx target keep only the requested targets.
DATA_TREES = (
    "lib/rocblas/library",
    "lib/hipblaslt/library",
    "lib/hipsparselt/library",
    "lib/aotriton.images",
    # rocFFT runs lib/rocfft/<version>/rocfft_rtc_helper (a program) to compile its kernels:
    # as a data tree it comes only with librocfft, in its layout, executable, its search
    # path set
    "lib/rocfft",
    "share/miopen/db",
    "share/libdrm/amdgpu.ids",
    "lib/rocm_sysdeps/share/libdrm/amdgpu.ids",
)
