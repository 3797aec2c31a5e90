"""Build shapes (issue 32): setup.py (torch 2.9-2.12), native CMake HIP (2.13), scikit-build-core
(2.14), told from the checkout, and the route each setting takes to CMake in each."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rocm_build.building import hiplauncher, shapes
from rocm_build.building.features import GPU_ASSERTS_CMAKE
from rocm_build.building.plan import Plan, _with_shape, add_env
from rocm_build.common.errors import BuildFailed
from rocm_build.rocm import dist
from tests.support.buildplans import build_plan, project_sources

SKBUILD = (
    '[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
)


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_each_shape_is_told_from_the_checkout(tmp_path: Path) -> None:
    old = _project(tmp_path / "a", {"setup.py": "", "CMakeLists.txt": "project(Torch CXX C)\n"})
    assert shapes.detect(old, "torch").name == shapes.SETUP_PY
    native = _project(
        tmp_path / "b",
        {"setup.py": "", "CMakeLists.txt": "if(USE_ROCM)\n  enable_language( HIP)\n"},
    )
    shape = shapes.detect(native, "torch")
    assert shape.name == shapes.NATIVE_HIP
    assert "enable_language(HIP)" in shape.describe()
    skb = _project(tmp_path / "c", {"setup.py": "", "pyproject.toml": SKBUILD})
    assert shapes.detect(skb, "torch").name == shapes.SCIKIT_BUILD_CORE
    plain = _project(tmp_path / "d", {"pyproject.toml": '[build-system]\nbuild-backend = "x"\n'})
    assert shapes.detect(plain, "p").name == shapes.SETUP_PY


def test_a_shape_that_cannot_be_told_is_one_line_exit_9(tmp_path: Path) -> None:
    bare = _project(tmp_path / "e", {"pyproject.toml": "[tool.x]\n"})
    with pytest.raises(BuildFailed, match="cannot tell how") as err:
        shapes.detect(bare, "torch")
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 9


def test_native_hip_takes_the_sysdeps_headers_by_include_path_variables() -> None:
    shape = shapes.Shape(shapes.NATIVE_HIP, "test")
    env = {"CPLUS_INCLUDE_PATH": "/u/inc", "CMAKE_HIP_COMPILER_LAUNCHER": "/x/ccache"}
    found = shapes.routes(shape, env, Path("/r/lib/rocm_sysdeps/include"))
    assert found.add == {
        "CPLUS_INCLUDE_PATH": "/r/lib/rocm_sysdeps/include:/u/inc",
        "C_INCLUDE_PATH": "/r/lib/rocm_sysdeps/include",
    }
    assert found.config_settings == ()
    assert any("CMAKE_HIP_COMPILER_LAUNCHER" in n for n in found.notes)
    setup = shapes.routes(shapes.Shape(shapes.SETUP_PY, "t"), env, Path("/r"))
    assert setup.add == {}
    assert setup.drop == ()


def test_scikit_build_core_takes_gpu_asserts_as_cmake_defines() -> None:
    shape = shapes.Shape(shapes.SCIKIT_BUILD_CORE, "test")
    env = {"CMAKE_PROJECT_INCLUDE_BEFORE": str(GPU_ASSERTS_CMAKE)}
    found = shapes.routes(shape, env, None)
    assert found.config_settings == (
        "--config-settings=cmake.define.USE_ROCM_KERNEL_ASSERT=ON",
        "--config-settings=cmake.define.TORCH_USE_HIP_DSA=ON",
    )
    assert found.drop == ("CMAKE_PROJECT_INCLUDE_BEFORE",)
    # asserts off (or the user's own include): nothing moves
    assert shapes.routes(shape, {}, None).config_settings == ()


def test_the_plan_names_the_shape_and_builds_skbuild_through_pip(tmp_path: Path) -> None:
    cfg, src = project_sources(tmp_path)
    (src / "torch" / "pyproject.toml").write_text(SKBUILD)
    made = build_plan(cfg, src, tmp_path)
    torch = replace(
        made.steps[0],
        env={**made.steps[0].env, "CMAKE_PROJECT_INCLUDE_BEFORE": str(GPU_ASSERTS_CMAKE)},
    )
    tree = dist.open_tree(tmp_path / "rocm")
    step = _with_shape(torch, tree)
    assert step.shape is not None
    assert step.shape.name == shapes.SCIKIT_BUILD_CORE
    assert "--config-settings=cmake.define.USE_ROCM_KERNEL_ASSERT=ON" in step.command
    assert step.command[1:4] == ("-m", "pip", "wheel")
    assert "CMAKE_PROJECT_INCLUDE_BEFORE" not in step.env
    assert "--config-settings=sdist.include=torch/version.py" in step.command
    assert any(n.startswith("build shape: scikit-build-core") for n in step.notes)
    assert Plan.as_json(replace(made, steps=(step,)))["projects"][0]["shape"] == (
        "scikit-build-core"
    )


def test_the_hipcc_wrappers_stay_with_the_hipcc_shape(tmp_path: Path) -> None:
    """Native HIP compiles with CMake's clang and its HIP launcher: HIP_CLANG_PATH goes back to
    the tree's clang, so nothing is cached twice; a setup.py step keeps the wrappers."""
    cfg, src = project_sources(tmp_path)
    (src / "torch" / "setup.py").write_text("")
    (src / "torch" / "CMakeLists.txt").write_text("enable_language(HIP)\n")
    (src / "torchvision" / "setup.py").write_text("")
    made = build_plan(cfg, src, tmp_path)
    tree = dist.open_tree(tmp_path / "rocm")
    assert tree.clang_dir is not None
    launcher = hiplauncher.HipLauncher(
        "HIP_CLANG_PATH", Path("/x/ccache"), tree.clang_dir, tmp_path / "w" / "bin"
    )
    steps = [add_env(replace(s, hip_launcher=launcher), launcher.env) for s in made.steps]
    torch, vision = (_with_shape(s, tree) for s in steps)
    assert torch.shape is not None
    assert torch.shape.name == shapes.NATIVE_HIP
    assert torch.hip_launcher is None
    assert torch.env["HIP_CLANG_PATH"] == str(tree.clang_dir)
    assert vision.hip_launcher == launcher
    assert vision.env["HIP_CLANG_PATH"] == str(tmp_path / "w" / "bin")


