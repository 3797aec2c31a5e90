"""docs/fidelity.md names every variable `build` sets or clears, for every project: the table is
checked against the plans the build makes (``building.plan``, the path ``build`` takes: no
processes), with a tree that has every part the plan reads (sysdeps, host-math OpenBLAS,
pkg-config files) and a torch checkout with its composable_kernel submodule, with and without a
pre-fetched aotriton, with Triton in the run and every feature on, and every feature off, so
every variable the code can set shows up."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path

from rocm_build import building, config
from rocm_build.building import compilercache
from rocm_build.building.features import ATTENTION
from rocm_build.rocm import dist
from rocm_build.run import context
from tests.support.trees import make_tree

DOC = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"
PROJECTS = ("torch", "torchvision", "torchaudio")
#: Every build feature on (flash attention needs Triton in the run and aotriton at hand).
ALL_FEATURES = {
    "features.flash_attention": "on",
    "features.gpu_asserts": True,
    "features.ck_sdpa": True,
    "features.ck_gemm": True,
    "features.mslk": True,
}
#: Every switch feature off (a false setting writes its switch).
NO_FEATURES = {"features.ck_sdpa": False, "features.ck_gemm": False, "features.mslk": False}


def documented() -> set[str]:
    """The names (and NAME_* patterns) in the first column of the document's tables."""
    names: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?)`", first))
    return names


def _tree(tmp_path: Path) -> Path:
    """A tree with every part a plan of every built-in project reads."""
    root = make_tree(tmp_path / "rocm")
    for rel in ("lib/rocm_sysdeps/include", "lib/rocm_sysdeps/lib/pkgconfig", "lib/host-math/lib"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "lib" / "host-math" / "lib" / "librocm-openblas.so").write_bytes(b"")
    cfg = config.load(cwd=tmp_path, env={})
    for spec in cfg.projects.values():
        for package in spec.cmake_packages:
            (root / "lib" / "cmake" / package).mkdir(parents=True, exist_ok=True)
    return root


def _plan(
    tmp_path: Path, root: Path, names: tuple[str, ...], flags: Mapping[str, object]
) -> building.Plan:
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path / "home")}
    all_flags = {"rocm": str(root), "arch": "gfx90a", "build.cache": "none", **flags}
    ctx = context.resolve(config.load(cwd=tmp_path, env=env, flags=all_flags))
    specs = ctx.settings.selected_projects(list(names))
    for spec in specs:
        (ctx.src_dir / spec.name).mkdir(parents=True, exist_ok=True)
        (ctx.src_dir / spec.name / "version.txt").write_text("1.0.0\n")
        (ctx.src_dir / spec.name / "setup.py").write_text("")
    ck = ctx.src_dir / "torch" / "third_party" / "composable_kernel" / "include" / "ck"
    ck.mkdir(parents=True, exist_ok=True)
    (ck / "ck.hpp").write_bytes(b"")
    # what survey would ask git and ccache: no compiler cache, no tagged checkout
    return building.plan(
        ctx.decide(), specs, building.Survey(compilercache.CompilerCache("none"), {})
    )


def set_by_build(tmp_path: Path) -> set[str]:
    root = _tree(tmp_path)
    prefix = tmp_path / "aotriton"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libaotriton_v2.so").write_bytes(b"")
    runs: list[tuple[tuple[str, ...], Mapping[str, object]]] = [
        (PROJECTS, {"build.aotriton": "auto"}),  # the defaults: no aotriton at hand
        (PROJECTS, {"build.aotriton": str(prefix)}),
        (("triton", *PROJECTS), {"build.aotriton": str(prefix), **ALL_FEATURES}),
        (PROJECTS, NO_FEATURES),
    ]
    names: set[str] = set()
    for projects, flags in runs:
        plan = _plan(tmp_path, root, projects, flags)
        for step in plan.steps:
            names |= set(step.changed) | set(step.pin_env)
    return names


def test_every_variable_build_sets_is_in_the_fidelity_table(tmp_path: Path) -> None:
    table = documented()
    sets = set_by_build(tmp_path)
    # The plans went through every path: the tree's switches, the features and Triton's.
    assert {"ROCM_SOURCE_DIR", "USE_NUMA", "BLAS", "AOTRITON_INSTALLED_PREFIX"} <= sets
    assert {"USE_ROCM_CK_SDPA", "USE_ROCM_CK_GEMM", "CMAKE_PROJECT_INCLUDE_BEFORE"} <= sets
    assert {"USE_MSLK", "USE_FBGEMM_GENAI", "USE_FLASH_ATTENTION"} <= sets
    assert {"PYTORCH_EXTRA_INSTALL_REQUIREMENTS", "TRITON_WHEEL_VERSION_SUFFIX"} <= sets
    assert "TRITON_APPEND_CMAKE_ARGS" in sets
    # Only the compiler cache's families may stand for names (HIP_* is what is cleared).
    families = ("CCACHE_*", "SCCACHE_*")
    missing = sorted(
        v for v in sets if v not in table and not any(fnmatch.fnmatchcase(v, f) for f in families)
    )
    assert not missing, f"docs/fidelity.md lacks {', '.join(missing)}"


def test_cleared_and_cache_variables_are_in_the_fidelity_table() -> None:
    table = documented()
    for prefix in dist.LEAKY_PREFIXES:
        assert f"{prefix}*" in table, prefix
    assert set(dist.LEAKY_NAMES) <= table
    assert set(compilercache.LAUNCHER_VARS) <= table
    assert {"CCACHE_*", "SCCACHE_*"} <= table


def test_a_default_plan_writes_no_feature_switch_and_says_why(tmp_path: Path) -> None:
    """The references set none of torch's feature switches: nor does a default plan; each
    feature still says on or off, and why (gfx942: MSLK on; gfx1100: attention on)."""
    root = _tree(tmp_path)
    for isa in ("942", "1100"):
        (root / "lib" / "llvm" / "amdgcn" / "bitcode" / f"oclc_isa_version_{isa}.bc").write_bytes(
            b""
        )
    prefix = tmp_path / "aotriton"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libaotriton_v2.so").write_bytes(b"")
    flags = {"arch": "gfx942;gfx1100", "build.aotriton": str(prefix)}
    plan = _plan(tmp_path, root, ("torch",), flags)
    (torch,) = plan.steps
    switches = ("USE_ROCM_CK_SDPA", "USE_ROCM_CK_GEMM", "USE_MSLK", "USE_FBGEMM_GENAI", *ATTENTION)
    assert not [k for k in switches if k in torch.changed]
    assert torch.changed["AOTRITON_INSTALLED_PREFIX"] == str(prefix)
    said = {f["name"]: (f["on"], f["why"]) for f in plan.as_json()["projects"][0]["features"]}
    default = "the train's default for these targets"
    assert said == {
        "flash_attention": (True, default),
        "ck_sdpa": (True, default),
        "ck_gemm": (True, default),
        "mslk": (True, default),
        "gpu_asserts": (False, default),
    }
    # Without aotriton at hand the aotriton switch turns attention off (no download mid-build).
    bare = _plan(tmp_path, root, ("torch",), {"arch": "gfx942"})
    (step,) = bare.steps
    assert step.changed["USE_FLASH_ATTENTION"] == "0"
    (flash,) = [f for f in step.features if f.name == "flash_attention"]
    assert not flash.on
    assert "no aotriton at hand" in flash.why
