"""Reading torch's Triton pin files, the platform rule and the checkout order."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.common.errors import ConfigError
from rocm_build.repo import tritonpin
from rocm_build.sources.plan import ProjectPlan, _pinned_last

SHA = "a" * 40


def _torch(tmp_path: Path, pin: str | None, version: str | None) -> Path:
    src = tmp_path / "torch"
    (src / ".git").mkdir(parents=True)
    if pin is not None:
        (src / tritonpin.PIN_FILE).parent.mkdir(parents=True)
        (src / tritonpin.PIN_FILE).write_text(pin + "\n")
    if version is not None:
        (src / tritonpin.VERSION_FILE).parent.mkdir(parents=True, exist_ok=True)
        (src / tritonpin.VERSION_FILE).write_text(version + "\n")
    return src


def test_commit_pin_and_release_branch(tmp_path: Path) -> None:
    src = _torch(tmp_path, SHA, "3.6.0")
    assert tritonpin.read_pin(src, release=False).ref == SHA
    pin = tritonpin.read_pin(src, release=True)
    assert pin.ref == "release/3.6.x"
    assert pin.release
    assert pin.version == "3.6.0"


@pytest.mark.parametrize(
    ("pin", "version", "release", "words"),
    [
        (None, "3.6.0", False, "has no Triton pin"),
        (SHA, None, True, "has no Triton pin"),
        ("abc123", "3.6.0", False, "not a full commit SHA"),
        (SHA, "main", True, "not a Triton version"),
    ],
)
def test_bad_pin_files(
    tmp_path: Path, pin: str | None, version: str | None, release: bool, words: str
) -> None:
    src = _torch(tmp_path, pin, version)
    with pytest.raises(ConfigError, match=words) as err:
        tritonpin.read_pin(src, release=release)
    assert "\n" not in str(err.value)


def test_windows_is_not_supported() -> None:
    with pytest.raises(ConfigError, match="not supported on Windows"):
        tritonpin.check_platform("Windows")
    tritonpin.check_platform("Linux")


def test_origin_follows_the_repo_setting(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert cfg.triton.repo == "fork"  # TheRock builds ROCm's fork on Linux
    assert tritonpin.origin(cfg.triton) == "https://github.com/ROCm/triton.git"
    up = config.load(cwd=tmp_path, env={"ROCM_BUILD_TRITON_REPO": "upstream"})
    assert tritonpin.origin(up.triton) == "https://github.com/triton-lang/triton.git"
    with pytest.raises(ConfigError, match="one of fork, upstream"):
        config.load(cwd=tmp_path, env={"ROCM_BUILD_TRITON_REPO": "mine"})


def test_triton_builds_before_torch_and_checks_out_after(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert [p.name for p in cfg.selected_projects(["torch", "triton"])] == ["triton", "torch"]
    ps = [
        ProjectPlan(
            name=n,
            origin="",
            ref="",
            src=tmp_path,
            patches_root=tmp_path,
            patchset="",
            hipify=(),
            apply_patches=False,
            pinned_by="torch" if n == "triton" else "",
        )
        for n in ("triton", "torch")
    ]
    assert [p.name for p in _pinned_last(ps)] == ["torch", "triton"]
    # triton alone: nothing to wait for in this run.
    assert [p.name for p in _pinned_last(ps[:1])] == ["triton"]
