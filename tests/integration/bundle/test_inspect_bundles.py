"""inspect on real offload bundles: clang 15 (uncompressed) and clang 19 --offload-compress
(CCOB), several translation units per library, so several bundles per .hip_fatbin section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.binary import elf
from rocm_build.bundle import report
from rocm_build.run import context
from tests.support.hiplib import bare_hip_library

from .helpers import make_wheel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def libs(
    rocm_tree: Path, clang19_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bundles")
    plain = bare_hip_library(
        rocm_tree / "lib/llvm/bin/clang++",
        rocm_tree,
        base / "plain" / "libplain.so",
        ["gfx90a", "gfx1030", "gfx906"],
        ["-nogpulib", "-nogpuinc"],
    )
    packed = bare_hip_library(
        clang19_bin / "clang++",
        rocm_tree,
        base / "packed" / "libpacked.so",
        ["gfx942", "gfx1100"],
        ["-nogpulib", "-nogpuinc", "--offload-compress"],
    )
    return {"plain": plain, "packed": packed}


def test_every_bundle_is_read(libs: dict[str, Path]) -> None:
    plain = elf.offload_bundles(libs["plain"])
    packed = elf.offload_bundles(libs["packed"])
    assert len(plain) == 3
    assert not any(b.compressed for b in plain)
    assert len(packed) == 3
    assert all(b.compressed for b in packed)
    assert elf.offload_targets(libs["plain"]) == {"gfx90a", "gfx1030", "gfx906"}
    assert elf.offload_targets(libs["packed"]) == {"gfx942", "gfx1100"}


def test_inspect_reports_both_kinds(run_cli, libs: dict[str, Path], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wheel = make_wheel(
        tmp_path,
        "kernels",
        "1.0",
        {"kernels/libplain.so": libs["plain"], "kernels/libpacked.so": libs["packed"]},
    )
    res = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {r["path"]: r for r in data["elf_files"]}
    assert rows["kernels/libplain.so"]["offload_bundles"] == 3
    assert rows["kernels/libplain.so"]["compressed_bundles"] == 0
    assert rows["kernels/libpacked.so"]["compressed_bundles"] == 3
    assert rows["kernels/libpacked.so"]["targets"] == ["gfx1100", "gfx942"]
    assert data["code_targets"] == ["gfx1030", "gfx1100", "gfx906", "gfx90a", "gfx942"]
    need = run_cli(["inspect", str(wheel), "--require-arch", "gfx942,gfx950"], cwd=tmp_path)
    assert need.returncode == 11
    assert "gfx950" in need.stderr
    assert "gfx942" in need.stdout
    # present in one library is not enough: libplain.so has no gfx942 code
    partial = run_cli(["--json", "inspect", str(wheel), "--require-arch", "gfx942"], cwd=tmp_path)
    assert partial.returncode == 11
    (row,) = [c for c in json.loads(partial.stdout)["coverage"] if c["target"] == "gfx942"]
    assert row["missing_in"] == ["kernels/libplain.so"]


def test_wheel_over_pypi_limit_is_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The note appears above PyPI's per-file limit (lowered here to the test wheel's size)."""
    wheel = make_wheel(tmp_path, "big", "1.0", {"big/__init__.py": b"x = 1\n" * 1000})
    cfg = config.load(cwd=tmp_path, env={}, flags={})
    assert not report.inspect_wheel(wheel, context.resolve(cfg)).data["over_pypi_limit"]
    monkeypatch.setattr(report, "PYPI_LIMIT", wheel.stat().st_size - 1)
    data = report.inspect_wheel(wheel, context.resolve(cfg)).data
    assert data["over_pypi_limit"]
    assert any("per-file limit" in line for line in report.render(data))


def test_a_rocm10_label_is_warned_about(tmp_path: Path) -> None:
    """+rocm10.0 sorts below +rocm7.14 (PEP 440 compares 'rocm10' with 'rocm7' as text)."""
    cfg = config.load(cwd=tmp_path, env={}, flags={})
    ctx = context.resolve(cfg)
    files = {"small/__init__.py": b"x = 1\n"}
    old = make_wheel(tmp_path / "a", "small", "1.0+rocm7.14", files)
    assert not report.inspect_wheel(old, ctx).data.get("warnings")
    new = make_wheel(tmp_path / "b", "small", "1.0+rocm10.0", files)
    data = report.inspect_wheel(new, ctx).data
    (warning,) = data["warnings"]
    assert "sorts below a +rocm7/8/9 wheel" in warning
    assert any("warning: 1.0+rocm10.0: PEP 440" in line for line in report.render(data))


def test_targets_are_listed_not_called_extra_when_none_was_asked_for(
    run_cli, libs: dict[str, Path], tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    wheel = make_wheel(tmp_path, "kernels", "1.0", {"kernels/libplain.so": libs["plain"]})
    text = run_cli(["inspect", str(wheel)], cwd=tmp_path).stdout
    rows = [line for line in text.splitlines() if line.startswith("  gfx")]
    assert len(rows) == 3, text
    assert not any("extra" in row or "requested" in row for row in rows), text
    asked = run_cli(["inspect", str(wheel), "--require-arch", "gfx90a"], cwd=tmp_path).stdout
    marks = {
        line.split()[0]: line.split()[1] for line in asked.splitlines() if line.startswith("  gfx")
    }
    assert marks == {"gfx90a": "requested", "gfx1030": "extra", "gfx906": "extra"}, asked


def test_a_cpu_torch_is_called_cpu_only_not_hip_not_recorded(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # What a CPU torch records: hip None in version.py, USE_ROCM OFF in the build strings.
    macros = (
        '#define CAFFE2_BUILD_STRINGS { \\\n  { "USE_ROCM", "OFF" }, \\\n'
        '  { "USE_CUDA", "OFF" }, \\\n}\n'
    )
    files = {
        "torch/__init__.py": b"",
        "torch/version.py": b"__version__ = '2.9.0+cpu'\nhip = None\ncuda = None\n",
        "torch/include/caffe2/core/macros.h": macros.encode(),
    }
    wheel = make_wheel(tmp_path, "torch", "2.9.0+cpu", files)
    text = run_cli(["inspect", str(wheel)], cwd=tmp_path).stdout
    assert "HIP: none (a CPU-only wheel: no HIP, no device code)" in text, text
    assert "not recorded" not in text.split("HIP:")[1].splitlines()[0]
