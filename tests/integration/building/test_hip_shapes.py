"""torch 2.13's and 2.14's shapes built for real (issue 32): CMake's HIP language compiles the
fixture's kernels with the ROCm 5.2 tree's clang, through setup.py (native HIP) or
scikit-build-core, with the routes ``shapes`` gives each shape. What reaches the compiler is
read from the result: the code objects of the wheel's library, disassembled by the tree's
llvm-objdump (GPU asserts), the wheel's members (the git-ignored generated file), the build's
own failure (the sysdeps header). Each control takes the route of the other shape and fails.
sccache through the shapes' HIP launcher is read by its own statistics: a second build from
another folder compiles nothing (ccache's figures for the same: benchmarks/bench_build_cache.py)."""

from __future__ import annotations

import dataclasses
import functools
import zipfile
from pathlib import Path

import pytest

from rocm_build.building import shapes
from rocm_build.building.features import GPU_ASSERTS_CMAKE

from . import hipshape

pytestmark = pytest.mark.slow
TARGETS = ("gfx90a",)


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hipshape.build_python(tmp_path_factory.mktemp("hipshape-venv"))


@pytest.fixture(scope="module")
def view(rocm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hipshape.sysdeps_view(rocm_tree, tmp_path_factory.mktemp("hipshape-tree"))


def _built(project: Path, step: hipshape.Step) -> Path:
    done = hipshape.build(project, step)
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    return hipshape.built_wheel(project)


def _assert_path(project: Path, view: Path) -> dict[str, bool]:
    return hipshape.assert_paths(project, view, TARGETS)


def _members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.mark.parametrize("shape", [shapes.NATIVE_HIP, shapes.SCIKIT_BUILD_CORE])
def test_gpu_asserts_reach_the_device_code_by_the_shapes_route(
    shape: str, tmp_path: Path, python: Path, view: Path
) -> None:
    on = hipshape.checkout(tmp_path / "on", shape)
    step = hipshape.plan(on, python, view, TARGETS, gpu_asserts=True)
    assert step.shape.name == shape
    _built(on, step)
    assert _assert_path(on, view) == dict.fromkeys(TARGETS, True)
    off = hipshape.checkout(tmp_path / "off", shape)
    _built(off, hipshape.plan(off, python, view, TARGETS))
    assert _assert_path(off, view) == dict.fromkeys(TARGETS, False)


def test_the_setup_py_route_on_the_skbuild_shape_loses_asserts_and_the_generated_file(
    tmp_path: Path, python: Path, view: Path
) -> None:
    """The control: asserts asked for the setup.py way (CMAKE_PROJECT_INCLUDE_BEFORE in the
    environment, no -C settings), as before the scikit-build-core route."""
    project = hipshape.checkout(tmp_path / "c", shapes.SCIKIT_BUILD_CORE)
    step = hipshape.plan(project, python, view, TARGETS, gpu_asserts=True)
    assert "CMAKE_PROJECT_INCLUDE_BEFORE" not in step.env  # the route moved it into -C
    wrong = dataclasses.replace(
        step,
        env={**step.env, "CMAKE_PROJECT_INCLUDE_BEFORE": str(GPU_ASSERTS_CMAKE)},
        command=shapes.pip_command(python, project / "wheels", ()),
    )
    wheel = _built(project, wrong)
    assert _assert_path(project, view) == dict.fromkeys(TARGETS, False)
    # torch/version.py was written (the build log says so) but .gitignore dropped it.
    assert (project / "torch" / "version.py").is_file()
    assert "torch/version.py" not in _members(wheel)


def test_the_skbuild_route_keeps_the_generated_git_ignored_file(
    tmp_path: Path, python: Path, view: Path
) -> None:
    project = hipshape.checkout(tmp_path / "g", shapes.SCIKIT_BUILD_CORE)
    step = hipshape.plan(project, python, view, TARGETS)
    assert "--config-settings=sdist.include=torch/version.py" in step.command
    with zipfile.ZipFile(_built(project, step)) as zf:
        assert zf.read("torch/version.py").decode().startswith("__version__")


def test_the_skbuild_route_on_the_native_shape_loses_asserts(
    tmp_path: Path, python: Path, view: Path
) -> None:
    """The control: setup.py reads no -C settings; dropping the include leaves asserts off."""
    project = hipshape.checkout(tmp_path / "n", shapes.NATIVE_HIP)
    step = hipshape.plan(
        project, python, view, TARGETS, gpu_asserts=True, route_as=shapes.SCIKIT_BUILD_CORE
    )
    _built(project, step)
    assert _assert_path(project, view) == dict.fromkeys(TARGETS, False)


def test_a_native_hip_compile_finds_the_sysdeps_header_only_by_the_route(
    tmp_path: Path, python: Path, view: Path
) -> None:
    """The header is only in the tree's lib/rocm_sysdeps/include. CXXFLAGS names it too (the
    setup.py shape's route), but CMake's HIP compiles read CMAKE_HIP_FLAGS, not CXXFLAGS."""
    project = hipshape.checkout(tmp_path / "s", shapes.NATIVE_HIP)
    step = hipshape.plan(project, python, view, TARGETS)
    include = str(view / "lib" / "rocm_sysdeps" / "include")
    assert step.env["CPLUS_INCLUDE_PATH"].split(":")[0] == include
    assert f"-I{include}" in step.env["CXXFLAGS"]
    env = {k: v for k, v in step.env.items() if k not in ("CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")}
    failed = hipshape.build(project, dataclasses.replace(step, env=env))
    assert failed.returncode != 0
    assert f"'{hipshape.PROBE}' file not found" in failed.stdout + failed.stderr
    again = hipshape.checkout(tmp_path / "s2", shapes.NATIVE_HIP)
    _built(again, hipshape.plan(again, python, view, TARGETS))


@pytest.mark.parametrize("shape", [shapes.NATIVE_HIP, shapes.SCIKIT_BUILD_CORE])
def test_sccache_serves_every_object_of_a_second_folder(
    shape: str, tmp_path: Path, python: Path, view: Path
) -> None:
    """sccache as CMAKE_HIP_COMPILER_LAUNCHER (the route of both shapes): the second build, from
    another folder with an empty build folder, compiles nothing; the kernels' compiles (two
    targets each) are among the hits, counted by sccache as HIP."""
    cache = tmp_path / "sccache"
    targets = ("gfx90a", "gfx1030")
    build = functools.partial(hipshape.cached_build, shape=shape, python=python, view=view)
    _, first = build(tmp_path / "a", targets=targets, tool="sccache", cache_dir=cache)
    # CMake's C++ and HIP compiler checks, index_kernel.hip and sysdeps_kernel.hip.
    assert (first["misses"], first["hip_misses"]) == (4, 3), first
    _, second = build(tmp_path / "b", targets=targets, tool="sccache", cache_dir=cache)
    assert second["misses"] == 0, second
    assert (second["hits"], second["hip_hits"]) == (4, 3), second
