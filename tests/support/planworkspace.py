"""A realistic workspace for planning every stage: a ROCm tree torch can be built against,
checkouts of torch and torchvision, the wheels a build hands over (one with a real shared
library), and the run's context resolved as a command resolves it before its first stage."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zstandard

from rocm_build import config
from rocm_build.run import context
from rocm_build.run.context import RunContext
from tests.support.trees import make_tree
from tests.support.wheels import make_wheel

#: a real shared library (NEEDs libc and libpthread) for the torch wheel
ELF = next(Path(zstandard.__file__).parent.glob("backend_c*.so"))


@dataclass(frozen=True)
class Workspace:
    root: Path
    ctx: RunContext
    built: tuple[Path, ...]  # what the build hands over (torch, torchvision)

    def specs(self) -> list[config.ProjectSpec]:
        return self.ctx.settings.selected_projects(["torch", "torchvision"])


def _checkout(src: Path, name: str, version: str) -> None:
    """A checkout as the build reads it: a repository (``.git``) with its version file."""
    (src / name / ".git" / "refs").mkdir(parents=True)
    (src / name / ".git" / "objects").mkdir()
    (src / name / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (src / name / "version.txt").write_text(version + "\n")
    (src / name / "requirements.txt").write_text("numpy\n")
    (src / name / "setup.py").write_text("")  # how it builds (shapes: setup.py)
    # torch builds composable_kernel from its own submodule (on by default)
    ck = src / name / "third_party" / "composable_kernel" / "include" / "ck"
    ck.mkdir(parents=True)
    (ck / "ck.hpp").write_text("#pragma once\n")


def _torch_tree(root: Path) -> Path:
    """A tree torch can be built against: the CMake packages its LoadHIP.cmake requires."""
    make_tree(root)
    torch = config.load_defaults()["projects"]["torch"]
    for package in torch["cmake_packages"]:
        (root / "lib" / "cmake" / package).mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir()
    (root / "bin" / "hipcc").write_text("")
    return root


def plan_workspace(root: Path) -> Workspace:
    _torch_tree(root / "rocm")
    for name, version in (("torch", "2.9.0"), ("torchvision", "0.24.0a0")):
        _checkout(root / "src", name, version)
    built = root / "built"
    built.mkdir()
    tag = "cp311-cp311-linux_x86_64"
    # a real shared library in it: the bundle's plan reads its ELF facts in the wheel
    torch = make_wheel(
        built / f"torch-2.9.0+rocm6.4.1-{tag}.whl",
        {"torch/__init__.py": "", "torch/lib/libtorch_hip.so": ELF.read_bytes()},
    )
    vision = make_wheel(
        built / f"torchvision-0.24.0+rocm6.4.1-{tag}.whl", {"torchvision/__init__.py": ""}
    )
    env = {"PATH": os.environ.get("PATH", "")}  # this machine's programs (ccache, git)
    cfg = config.load(cwd=root, env=env, flags={"rocm": "rocm", "arch": "gfx90a"})
    # The one step that may look around (find the tree, a URL downloaded, the GPUs): before any
    # plan, as every command and `all` (before its first stage) do.
    ctx = context.resolve(cfg, tree=True, targets=True)
    return Workspace(root, ctx, (torch, vision))
