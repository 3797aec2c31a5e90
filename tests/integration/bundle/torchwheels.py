"""The wheels the Triton tests put beside each other: a fixture torch whose HIP library the bundle
makes fat (a runtime-only tree: no unversioned libamdhip64.so), and the real triton 3.9.0 wheel
from the registry, downloaded once into the shared test cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import CliRunner, _test_cache

from .helpers import make_wheel

TORCH_INIT = """
import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_hip.so"))
"""


def bundled_torch(
    run_cli: CliRunner,
    hip_ext_so: Path,
    tree: Path,
    tmp_path: Path,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """The fixture torch 2.9.0 (``extra`` members beside its ``__init__``), bundled with ``tree``
    made runtime-only."""
    wheel = make_wheel(
        tmp_path / "dist",
        "torch",
        "2.9.0",
        {
            "torch/__init__.py": TORCH_INIT.encode(),
            **(extra or {}),
            "torch/lib/libtorch_hip.so": hip_ext_so,
        },
    )
    # A runtime-only tree (as TheRock's rocm[libraries] package): no unversioned development
    # name libamdhip64.so, so nothing but the rule for exact names makes the alias.
    (tree / "lib" / "libamdhip64.so").unlink()
    out = tmp_path / "out"
    res = run_cli(
        ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "1"],
        cwd=tmp_path,
        env={"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libamd_comgr.so*"},
    )
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("torch-*.whl")
    return fat


def triton_wheel(tmp_path: Path) -> Path:
    """The real triton 3.9.0 wheel (286 MB), downloaded once into the shared test cache."""
    folder = _test_cache() / "triton-3.9.0"
    found = sorted(folder.glob("triton-3.9.0-*.whl"))
    if found:
        return found[0]
    scratch = _test_cache() / f".triton-3.9.0.{os.getpid()}"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "triton==3.9.0", "-d", str(scratch)],
        check=True,
    )  # fmt: skip
    try:
        scratch.rename(folder)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)  # another run put it there first
    return sorted(folder.glob("triton-3.9.0-*.whl"))[0]
