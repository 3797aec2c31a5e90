"""torch 2.13's and 2.14's shapes built by ROCm 6.4 (issue 32): the fixture of
``building/test_hip_shapes.py`` (the 5.2 tree) built inside the Debian sid root by the sid
tree's clang 21 through CMake's HIP language, with the routes ``shapes`` gives each shape, and
read the same way: the wheel's code objects disassembled by the tree's llvm-objdump (GPU
asserts on and off), the sysdeps header found by a HIP compile through CPLUS_INCLUDE_PATH (no
-I on its command line), the git-ignored generated file in the 2.14 wheel.

CI cost: one venv in the root for the module, gfx90a only, three builds (native HIP with
asserts on and off, scikit-build-core with asserts on)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from rocm_build.building import shapes
from rocm_build.rocm import dist, sysroot
from tests.conftest import REPO
from tests.integration.building import hipshape

pytestmark = pytest.mark.slow
TARGETS = ("gfx90a",)
#: What the root's commands start from: no host setting leaks in.
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class InRoot:
    """Runs commands in the sid root with the tree, the tests' folders and this checkout bound
    at their own paths. The root is entered by this checkout's ``rocm_build.rocm.sysroot`` on
    the host, so the command's environment (which names the sid tree's libraries in
    LD_LIBRARY_PATH: glibc 2.38+) is set inside, by ``env -i``. Output is kept in files beside
    the command (the root's runner passes its output through) and read back."""

    def __init__(self, root: Path, binds: Sequence[Path]) -> None:
        self.root, self.binds = root, tuple(binds)
        self.count = 0

    def __call__(
        self, cmd: Sequence[str], cwd: Path, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        self.count += 1
        log = cwd / f".in-root-{self.count}"
        inside = ["env", "-i", *(f"{k}={v}" for k, v in (env or self.base()).items()), *cmd]
        script = f'exec {shlex.join(inside)} >"{log}.out" 2>"{log}.err"'
        host = {**self.base(), "PYTHONPATH": str(REPO)}
        code = sysroot.run(self.root, ["sh", "-c", script], binds=self.binds, cwd=cwd, env=host)
        out, err = (Path(f"{log}.{s}").read_text(errors="replace") for s in ("out", "err"))
        return subprocess.CompletedProcess(list(cmd), code, out, err)

    @staticmethod
    def base() -> dict[str, str]:
        return {"PATH": ROOT_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def in_root(sid_root: Path, sid_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> InRoot:
    return InRoot(sid_root, (sid_tree.resolve(), tmp_path_factory.getbasetemp().resolve(), REPO))


@pytest.fixture(scope="module")
def view(sid_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hipshape.sysdeps_view(sid_tree.resolve(), tmp_path_factory.mktemp("sid-shape-tree"))


@pytest.fixture(scope="module")
def python(in_root: InRoot, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of the root's Python with the build requirements of both shapes."""
    where = tmp_path_factory.mktemp("sid-shape-venv").resolve()
    venv = where / "venv"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", *hipshape.BUILD_REQUIREMENTS]
    for cmd in (["python3", "-m", "venv", str(venv)], pip):
        done = in_root(cmd, where, None)
        assert done.returncode == 0, done.stderr[-3000:]
    return python


def _built(project: Path, step: hipshape.Step, in_root: InRoot) -> Path:
    done = hipshape.build(project, step, in_root)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return hipshape.built_wheel(project)


def _plan(project: Path, python: Path, view: Path, *, gpu_asserts: bool) -> hipshape.Step:
    # CMAKE_* reaches CMake as -D through the fixture's setup.py (as torch's does); for the
    # sysdeps check below.
    extra = {"CMAKE_EXPORT_COMPILE_COMMANDS": "ON"}
    return hipshape.plan(
        project,
        python,
        view,
        TARGETS,
        gpu_asserts=gpu_asserts,
        extra=extra,
        base=InRoot.base(),
    )


def test_native_hip_asserts_on_and_off_and_the_sysdeps_header_by_its_route(
    tmp_path: Path, python: Path, view: Path, in_root: InRoot
) -> None:
    include = str(view / "lib" / "rocm_sysdeps" / "include")
    on = hipshape.checkout(tmp_path / "on", shapes.NATIVE_HIP)
    step = _plan(on, python, view, gpu_asserts=True)
    assert step.shape.name == shapes.NATIVE_HIP
    assert step.env["CPLUS_INCLUDE_PATH"].split(":")[0] == include
    _built(on, step, in_root)
    assert hipshape.assert_paths(on, view, TARGETS, in_root) == dict.fromkeys(TARGETS, True)
    # The header is only in the sysdeps include folder, and the HIP compile that found it had
    # no -I for it: it came by CPLUS_INCLUDE_PATH.
    commands = json.loads((on / "build" / "cmake" / "compile_commands.json").read_text())
    (sysdeps_compile,) = (c for c in commands if c["file"].endswith("sysdeps_kernel.hip"))
    assert include not in sysdeps_compile["command"]
    assert sysdeps_compile["command"].startswith(step.env["HIPCXX"])  # the tree's clang++
    off = hipshape.checkout(tmp_path / "off", shapes.NATIVE_HIP)
    _built(off, _plan(off, python, view, gpu_asserts=False), in_root)
    assert hipshape.assert_paths(off, view, TARGETS, in_root) == dict.fromkeys(TARGETS, False)


def test_skbuild_asserts_and_the_generated_git_ignored_file(
    tmp_path: Path, python: Path, view: Path, in_root: InRoot
) -> None:
    project = hipshape.checkout(tmp_path / "sk", shapes.SCIKIT_BUILD_CORE)
    step = _plan(project, python, view, gpu_asserts=True)
    assert step.shape.name == shapes.SCIKIT_BUILD_CORE
    assert "--config-settings=cmake.define.USE_ROCM_KERNEL_ASSERT=ON" in step.command
    assert "--config-settings=sdist.include=torch/version.py" in step.command
    wheel = _built(project, step, in_root)
    assert hipshape.assert_paths(project, view, TARGETS, in_root) == dict.fromkeys(TARGETS, True)
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read("torch/version.py").decode().startswith("__version__")


FIND_HIP = """\
cmake_minimum_required(VERSION 3.21)
project(findhip LANGUAGES CXX HIP)
find_package(hip CONFIG REQUIRED)
add_library(findhip SHARED k.hip)
target_link_libraries(findhip PRIVATE hip::host)
"""


def test_find_package_hip_configures_and_links_against_the_tree(
    tmp_path: Path, python: Path, sid_tree: Path, in_root: InRoot
) -> None:
    """torch 2.13's LoadHIP.cmake asks for ``find_package(hip CONFIG)``: hip's CMake package asks
    for amd_comgr's, whose config climbs to its prefix with a variable of its own
    (``AMD_COMGR_PREFIX``); ``rocm debian`` shortens that climb as it does the others, or the
    package is looked for one folder above the tree."""
    project = tmp_path / "findhip"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(FIND_HIP)
    (project / "k.hip").write_text(
        "#include <hip/hip_runtime.h>\n__global__ void k(int *p) { *p = 1; }\n"
    )
    tree = sid_tree.resolve()
    # the tree's environment as build composes it (ROCM_PATH, device libraries...), and the
    # HIP compiler the native-HIP route names
    composed = dist.compose_env(InRoot.base(), tree=dist.open_tree(tree), targets=TARGETS, jobs=2)
    env = {
        **composed.env,
        "PATH": f"{python.parent}:{composed.env['PATH']}",
        "CMAKE_PREFIX_PATH": str(tree),
        "HIPCXX": str(tree / "llvm" / "bin" / "clang++"),
    }
    build = project / "build"
    for cmd in (
        [
            "cmake",
            "-G",
            "Ninja",
            "-S",
            str(project),
            "-B",
            str(build),
            f"-DCMAKE_HIP_ARCHITECTURES={TARGETS[0]}",
        ],
        ["cmake", "--build", str(build)],
    ):
        done = in_root(cmd, project, env)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert (build / "libfindhip.so").is_file()
