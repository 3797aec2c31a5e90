"""Whether a bundle setting changes the output is declared once, in the schema's field metadata
(``output``): the Linux and the Windows fingerprints take it in from that mark alone, so a new
setting marked so makes an existing output stale without another edit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocm_build import config
from rocm_build.bundle import linux, windows
from rocm_build.bundle.job import BundleJob
from rocm_build.config.schema import BundleSettings, output_settings
from rocm_build.wheel.deflate import DEFAULT_DEFLATE
from tests.support.sections import with_extra_setting

FINGERPRINTS = {"linux": linux._fingerprint, "windows": windows._fingerprint}

#: the settings the fingerprints listed by hand before the mark (none may drop out)
BEFORE = {
    "compression_level",
    "deflater",
    "policy",
    "exclude",
    "dlopen_libs",
    "data_trees",
    "allow_outside",
    "system_libs",
    "rocm_libs",
    "allow_rocm_mismatch",
    "keep_other_rocm",
    "prune_device_code",
    "allow_missing_arch",
}


def _defaults(tmp_path: Path) -> BundleSettings:
    return config.load(cwd=tmp_path, env={}, flags={}).bundle


def _job(tmp_path: Path, settings: BundleSettings) -> BundleJob:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    if not wheel.exists():
        wheel.write_bytes(b"not read: only its facts are")
    return BundleJob(
        settings=settings,
        wheel=wheel,
        rocm=tmp_path,
        output_dir=tmp_path / "out",
        targets=("gfx90a",),
        lib_dir="demo/lib",
        torch=None,
        allow_outside=(),
        thin=None,
        deflate=DEFAULT_DEFLATE,
        device_targets=("gfx90a",),
    )


def _other(name: str, value: Any) -> Any:
    """Another value of the setting ``name`` than ``value``."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return (value + 1) % 10
    if isinstance(value, tuple):
        return (*value, "other")
    if name == "deflater":
        return "zlib" if value != "zlib" else "isal"
    return f"{value}x"


def test_the_marked_settings_hold_every_one_listed_before(tmp_path: Path) -> None:
    assert set(output_settings(_defaults(tmp_path))) >= BEFORE


@pytest.mark.parametrize("platform", FINGERPRINTS)
def test_a_setting_marked_output_changes_the_fingerprint(tmp_path: Path, platform: str) -> None:
    fp, base = FINGERPRINTS[platform], _defaults(tmp_path)
    one = fp(_job(tmp_path, with_extra_setting(base, output=True, value=1)))
    assert one == fp(_job(tmp_path, with_extra_setting(base, output=True, value=1)))  # equal inputs
    assert one != fp(_job(tmp_path, with_extra_setting(base, output=True, value=2)))


@pytest.mark.parametrize("platform", FINGERPRINTS)
def test_an_unmarked_setting_leaves_it(tmp_path: Path, platform: str) -> None:
    fp, base = FINGERPRINTS[platform], _defaults(tmp_path)
    one = fp(_job(tmp_path, with_extra_setting(base, output=False, value=1)))
    assert one == fp(_job(tmp_path, with_extra_setting(base, output=False, value=2)))
    assert one == fp(_job(tmp_path, replace(base, deflate_cache="none", dry_run=True)))


@pytest.mark.parametrize("platform", FINGERPRINTS)
@pytest.mark.parametrize("name", sorted(BEFORE))
def test_each_marked_setting_changes_it(tmp_path: Path, platform: str, name: str) -> None:
    fp, base = FINGERPRINTS[platform], _defaults(tmp_path)
    assert fp(_job(tmp_path, base)) != fp(
        _job(tmp_path, replace(base, **{name: _other(name, getattr(base, name))}))
    )


def test_the_split_fingerprint_takes_the_marks_too(tmp_path: Path) -> None:
    from rocm_build.bundle import split
    from tests.support.planworkspace import plan_workspace

    ws, base = plan_workspace(tmp_path / "ws"), _defaults(tmp_path)

    def prints(*, output: bool, value: int) -> list[str]:
        settings = replace(
            ws.ctx.settings, bundle=with_extra_setting(base, output=output, value=value)
        )
        plan = split.split_arch_plan(replace(ws.ctx, settings=settings), ws.built)
        return [plan.fingerprints[w] for w in ws.built]

    assert prints(output=True, value=1) == prints(output=True, value=1)  # equal inputs
    assert prints(output=True, value=1) != prints(output=True, value=2)
    assert prints(output=False, value=1) == prints(output=False, value=2)
