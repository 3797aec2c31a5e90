"""Build plans for torch and torchvision from sources laid out in a temporary folder, made by
the real (pure) ``make_plan``: what a test changes is a keyword."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rocm_build import config
from rocm_build.building.compilercache import CompilerCache
from rocm_build.building.plan import Folders, Inputs, Machine, Plan, Survey, make_plan
from rocm_build.rocm import dist
from tests.support.trees import make_tree

GIB = 1 << 30


def project_sources(tmp_path: Path, toml: str = "") -> tuple[config.Config, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "rocm-build.toml").write_text(toml)
    cfg = config.load(cwd=tmp_path, env={})
    src = tmp_path / "src"
    for name, version in (("torch", "2.9.0"), ("torchvision", "0.24.0a0")):
        (src / name).mkdir(parents=True)
        (src / name / "version.txt").write_text(version + "\n")
    (src / "torch" / "requirements.txt").write_text("-r requirements-build.txt\nnumpy  # c\n")
    (src / "torch" / "requirements-build.txt").write_text("cmake\ntorch\n")
    (src / "torchvision" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "torch>=2", "Wheel"]\n'
    )
    return cfg, src


def build_plan(cfg: config.Config, src: Path, tmp_path: Path, **kw: Any) -> Plan:
    """``make_plan`` for torch and torchvision; ``kw`` is what a test changes: ``env``,
    ``jobs``, ``version_suffix``, ``venv_setting``, ``cache`` and ``cache_env``, the survey's
    ``revisions`` and ``worktrees``."""
    tree = dist.open_tree(make_tree(tmp_path / "rocm"))
    suffix = {"version_suffix": kw.pop("version_suffix")} if "version_suffix" in kw else {}
    settings = replace(
        cfg,
        env=kw.pop("env", {"PATH": "/usr/bin", "CUDA_HOME": "/cuda"}),
        general=replace(cfg.general, jobs=kw.pop("jobs", 0)),
        build=replace(cfg.build, venv=kw.pop("venv_setting", "create"), **suffix),
    )
    cache = CompilerCache(kw.pop("cache", "none"), env=kw.pop("cache_env", {}))
    found = Survey(cache, kw.pop("revisions", {}), kw.pop("worktrees", {}))
    assert not kw, kw
    return make_plan(
        Inputs(
            settings=settings,
            specs=cfg.selected_projects(["torchvision", "torch"]),
            folders=Folders(src, tmp_path / "work", tmp_path / "wheels"),
            tree=tree,
            targets=("gfx90a", "gfx1030"),
            found=found,
            machine=Machine(Path("/usr/bin/python3"), cores=8, memory=16 * GIB),
        )
    )
