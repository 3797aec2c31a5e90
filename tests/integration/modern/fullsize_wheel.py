"""A torch-shaped wheel whose HIP library needs what real torch's needs from ROCm 6.4.

``torch/lib/libtorch_hip.so`` is compiled by the sid tree's hipcc (clang 21) inside the sid root
for gfx942, gfx1100 and gfx1201 and links rocBLAS, hipBLAS, hipBLASLt, MIOpen, rocSPARSE,
hipSPARSE, rocFFT, hipFFT, rocRAND, hipRAND, rocSOLVER, hipSOLVER, roctx and the HIP runtime:
it takes the address of one function of each, so ``--as-needed`` keeps every NEEDED entry.
``torch/_C`` is a CPython extension (the root's Python) that NEEDs it and calls it at import.

Shared by tests/integration/modern/test_fullsize.py and benchmarks/bench_fullsize.py; the wheel
is cached (keyed by the sources and the tree's version).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TARGETS = ("gfx942", "gfx1100", "gfx1201")
VERSION = "2.9.0"

#: library to link -> one function of it (declared here, so no header is needed)
LINKED = {
    "rocblas": "rocblas_create_handle",
    "hipblas": "hipblasCreate",
    "hipblaslt": "hipblasLtCreate",
    "MIOpen": "miopenCreate",
    "rocsparse": "rocsparse_create_handle",
    "hipsparse": "hipsparseCreate",
    "rocfft": "rocfft_setup",
    "hipfft": "hipfftCreate",
    "rocrand": "rocrand_create_generator",
    "hiprand": "hiprandCreateGenerator",
    "rocsolver": "rocsolver_get_version_string",
    "hipsolver": "hipsolverCreate",
    "roctx64": "roctxRangePushA",
}

HIP_SOURCE = (
    "#include <hip/hip_runtime.h>\n"
    + "".join(f'extern "C" int {sym}();\n' for sym in LINKED.values())
    + r"""
__global__ void torch_fill(float* x, float v) { x[threadIdx.x] = v; }
typedef int (*entry)();
// Exported and writable: the references stay (relocations), so every NEEDED entry does too.
extern "C" entry torch_hip_entries[] = {
"""
    + "".join(f"    &{sym},\n" for sym in LINKED.values())
    + r"""};
extern "C" int torch_hip_linked(void) {
  int n = 0;
  for (unsigned i = 0; i < sizeof(torch_hip_entries) / sizeof(entry); ++i)
    n += torch_hip_entries[i] != 0;
  return n;
}
extern "C" int torch_hip_device_status(void) {
  int count = -1;
  return (int)hipGetDeviceCount(&count);
}
"""
)

EXT_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
int torch_hip_linked(void);
int torch_hip_device_status(void);
static PyObject* linked(PyObject* self, PyObject* args) {
  return PyLong_FromLong(torch_hip_linked());
}
static PyObject* device_status(PyObject* self, PyObject* args) {
  return PyLong_FromLong(torch_hip_device_status());
}
static PyMethodDef methods[] = {
  {"linked", linked, METH_NOARGS, "libraries the HIP library links"},
  {"device_status", device_status, METH_NOARGS, "hipGetDeviceCount's status"},
  {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", NULL, -1, methods};
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
"""

INIT = b"from torch import _C\n\nlinked = _C.linked()\n"


def _rocm_build(args: list[str], cwd: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "rocm_build", "-q", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )


def _in_root(root: Path, tree: Path, cwd: Path, cmd: list[str]) -> None:
    _rocm_build(["rocm", "run", str(root), "--bind", str(tree), "--", *cmd], cwd)


def build_wheel(cache: Path, tree: Path, root: Path) -> Path:
    """The wheel, built once per sources and tree (in ``cache``/fullsize-wheel)."""
    version = (tree / ".info" / "version").read_text().strip()
    key = hashlib.sha256(f"{HIP_SOURCE}{EXT_SOURCE}{INIT!r}{TARGETS}{version}".encode())
    work = cache / "fullsize-wheel" / key.hexdigest()[:12]
    done = work / "dist"
    found = sorted(done.glob("torch-*.whl")) if done.is_dir() else []
    if found:
        return found[0]
    build = work / "build"
    build.mkdir(parents=True, exist_ok=True)
    (build / "torch_hip.hip").write_text(HIP_SOURCE)
    (build / "_C.c").write_text(EXT_SOURCE)
    t = str(tree)
    _in_root(
        root, tree, build,
        [
            "env", "HIP_PLATFORM=amd", f"ROCM_PATH={t}", f"{t}/bin/hipcc",
            *(f"--offload-arch={a}" for a in TARGETS),
            "-O1", "-fPIC", "-shared", "-Wl,--as-needed", "-Wl,-soname,libtorch_hip.so",
            "torch_hip.hip", "-o", "libtorch_hip.so", f"-L{t}/lib",
            *(f"-l{lib}" for lib in LINKED), "-lamdhip64",
        ],
    )  # fmt: skip
    probe = (
        "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'), "
        "sysconfig.get_paths()['include'], sysconfig.get_config_var('py_version_nodot'))"
    )
    _in_root(root, tree, build, ["sh", "-c", f'python3 -c "{probe}" > pyinfo'])
    suffix, include, nodot = (build / "pyinfo").read_text().split()
    ext = f"_C{suffix}"
    _in_root(
        root, tree, build,
        [
            "gcc", "-shared", "-fPIC", "-O1", f"-I{include}", "_C.c", "-o", ext,
            "-L.", "-l:libtorch_hip.so", "-Wl,-rpath,$ORIGIN/lib",
        ],
    )  # fmt: skip
    sys.path.insert(0, str(REPO / "tests" / "integration" / "bundle"))
    from helpers import make_wheel  # type: ignore[import-not-found]

    tmp = work / "dist.tmp"
    tmp.mkdir(exist_ok=True)
    wheel = make_wheel(
        tmp,
        "torch",
        VERSION,
        {
            "torch/__init__.py": INIT,
            f"torch/{ext}": build / ext,
            "torch/lib/libtorch_hip.so": build / "libtorch_hip.so",
        },
        tag=f"cp{nodot}-cp{nodot}-linux_x86_64",
    )
    tmp.rename(done)
    return done / wheel.name
