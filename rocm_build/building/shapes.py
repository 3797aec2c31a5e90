"""Which way a checked-out project builds, and the route each setting takes to its CMake.

PyTorch changed how it builds twice in 2026 (issue 32):

- ``setup.py`` (2.9-2.12): setup.py runs CMake and forwards ``BUILD_*``/``USE_*``/``CMAKE_*`` from
  the environment; ``.hip`` files are compiled by hipcc (FindHIP).
- ``native-hip`` (2.13): still setup.py, but CMake's own HIP language (``enable_language(HIP)`` in
  its CMakeLists.txt) compiles the kernels: clang, not hipcc, so ``CFLAGS``/``CXXFLAGS`` never
  reach a HIP compile (``CPLUS_INCLUDE_PATH``/``C_INCLUDE_PATH``, read by every clang compile,
  do) and the cache comes in through ``CMAKE_HIP_COMPILER_LAUNCHER``.
- ``scikit-build-core`` (2.14: ``build-backend = "scikit_build_core.build"``): the environment is
  forwarded inside CMake, so ``CMAKE_PROJECT_INCLUDE_BEFORE`` may never run for the top-level
  project; ``-C cmake.define.X=Y`` (config settings of the PEP 517 build) always reaches CMake.

  scikit-build-core copies the package from the source tree through the git ignore files, so a
  file the build writes there that ``.gitignore`` lists (torch's ``torch/version.py``) is left
  out of the wheel unless ``-C sdist.include=PATH`` names it (the wheel's package copy reads
  ``sdist.include``; ``wheel.exclude`` and the ignore files cannot take it back).

``detect`` reads the checkout (pure); ``apply`` gives a planned step its shape's routes.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocm_build.building.features import GPU_ASSERTS_CMAKE
from rocm_build.common.errors import BuildFailed
from rocm_build.repo import checkoutfile
from rocm_build.rocm.dist import join_values

__all__ = [
    "NATIVE_HIP",
    "SCIKIT_BUILD_CORE",
    "SETUP_PY",
    "Routes",
    "Shape",
    "apply_to",
    "detect",
    "gpu_assert_defines",
    "kept_generated",
    "pip_command",
    "routes",
]

SETUP_PY = "setup.py"
NATIVE_HIP = "native-hip"
SCIKIT_BUILD_CORE = "scikit-build-core"
SKBUILD_BACKEND = "scikit_build_core.build"
_ENABLE_HIP = re.compile(r"enable_language\s*\(\s*HIP\b", re.IGNORECASE)
_INCLUDE = "CMAKE_PROJECT_INCLUDE_BEFORE"
#: torch's GPU assert switches as CMake definitions (2.14's reference knobs).
GPU_ASSERT_DEFINES = ("USE_ROCM_KERNEL_ASSERT", "TORCH_USE_HIP_DSA")
#: Per project, what its build writes into its own package in the source tree and its
#: ``.gitignore`` lists: scikit-build-core leaves these out of the wheel unless told.
GENERATED_IGNORED = {"torch": ("torch/version.py",)}


@dataclass(frozen=True)
class Shape:
    """How a project builds: ``name`` (one of the three), ``why`` (what in the checkout said so)."""

    name: str
    why: str

    def describe(self) -> str:
        return f"build shape: {self.name} ({self.why})"


def _backend(source: Path, name: str) -> str:
    text = checkoutfile.read_text(source, "pyproject.toml", f"{name}'s pyproject.toml")
    if text is None:
        return ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BuildFailed(f"{source / 'pyproject.toml'}: not valid TOML ({exc})") from None
    table = data.get("build-system")
    return str(table.get("build-backend") or "") if isinstance(table, dict) else ""


def detect(folder: Path, name: str) -> Shape:
    """The shape of the project in ``folder`` (where its build runs). A folder with neither a
    scikit-build-core backend nor a setup.py cannot be built: ``BuildFailed`` (exit 9)."""
    backend = _backend(folder, name)
    if backend == SKBUILD_BACKEND:
        return Shape(SCIKIT_BUILD_CORE, f'pyproject.toml: build-backend = "{SKBUILD_BACKEND}"')
    has_setup = (folder / "setup.py").is_file()
    if not has_setup and not backend:
        msg = (
            f"{name}: cannot tell how {folder} builds: no setup.py and no build-backend in "
            "pyproject.toml (is the checkout complete?)"
        )
        raise BuildFailed(msg)
    cmake = checkoutfile.read_text(folder, "CMakeLists.txt", f"{name}'s CMakeLists.txt")
    if cmake and _ENABLE_HIP.search(cmake):
        return Shape(NATIVE_HIP, "CMakeLists.txt: enable_language(HIP)")
    return Shape(SETUP_PY, "setup.py" if has_setup else f"pyproject.toml: {backend}")


def gpu_assert_defines(env: Mapping[str, str]) -> tuple[str, ...]:
    """The ``-C cmake.define.X=ON`` settings for GPU asserts when the plan asked for them (its
    ``CMAKE_PROJECT_INCLUDE_BEFORE`` names the shipped file)."""
    if env.get(_INCLUDE) != str(GPU_ASSERTS_CMAKE):
        return ()
    return tuple(f"--config-settings=cmake.define.{d}=ON" for d in GPU_ASSERT_DEFINES)


def kept_generated(project: str) -> tuple[str, ...]:
    """The ``-C sdist.include=PATH`` settings that keep ``project``'s generated, git-ignored
    files in a scikit-build-core wheel."""
    return tuple(f"--config-settings=sdist.include={p}" for p in GENERATED_IGNORED.get(project, ()))


@dataclass(frozen=True)
class Routes:
    """What a shape changes in a step: variables set and dropped, config settings, notes."""

    add: Mapping[str, str]
    drop: tuple[str, ...]
    config_settings: tuple[str, ...]
    notes: tuple[str, ...]


def routes(
    shape: Shape, env: Mapping[str, str], sysdeps_include: Path | None, project: str = ""
) -> Routes:
    """Each setting by the route that reaches CMake in ``shape`` (``env``: the step's so far;
    ``project``: the step's name, for its generated files)."""
    add: dict[str, str] = {}
    drop: list[str] = []
    settings: tuple[str, ...] = ()
    notes = [shape.describe()]
    if shape.name in (NATIVE_HIP, SCIKIT_BUILD_CORE) and sysdeps_include is not None:
        for var in ("CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH"):
            add[var] = join_values(str(sysdeps_include), env.get(var))
        notes.append(
            "sysdeps headers through CPLUS_INCLUDE_PATH/C_INCLUDE_PATH (HIP compiles by CMake "
            "read no CFLAGS/CXXFLAGS)"
        )
    clang = env.get("HIP_CLANG_PATH")
    if shape.name in (NATIVE_HIP, SCIKIT_BUILD_CORE) and clang and "HIPCXX" not in env:
        # CMake finds its HIP compiler by HIPCXX, else by `hipconfig --hipclangpath` (a tree
        # without hipconfig, as Debian's, leaves it at "Failed to find HIP root directory").
        add["HIPCXX"] = str(Path(clang) / "clang++")
        notes.append("HIP compiler for CMake's HIP language by HIPCXX (the tree's clang++)")
    if shape.name in (NATIVE_HIP, SCIKIT_BUILD_CORE) and "CMAKE_HIP_COMPILER_LAUNCHER" in env:
        notes.append("HIP objects through the cache by CMAKE_HIP_COMPILER_LAUNCHER")
    if shape.name == SCIKIT_BUILD_CORE:
        settings = gpu_assert_defines(env)
        if settings:
            drop.append(_INCLUDE)
            notes.append(
                "GPU asserts as -C cmake.define."
                + "=ON, cmake.define.".join(GPU_ASSERT_DEFINES)
                + f"=ON (scikit-build-core may never run {_INCLUDE})"
            )
        if kept := kept_generated(project):
            settings += kept
            notes.append(
                "generated, git-ignored files kept in the wheel by -C sdist.include: "
                + ", ".join(GENERATED_IGNORED[project])
            )
    return Routes(add, tuple(drop), settings, tuple(notes))


def pip_command(python: Path, wheel_dir: Path, settings: tuple[str, ...]) -> tuple[str, ...]:
    """The PEP 517 build by pip with ``settings`` (a scikit-build-core project is always built
    this way: its setup.py is a shim, and only the PEP 517 build takes config settings)."""
    return (
        str(python),
        *("-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps"),
        *settings,
        *("--wheel-dir", str(wheel_dir), "--", "."),
    )


def apply_to(
    env: dict[str, str],
    changed: dict[str, str],
    shape: Shape,
    sysdeps_include: Path | None,
    project: str = "",
) -> Routes:
    """``routes`` applied to a step's ``env`` and ``changed`` in place; returns them."""
    found = routes(shape, env, sysdeps_include, project)
    for key in found.drop:
        env.pop(key, None)
        changed.pop(key, None)
    env.update(found.add)
    changed.update(found.add)
    return found
