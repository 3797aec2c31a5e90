"""ROCm tree facts, validation and the composed build environment (files in tmp_path only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.common.errors import ConfigError, RocmTreeError
from rocm_build.rocm import dist
from tests.support.trees import make_tree

CFG = config.load(cwd=Path("/nonexistent-cwd"), env={})


def test_version_sources_in_order(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    assert dist.open_tree(root).version == "6.4.1"
    (root / ".info" / "version").unlink()
    header = root / "include" / "rocm-core" / "rocm_version.h"
    header.parent.mkdir(parents=True)
    header.write_text(
        "#define ROCM_VERSION_MAJOR   7\n"
        "#define ROCM_VERSION_MINOR   1\n"
        "#define ROCM_VERSION_PATCH 0\n"
    )
    tree = dist.open_tree(root)
    assert (tree.version, tree.version_source) == ("7.1.0", "include/rocm-core/rocm_version.h")
    header.unlink()
    hip = root / "include" / "hip" / "hip_version.h"
    hip.parent.mkdir(parents=True)
    hip.write_text(
        "#define HIP_VERSION_MAJOR 5\n"
        "#define HIP_VERSION_MINOR 2\n"
        "#define HIP_VERSION_PATCH 21153\n"
    )
    assert dist.open_tree(root).version == "5.2"


def test_targets_from_dist_info_win_over_bitcode(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    tree = dist.open_tree(root)
    assert tree.bitcode_targets == ("gfx90a", "gfx1030")
    assert tree.supports("gfx90a:xnack-")
    assert not tree.supports("gfx942")
    info = root / "share" / "therock" / "dist_info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({"dist_amdgpu_targets": "gfx942;gfx1100"}))
    tree = dist.open_tree(root)
    assert tree.supports("gfx942")
    assert not tree.supports("gfx90a")
    assert tree.layout == "therock"


def test_sdk_devel_folder_is_found_in_site_packages(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    make_tree(site / "_rocm_sdk_devel")
    found = dist.find_tree(str(site))
    assert found.name == "_rocm_sdk_devel"
    assert dist.open_tree(found).layout == "rocm-sdk-devel"


def test_sdk_devel_in_a_venv_and_not_yet_expanded(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.12" / "site-packages"
    (site / "rocm_sdk_devel").mkdir(parents=True)
    with pytest.raises(RocmTreeError, match="rocm-sdk path --root"):
        dist.find_tree(str(venv))
    make_tree(site / "_rocm_sdk_devel")
    assert dist.find_tree(str(venv)) == site / "_rocm_sdk_devel"


def test_validation_reports_every_problem_at_once(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    (root / "lib" / "llvm" / "bin" / "clang").unlink()
    (root / "lib" / "libamdhip64.so.6").unlink()
    check = dist.validate(dist.open_tree(root), [CFG.project("torch")], ["gfx90a", "gfx1100"])
    text = " | ".join(check.problems)
    assert "no ROCm clang" in text
    assert "no HIP runtime" in text
    assert "miopen" in text
    assert "hipblaslt" in text
    assert "rocblas" not in text.split("needs CMake packages")[1].split("|")[0]  # case-insensitive
    assert "cannot target gfx1100" in text
    assert any("hipcc" in w for w in check.warnings)
    with pytest.raises(RocmTreeError, match=r"4 problems: .*no ROCm clang.*gfx1100"):
        dist.require_valid(check)


def test_complete_tree_is_valid(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    spec = CFG.project("torchvision")
    check = dist.validate(dist.open_tree(root), [spec], ["gfx90a", "gfx1030"])
    assert check.ok, check.problems
    dist.require_valid(check)


def test_missing_tree_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(RocmTreeError, match="--rocm"):
        dist.find_tree(str(tmp_path / "nope"))


def test_environment_is_composed_and_extends_the_users(tmp_path: Path) -> None:
    tree = dist.open_tree(make_tree(tmp_path / "t"))
    (tree.root / "lib" / "rocm_sysdeps" / "include").mkdir(parents=True)
    tree = dist.open_tree(tree.root)
    user = {
        "PATH": "/usr/bin:/bin",
        "CMAKE_PREFIX_PATH": "/my/prefix",
        "LD_LIBRARY_PATH": "/my/lib",
        "CFLAGS": "-O1",
        "CXXFLAGS": "-DUSER=1 -g",
        "LDFLAGS": "-L/my/lib",
        "ROCM_PATH": "/opt/rocm-other",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_HOME": "/usr/local/cuda",
        "HOME": "/home/u",
    }
    env = dist.compose_env(
        user,
        tree=tree,
        targets=["gfx90a", "gfx1030"],
        jobs=3,
        versions={"PYTORCH_BUILD_VERSION": "2.9.0+rocm6.4.1"},
        extra={"CXXFLAGS": "-DEXTRA", "MY_FLAG": "1"},
        path_prepend=[Path("/venv/bin")],
    )
    e = env.env
    root = str(tree.root)
    assert e["ROCM_PATH"] == e["ROCM_HOME"] == e["HIP_PATH"] == root
    assert e["HIP_CLANG_PATH"] == f"{root}/lib/llvm/bin"
    assert e["HIP_DEVICE_LIB_PATH"] == f"{root}/lib/llvm/amdgcn/bitcode"
    assert e["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx1030"
    assert (e["MAX_JOBS"], e["CMAKE_BUILD_PARALLEL_LEVEL"]) == ("3", "3")
    assert (e["USE_ROCM"], e["USE_CUDA"], e["FORCE_CUDA"], e["BUILD_TEST"]) == ("1", "0", "1", "0")
    assert e["HIP_PLATFORM"] == "amd"
    assert e["PATH"] == f"/venv/bin:{root}/bin:/usr/bin:/bin"
    assert e["CMAKE_PREFIX_PATH"] == f"{root}:/my/prefix"
    assert e["LD_LIBRARY_PATH"] == f"{root}/lib:{root}/lib/rocm_sysdeps/lib:/my/lib"
    assert e["CFLAGS"] == f"-O1 -I{root}/lib/rocm_sysdeps/include"
    assert e["CXXFLAGS"] == f"-DUSER=1 -g -I{root}/lib/rocm_sysdeps/include -DEXTRA"
    assert e["LDFLAGS"] == f"-L/my/lib -L{root}/lib/rocm_sysdeps/lib"
    assert e["PYTORCH_BUILD_VERSION"] == "2.9.0+rocm6.4.1"
    assert e["MY_FLAG"] == "1"
    assert e["HOME"] == "/home/u"
    assert "HIP_VISIBLE_DEVICES" not in e
    assert "CUDA_HOME" not in e
    assert set(env.removed) == {"ROCM_PATH", "HIP_VISIBLE_DEVICES", "CUDA_HOME"}
    assert "HOME" not in env.changed
    assert env.changed["ROCM_PATH"] == root


def test_local_version_label() -> None:
    # PyTorch's form: major.minor (torch-2.14.0+rocm7.14), a nightly tree's version too
    assert dist.local_version_label("7.14.0", "") == "+rocm7.14"
    assert dist.local_version_label("7.14.0a20260801", "") == "+rocm7.14"
    assert dist.local_version_label("6.4.1", "") == "+rocm6.4"
    assert dist.local_version_label("10.0.0", "") == "+rocm10.0"
    assert dist.local_version_label("", "") == "+rocm"
    # the user's suffix stays theirs
    assert dist.local_version_label("6.4.1", "rocm6.4.1.custom") == "+rocm6.4.1.custom"
    assert dist.local_version_label("6.4.1", "+mine") == "+mine"
    # the matrix's default suffix: the tree's version filled in by build, as the label has it
    assert dist.local_version_label("6.4.1", "+rocm{rocm}.gfx94X") == "+rocm6.4.gfx94X"


def test_url_sha256_fragment() -> None:
    sha = "ab" * 32
    assert dist._split_url(f"https://x/t.tar.gz#sha256={sha}", "") == ("https://x/t.tar.gz", sha)
    with pytest.raises(ConfigError, match="disagrees"):
        dist._split_url(f"https://x/t.tar.gz#sha256={sha}", "cd" * 32)
    with pytest.raises(ConfigError, match="64 hex"):
        dist._split_url("https://x/t.tar.gz", "xyz")
    assert dist.is_url("https://x/t.tar.gz")
    assert not dist.is_url("/opt/rocm")


def _warnings(root: Path, project: str) -> str:
    return "\n".join(dist.validate(dist.open_tree(root), [CFG.project(project)], []).warnings)


def test_kineto_probe_takes_rocprofiler_sdk_or_roctracer(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    assert "Kineto" in _warnings(root, "torch")  # neither: tracing is left out
    sdk = root / "lib" / "librocprofiler-sdk.so.1"
    sdk.write_bytes(b"")
    assert "Kineto" not in _warnings(root, "torch")  # ROCm 7: rocprofiler-sdk
    sdk.unlink()
    (root / "lib" / "libroctracer64.so.4").write_bytes(b"")
    assert "Kineto" not in _warnings(root, "torch")  # ROCm 6: roctracer


def test_hipdnn_is_reported(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    assert "USE_HIPDNN=0" in _warnings(root, "torch")
    (root / "lib" / "cmake" / "hipdnn_frontend").mkdir(parents=True)
    assert "hipDNN" not in _warnings(root, "torch")


def test_torchvision_says_it_links_rocjpeg_when_the_tree_has_it(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "t")
    assert "rocjpeg" not in _warnings(root, "torchvision")
    header = root / "include" / "rocjpeg" / "rocjpeg.h"
    header.parent.mkdir(parents=True)
    header.write_text("")
    text = _warnings(root, "torchvision")
    assert "include/rocjpeg/rocjpeg.h is in the tree, so the build links librocjpeg" in text
    assert "TORCHVISION_USE_ROCJPEG=0 leaves it out" in text


def test_torchaudio_gets_therocks_switches() -> None:
    assert CFG.project("torchaudio").reference_env == ("USE_FFMPEG=1", "USE_OPENMP=1")
