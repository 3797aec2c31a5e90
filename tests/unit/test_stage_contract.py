"""The stage contract, by behaviour: ``plan(ctx, ...)`` of every stage decides without doing.

Each stage's plan is made on a realistic workspace (a ROCm tree, checkouts of torch and
torchvision, the wheels a build hands over, the output and work folders not made yet) with
processes and sockets refused (the unit tier's guard) and every filesystem write refused too
(``guard.forbid_writes``): the plan must come back as a frozen value that ``execute`` takes, and
the workspace must be exactly as it was. Reading inputs (the tree, the checkouts, the wheels) is
allowed: deciding needs it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocm_build import building as build
from rocm_build import bundle, config, smoke, sources
from rocm_build.building.compilercache import CompilerCache
from rocm_build.building.version import Revision
from rocm_build.commands import pipeline
from tests.support.planworkspace import Workspace, plan_workspace

from . import guard

#: The stages, as packages: the pipeline's one list.
STAGES = tuple(stage.package for stage in pipeline.PIPELINE)


def _listing(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and folder under ``root``: kind, size, modification time."""
    out: dict[str, tuple[str, int, int]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            st = path.lstat()
            kind = "dir" if path.is_dir() else "file"
            out[str(path.relative_to(root))] = (kind, st.st_size, st.st_mtime_ns)
    return out


SURVEY = build.Survey(CompilerCache("none"), {"torch": Revision("ab" * 20, tag="v2.9.0")})
BUILTIN = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}

#: (stage, how its plan is made): every stage at least once, and the modes of a stage's command.
#: A mode with its own execute names it as ``stage:function``.
PLANS: dict[str, tuple[str, Callable[[Workspace], Any]]] = {
    "checkout": (
        "sources",
        lambda ws: sources.plan(ws.ctx, ["torch", "torchvision"], builtin_origins=BUILTIN),
    ),
    # survey asks git and ccache (processes): what it found, as the plan gets it
    "build": ("building", lambda ws: build.plan(ws.ctx, ws.specs(), SURVEY)),
    "bundle": ("bundle", lambda ws: bundle.plan(ws.ctx, ws.built)),
    "bundle --dry-run": ("bundle", lambda ws: bundle.plan(ws.ctx, ws.built, dry_run=True)),
    "bundle --mode thin": ("bundle", lambda ws: bundle.plan(ws.ctx, ws.built, mode="thin")),
    "bundle --with torch": (
        "bundle",
        lambda ws: bundle.plan(ws.ctx, ws.built[1:], with_wheels=ws.built[:1]),
    ),
    "bundle --split-arch": (
        "bundle:split_arch",
        lambda ws: bundle.split_arch_plan(ws.ctx, ws.built, with_wheels=ws.built[:1]),
    ),
    "bundle --split-arch --dry-run": (
        "bundle:split_arch",
        lambda ws: bundle.split_arch_plan(ws.ctx, ws.built, dry_run=True),
    ),
    "rocm wheels": (
        "bundle:rocm_wheels",
        lambda ws: bundle.rocm_wheels_plan(ws.ctx.tree.root, ws.root / "rocm-wheels"),
    ),
    "smoke": ("smoke", lambda ws: smoke.plan(ws.ctx, ws.built, junit=ws.root / "junit.xml")),
    "save-patches": (
        "sources:save_patches",
        lambda ws: sources.save_patches_plan(ws.ctx, ["torch", "torchvision"]),
    ),
}


def test_every_stage_has_its_plan_checked() -> None:
    assert sorted({stage.partition(":")[0] for stage, _ in PLANS.values()}) == sorted(STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_has_one_shape(name: str) -> None:
    """Every stage's face names its types alike: ``plan`` makes a ``Plan`` in ``plan.py``,
    ``execute`` takes it and gives a ``Result`` in ``execute.py``."""
    package = importlib.import_module(f"rocm_build.{name}")
    assert {"Plan", "Result", "plan", "execute"} <= set(package.__all__)
    assert package.Plan.__module__ == package.plan.__module__ == f"rocm_build.{name}.plan"
    assert package.Result.__module__ == package.execute.__module__ == f"rocm_build.{name}.execute"
    assert typing.get_type_hints(package.plan)["return"] is package.Plan
    hints = typing.get_type_hints(package.execute)
    first = next(iter(inspect.signature(package.execute).parameters))
    assert (hints[first], hints["return"]) == (package.Plan, package.Result)


@pytest.mark.parametrize("case", PLANS)
def test_a_plan_writes_nothing_and_starts_nothing(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage, make = PLANS[case]
    ws = plan_workspace(tmp_path)
    before = _listing(tmp_path)
    with monkeypatch.context() as guarded:
        guard.forbid_writes(guarded)  # processes and sockets: refused for every unit test
        made = make(ws)
    assert _listing(tmp_path) == before
    # a value: frozen, and what the stage's execute takes
    assert dataclasses.is_dataclass(made)
    assert type(made).__dataclass_params__.frozen  # type: ignore[attr-defined]
    package, _, function = stage.partition(":")
    execute = getattr(importlib.import_module(f"rocm_build.{package}"), function or "execute")
    first = next(iter(inspect.signature(execute).parameters))
    assert typing.get_type_hints(execute)[first] is type(made)


def test_the_bundle_plan_holds_each_wheels_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``execute`` will do per wheel is in the plan, made with writes refused: torch's
    library read in the wheel (its NEEDED names left to the system), torchvision planned
    against the torch fat wheel torch's plan will write; and ``--dry-run`` is that plan."""
    ws = plan_workspace(tmp_path)
    with monkeypatch.context() as guarded:
        guard.forbid_writes(guarded)
        made = bundle.plan(ws.ctx, ws.built)
        dry = bundle.execute(bundle.plan(ws.ctx, ws.built, dry_run=True))
    torch, vision = made.tasks
    assert (torch.action, vision.action) == ("bundle", "bundle")
    assert torch.closure is not None
    assert set(torch.closure.system_libs) == {"libc.so.6", "libpthread.so.0"}
    assert vision.job.torch is not None
    assert vision.job.torch_pending
    assert vision.job.torch.path == torch.output
    assert vision.job.torch.libs == {"libtorch_hip.so": "torch/lib/libtorch_hip.so"}
    assert [r.status for r in dry.results] == ["planned", "planned"]
    assert [r.plan for r in dry.results] == [torch.summary, vision.summary]


def test_the_write_guard_refuses_writes_and_allows_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "in").write_text("input\n")
    with monkeypatch.context() as guarded:
        guard.forbid_writes(guarded)
        assert (tmp_path / "in").read_text() == "input\n"
        writes: list[Callable[[], object]] = [
            lambda: (tmp_path / "d").mkdir(),
            lambda: os.makedirs(tmp_path / "a" / "b"),  # noqa: PTH103
            lambda: (tmp_path / "f").write_text("x"),
            lambda: open(tmp_path / "g", "a"),  # noqa: SIM115, PTH123
            lambda: os.open(tmp_path / "h", os.O_CREAT | os.O_WRONLY),
            lambda: (tmp_path / "in").unlink(),
            lambda: (tmp_path / "in").rename(tmp_path / "moved"),
            lambda: (tmp_path / "in").touch(),
        ]
        for write in writes:
            with pytest.raises(guard.UnitTestGuardError):
                write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
