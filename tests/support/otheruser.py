"""Running rocm-build as another user (nobody), from a checkout that user may not be able to read.

A clone often lies in a private folder (root's home, any home made with mode 0700), and its
editable install points into it, so nobody cannot import rocm_build from it. The session fixture
``nobody_python`` makes what that user needs: a venv in a folder everyone may enter, holding a
copy of the working tree's package (a non-editable install of it) and of the installed
distributions it requires. Tests that run as nobody use that Python, and copy (or hard-link) the
files they hand to it into a readable folder as well.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO

NOBODY_UID = 65534


def as_nobody() -> list[str]:
    """The command prefix that runs a program as nobody, or a skip that says what is missing."""
    if os.geteuid() != 0:
        pytest.skip("runs rocm-build as another user, which needs root: run the tests as root")
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={NOBODY_UID}", f"--regid={NOBODY_UID}", "--clear-groups"]
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "nobody", "--"]
    pytest.skip("neither setpriv nor runuser is installed: install util-linux")


def readable_folder(prefix: str) -> Path:
    """A new folder in the system's temporary folder that every user may enter and read."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))
    path.chmod(0o755)
    return path


def link_copy(source: Path, dest: Path) -> None:
    """A hard-link copy of the folder ``source`` at ``dest``: cheap, and reachable through
    ``dest``'s parents whatever the folders above ``source`` allow."""
    done = subprocess.run(
        ["cp", "-al", str(source), str(dest)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(
            f"cannot hard-link {source} into {dest.parent} ({done.stderr.strip()[-60:]}): "
            "set TMPDIR to a folder on the test cache's file system"
        )


def _requirement_closure(name: str) -> list[metadata.Distribution]:
    """The installed distributions ``name`` needs to run (its extras left out), itself first."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _copy_installed(dist: metadata.Distribution, venv: Path) -> None:
    """Copy one installed distribution's files to the same place under ``venv``."""
    prefix = Path(sys.prefix).resolve()
    for file in dist.files or []:
        source = Path(str(dist.locate_file(file))).resolve()
        if "__pycache__" in source.parts or not source.is_file():
            continue
        if not source.is_relative_to(prefix):
            continue  # rocm-build's own package, installed editable: copied from the tree
        dest = venv / source.relative_to(prefix)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest)


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _everyone_may_reach(path: Path) -> bool:
    """Whether every folder above ``path`` lets other users through (o+x)."""
    return all(p.stat().st_mode & 0o001 for p in path.resolve().parents)


def base_python() -> str:
    """This Python's interpreter, or another build of the same version (the copied extension
    modules need its ABI) that other users can reach: a Python installed under a private home
    (pyenv's under /root) lets nobody run it only where no user namespace re-checks the path."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [Path(sys.base_prefix) / "bin" / version]
    candidates += [Path(d) / version for d in ("/usr/bin", "/usr/local/bin")]
    for candidate in candidates:
        if candidate.is_file() and _everyone_may_reach(candidate):
            return str(candidate)
    return sys.executable


@pytest.fixture(scope="session")
def nobody_python() -> Iterator[Path]:
    """A Python that nobody may run, with this working tree's rocm_build and its dependencies."""
    prefix = as_nobody()
    base = readable_folder("rb-nobody-py-")
    try:
        venv = base / "venv"
        subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        for dist in _requirement_closure("rocm-build")[1:]:
            _copy_installed(dist, venv)
        site = _site_packages(python)
        shutil.copytree(  # with its package data: the smoke suite, the shipped series
            REPO / "rocm_build", site / "rocm_build", ignore=shutil.ignore_patterns("__pycache__")
        )
        for path in base.rglob("*"):  # a umask of 077 would keep them from nobody
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        probe = subprocess.run(
            [*prefix, str(python), "-c", "import rocm_build.cli"],
            cwd=base,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(
                f"nobody cannot run {sys.executable}'s base Python (is it in a private folder?): "
                f"use a Python installed outside one ({probe.stderr.strip()[-80:]})"
            )
        yield python
    finally:
        shutil.rmtree(base)
