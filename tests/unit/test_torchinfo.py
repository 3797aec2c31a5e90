"""What a torch wheel says it was built with (macros.h, version.py, aotriton in torch/lib), read
from real wheels without importing them; the run report keeps it per torch wheel."""

from __future__ import annotations

from pathlib import Path

from rocm_build import config
from rocm_build.commands import runreport
from rocm_build.run import context
from rocm_build.wheel import torchinfo
from rocm_build.wheel.wheelread import WheelReader
from tests.support.wheels import make_wheel

# The shape torch's CMake writes (configure_file of caffe2/core/macros.h.in), shortened.
MACROS_29 = """#pragma once
/* #undef TORCH_DISABLE_GPU_ASSERTS */

// Useful build settings that are recorded in the compiled binary
// torch.__config__.show()
#define CAFFE2_BUILD_STRINGS { \\
  {"TORCH_VERSION", "2.9.1"}, \\
  {"CXX_FLAGS", " -DUSE_ROCM -O2 \\"quoted\\""}, \\
  {"USE_ROCM", "ON"}, \\
  {"ROCM_VERSION", "6.4.1"}, \\
  {"USE_ROCM_KERNEL_ASSERT", "ON"}, \\
}
"""
# Older torch: no USE_ROCM_KERNEL_ASSERT string, the define alone says it.
MACROS_OLD = """#pragma once
#define TORCH_DISABLE_GPU_ASSERTS
#define CAFFE2_BUILD_STRINGS { \\
  {"USE_ROCM", "ON"}, \\
}
"""
VERSION = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']
__version__ = '2.9.1+rocm6.4'
debug = False
cuda: Optional[str] = None
git_version = 'd38164a545b4a4e4e0cf73ce67173f70574890b6'
hip: Optional[str] = '6.4.43482-0f2d60242'
"""


def _features(tmp_path: Path, members: dict[str, str]) -> dict[str, object] | None:
    wheel = make_wheel(tmp_path / "torch-2.9.1-cp311-cp311-linux_x86_64.whl", members)
    with WheelReader(wheel) as reader:
        return torchinfo.build_features(reader, [m.name for m in reader.members])


def test_a_rocm_torch_with_asserts_and_flash_attention(tmp_path: Path) -> None:
    got = _features(
        tmp_path,
        {
            torchinfo.MACROS: MACROS_29,
            torchinfo.VERSION_FILE: VERSION,
            "torch/lib/libaotriton_v2.so.0.9": "elf",
            "torch/lib/aotriton.images/amd-gfx942/flash/a.aks2": "x",
            "torch/lib/aotriton.images/amd-gfx11xx/flash/b.aks2": "x",
        },
    )
    assert got == {
        "read_from": [torchinfo.MACROS, torchinfo.VERSION_FILE],
        "hip": "6.4.43482-0f2d60242",
        "rocm": True,
        "rocm_version": "6.4.1",
        "gpu_asserts": True,
        "flash_attention": True,
        "aotriton": ["libaotriton_v2.so.0.9"],
        "aotriton_images": ["amd-gfx11xx", "amd-gfx942"],
    }


def test_an_older_torch_says_asserts_by_its_define(tmp_path: Path) -> None:
    got = _features(tmp_path, {torchinfo.MACROS: MACROS_OLD})
    assert got is not None
    assert got["gpu_asserts"] is False
    assert got["hip"] is None
    assert got["flash_attention"] is False


def test_not_a_torch_wheel(tmp_path: Path) -> None:
    assert _features(tmp_path, {"torch/__init__.py": ""}) is None
    assert torchinfo.version_values("hip = (") == {}  # unparsable: nothing, no traceback


def test_run_report_keeps_the_features_asked_and_each_torch_wheels_own(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    ctx = context.resolve(cfg)
    wheel = make_wheel(
        tmp_path / "torch-2.9.1-cp311-cp311-linux_x86_64.whl",
        {torchinfo.MACROS: MACROS_29, torchinfo.VERSION_FILE: VERSION},
    )
    data = runreport.collect(ctx, {"built": [str(wheel)]}, [], ok=True)
    assert data["features"]["gpu_asserts"] is True
    assert data["features"]["flash_attention"] == "auto"
    (entry,) = data["wheels"]["built"]
    assert entry["build_features"]["gpu_asserts"] is True
    assert entry["build_features"]["hip"] == "6.4.43482-0f2d60242"
    text = runreport.render_markdown(data)
    assert "gpu_asserts = True" in text
    assert f"{wheel.name}: flash attention off (aotriton images: none), GPU asserts on" in text