def test_cmake_hip_shapes_take_the_trees_clang_by_hipcxx() -> None:
    """CMake's HIP language finds clang by HIPCXX or `hipconfig --hipclangpath`; a tree without
    hipconfig (Debian's) needs HIPCXX. The hipcc shape keeps hipcc's own search."""
    env = {"HIP_CLANG_PATH": "/r/lib/llvm/bin"}
    for name in (shapes.NATIVE_HIP, shapes.SCIKIT_BUILD_CORE):
        found = shapes.routes(shapes.Shape(name, "t"), env, None)
        assert found.add == {"HIPCXX": "/r/lib/llvm/bin/clang++"}
    setup = shapes.routes(shapes.Shape(shapes.SETUP_PY, "t"), env, None)
    assert "HIPCXX" not in setup.add
    mine = {**env, "HIPCXX": "/mine/clang++"}
    assert shapes.routes(shapes.Shape(shapes.NATIVE_HIP, "t"), mine, None).add == {}


def test_scikit_build_core_keeps_torchs_generated_version_file() -> None:
    """torch/version.py is written into the checkout and listed in its .gitignore; only
    sdist.include brings it past scikit-build-core's ignore files into the wheel."""
    shape = shapes.Shape(shapes.SCIKIT_BUILD_CORE, "test")
    found = shapes.routes(shape, {}, None, "torch")
    assert found.config_settings == ("--config-settings=sdist.include=torch/version.py",)
    assert any("torch/version.py" in n for n in found.notes)
    assert shapes.routes(shape, {}, None, "torchvision").config_settings == ()
    native = shapes.routes(shapes.Shape(shapes.NATIVE_HIP, "t"), {}, None, "torch")
    assert native.config_settings == ()
