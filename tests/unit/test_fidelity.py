"""docs/fidelity.md names every variable `build` sets or clears, for every project: the table is
checked against the plan the build makes (pure: no processes), with a tree that has every part the
plan reads (sysdeps, host-math OpenBLAS, pkg-config files) and with and without a pre-fetched
aotriton, so every variable the code can set shows up."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from rocm_build import config
from rocm_build.building import buildplan, cache
from rocm_build.rocm import dist

from .test_dist import make_tree

DOC = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"


def documented() -> set[str]:
    """The names (and NAME_* patterns) in the first column of the document's tables."""
    names: set[str] = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*\*?)`", first))
    return names


def set_by_build(tmp_path: Path) -> set[str]:
    root = make_tree(tmp_path / "rocm")
    for rel in ("lib/rocm_sysdeps/include", "lib/rocm_sysdeps/lib/pkgconfig", "lib/host-math/lib"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "lib" / "host-math" / "lib" / "librocm-openblas.so").write_bytes(b"")
    tree = dist.open_tree(root)
    cfg = config.load(cwd=tmp_path, env={})
    specs = cfg.selected_projects(["torch", "torchvision", "torchaudio"])
    src = tmp_path / "src"
    for spec in specs:
        (src / spec.name).mkdir(parents=True, exist_ok=True)
        (src / spec.name / "version.txt").write_text("1.0.0\n")
    names: set[str] = set()
    prefix = tmp_path / "aotriton"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libaotriton_v2.so").write_bytes(b"")
    for aotriton in ("auto", str(prefix)):
        plan = buildplan.make_plan(
            specs=specs,
            src_dir=src,
            work_dir=tmp_path / "work",
            output_dir=tmp_path / "wheels",
            tree=tree,
            targets=("gfx90a",),
            env={"PATH": "/usr/bin", "HOME": str(tmp_path / "home")},
            base_python=Path("/usr/bin/python3"),
            venv_setting="create",
            cores=4,
            memory=None,
            aotriton=aotriton,
        )
        for step in plan.steps:
            names |= set(step.changed) | set(step.pin_env)
    return names


def test_every_variable_build_sets_is_in_the_fidelity_table(tmp_path: Path) -> None:
    table = documented()
    sets = set_by_build(tmp_path)
    assert {"ROCM_SOURCE_DIR", "USE_NUMA", "BLAS", "AOTRITON_INSTALLED_PREFIX"} <= sets
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
    assert set(cache.LAUNCHER_VARS) <= table
    assert {"CCACHE_*", "SCCACHE_*"} <= table
