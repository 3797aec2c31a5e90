"""The bundle stage's interface (``plan`` / ``execute``) and the one wheel analysis that the
build's wheel check, ``inspect`` and ``bundle`` share, on a real HIP extension wheel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocm_build import bundle, config
from rocm_build.building import wheelcheck
from rocm_build.bundle import report
from rocm_build.run import context
from rocm_build.wheel.analyze import analyze_path


def _ctx(tmp_path: Path, rocm_tree: Path, **flags: object) -> context.RunContext:
    base = {"rocm": str(rocm_tree), "wheelhouse": str(tmp_path / "out")}
    cfg = config.load(cwd=tmp_path, env=dict(os.environ), flags={**base, **flags})
    return context.resolve(cfg, tree=True)


@pytest.mark.slow
def test_plan_then_execute_bundles_once_then_says_up_to_date(
    hip_ext_wheel: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    ctx = _ctx(tmp_path, rocm_tree, **{"bundle.compression_level": 0})
    plan = bundle.plan(ctx, [hip_ext_wheel])
    assert plan.wheels == (hip_ext_wheel,)
    assert plan.as_json()["mode"] == "fat"
    assert not (tmp_path / "out").exists()  # planning writes nothing, not even the folder

    first = bundle.execute(plan)
    assert first.nothing_to_do == ""
    (out,) = first.outputs
    # no --arch: the wheelhouse's folder of the wheel's own targets
    assert out.parent == tmp_path / "out" / "gfx1030_gfx90a"
    assert out.is_file()
    assert first.as_json()["outputs"] == [str(out)]
    assert [w["status"] for w in first.as_json()["wheels"]] == ["bundled"]

    again = bundle.execute(bundle.plan(ctx, [hip_ext_wheel]))
    assert again.nothing_to_do == "up to date"
    assert again.outputs == [out]

    dry = bundle.execute(bundle.plan(ctx, [hip_ext_wheel], dry_run=True))
    assert dry.nothing_to_do in ("up to date", "dry run: nothing written")


@pytest.mark.slow
def test_one_analysis_feeds_the_check_inspect_and_bundle(
    hip_ext_wheel: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    analysis = analyze_path(hip_ext_wheel)
    assert list(analysis.elves) == ["hipext/_kern.so"]
    kern = analysis.elves["hipext/_kern.so"]
    # read in the wheel: nothing unpacked, and the names its .rodata holds come with its facts
    assert kern.info.path == "hipext/_kern.so"
    assert kern.info.so_strings is not None
    assert analysis.device_targets == {"gfx90a", "gfx1030"}
    assert "libamdhip64.so.5" in kern.info.needed
    assert analysis.unreadable == ()

    facts = wheelcheck.check_wheel(hip_ext_wheel, ["gfx90a", "gfx1030"], "hipext")
    assert set(facts.targets) == analysis.device_targets
    shown = report.inspect_wheel(hip_ext_wheel, _ctx(tmp_path, rocm_tree)).data
    assert set(shown["code_targets"]) == analysis.device_targets
    (row,) = shown["elf_files"]
    assert row["needed"] == list(kern.info.needed)

    # bundle's default targets are the wheel's own device code's, from the same analysis
    (result,) = bundle.execute(bundle.plan(_ctx(tmp_path, rocm_tree), [hip_ext_wheel])).results
    assert result.plan is not None
    assert sorted(result.plan.as_json()["targets"]) == sorted(analysis.device_targets)
    bundled = analyze_path(Path(result.output))
    assert bundled.bundle_record()["targets"] == sorted(analysis.device_targets)
    assert set(bundled.elves) > {"hipext/_kern.so"}  # the grafted libraries are ELF files too
