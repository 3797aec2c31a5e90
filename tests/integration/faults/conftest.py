"""A small real wheel to bundle (a HIP extension compiled with the real ROCm tree's clang, which
bundles eight ROCm libraries), the command that bundles it, and wheel checks."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.bundle.conftest import INIT, KERNEL, compile_hip
from tests.integration.bundle.helpers import make_wheel


@pytest.fixture(scope="session")
def small_wheel(rocm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("faultwheel")
    so = compile_hip(rocm_tree, KERNEL, base / "_kern.so")
    files: dict[str, bytes | Path] = {"hipext/__init__.py": INIT.encode(), "hipext/_kern.so": so}
    return make_wheel(base / "dist", "hipext", "1.0.0", files)


@dataclass
class Bundler:
    """``rocm-build bundle`` of one wheel into one output folder, as a real process."""

    wheel: Path
    rocm: Path
    out: Path
    home: Path  # locks live under it (XDG_RUNTIME_DIR), away from the user's

    def argv(self, *extra: str, level: int = 1) -> list[str]:
        return [
            sys.executable, "-m", "rocm_build", "-q", *extra, "bundle", "-z", str(level),
            str(self.wheel), "--rocm", str(self.rocm), "--output-dir", str(self.out),
        ]  # fmt: skip

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ROCM_BUILD_", "RB_FAULT_"))
            and k not in ("PYTORCH_ROCM_ARCH", "ROCM_PATH", "ROCM_HOME")
        }
        env.update(
            PYTHONPATH=str(REPO),
            XDG_RUNTIME_DIR=str(self.home),
            ROCM_BUILD_BUNDLE_DLOPEN_LIBS="libhiprtc-builtins.so*",
        )
        env.update(extra)
        return env

    def run(self, *extra: str, level: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*extra, level=level), env=self.env(**env), capture_output=True,
            text=True, check=False, timeout=300,
        )  # fmt: skip

    def start(self, *extra: str, level: int = 1, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*extra, level=level), env=self.env(**env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip


@pytest.fixture
def bundler(small_wheel: Path, rocm_tree: Path, tmp_path: Path) -> Bundler:
    (tmp_path / "run").mkdir()
    return Bundler(small_wheel, rocm_tree, tmp_path / "out", tmp_path / "run")


def check_wheel(path: Path) -> None:
    """A complete wheel: every member reads back with its CRC, and RECORD lists every member
    with the sha256 and size of its bytes."""
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None, f"{path.name}: a member fails its CRC"
        names = zf.namelist()
        [record] = [n for n in names if n.endswith(".dist-info/RECORD")]
        rows = {r[0]: r for r in csv.reader(io.StringIO(zf.read(record).decode()))}
        assert set(rows) == set(names), f"{path.name}: RECORD and the members differ"
        for name in names:
            if name == record:
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert rows[name][1] == "sha256=" + digest.decode(), f"{name}: RECORD hash"
            assert rows[name][2] == str(len(data)), f"{name}: RECORD size"


def strays(folder: Path) -> list[str]:
    """Anything in the output folder that is not a wheel: temporary files, extract folders."""
    if not folder.exists():
        return []
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".whl"))
