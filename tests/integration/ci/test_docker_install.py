"""The Docker image's install step, without Docker: the files docker/Dockerfile COPYs (what its
docker/Dockerfile.dockerignore lets into the build context) are laid out as in the image and
installed by the image's own pip command into a fresh venv, so the COPY lines cannot drift from
what pip needs (the package with its package data, the README it reads)."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.installed import installed_locations

DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / "docker" / "Dockerfile.dockerignore"


def copy_lines(text: str) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY instruction (flags such as --chown left out)."""
    copies = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"]:
            args = [w for w in words[1:] if not w.startswith("--")]
            copies.append((args[:-1], args[-1]))
    return copies


def _matches(pattern: str, path: str) -> bool:
    """A .dockerignore pattern against a context path: ``*`` within one name, ``**`` any number
    of names; a pattern that matches a folder matches everything in it."""
    pat, parts = pattern.strip("/").split("/"), path.split("/")

    def match(i: int, j: int) -> bool:
        if i == len(pat):
            return True  # the pattern matched a folder above (or the path itself)
        if pat[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and fnmatch.fnmatchcase(parts[j], pat[i]) and match(i + 1, j + 1)

    return match(0, 0)


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` out of the context: the last pattern that matches decides."""
    out = False
    for pattern in patterns:
        exception = pattern.startswith("!")
        if _matches(pattern.lstrip("!"), path):
            out = not exception
    return out


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def stage_image_files(root: Path) -> list[str]:
    """Put the files the Dockerfile copies under ``root`` as the image's /; their context paths."""
    patterns = ignore_patterns()
    copied = []
    for sources, dest in copy_lines(DOCKERFILE.read_text()):
        target = root / dest.lstrip("/")
        for source in sources:
            top = REPO / source
            files = sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]
            for file in files:
                rel = file.relative_to(REPO).as_posix()
                if ignored(rel, patterns):
                    continue
                if top.is_dir():
                    out = target / file.relative_to(top)
                else:
                    out = target / file.name if dest.endswith("/") else target
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(file.read_bytes())
                copied.append(rel)
    return copied


def test_dockerignore_matching() -> None:
    patterns = ["*", "!rocm_build/", "rocm_build/**/__pycache__"]
    assert ignored(".venv/bin/python", patterns)
    assert ignored("tests/conftest.py", patterns)
    assert not ignored("rocm_build/cli/__init__.py", patterns)
    assert ignored("rocm_build/cli/__pycache__/x.pyc", patterns)
    assert ignored("rocm_build/__pycache__/x.pyc", patterns)


def test_every_copy_source_reaches_the_image() -> None:
    """A COPY whose source the ignore file leaves out fails the image build."""
    patterns = ignore_patterns()
    for sources, _ in copy_lines(DOCKERFILE.read_text()):
        for source in sources:
            assert (REPO / source).exists(), source
            assert not ignored(source, patterns), f"{source} is left out by {DOCKERIGNORE.name}"


@pytest.mark.slow
def test_the_image_install_step_installs_exactly_what_the_dockerfile_copies(
    tmp_path: Path,
) -> None:
    image = tmp_path / "image"
    copied = stage_image_files(image)
    assert "pyproject.toml" in copied
    assert "rocm_build/cli/__init__.py" in copied
    # The image's command: "python${v}" -m venv DIR; "DIR/bin/pip" install --no-cache-dir SRC
    found = re.search(r'/bin/pip" install (.*?); \\$', DOCKERFILE.read_text(), re.MULTILINE)
    assert found, "the Dockerfile installs rocm-build with pip"
    *options, source = shlex.split(found[1])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    options = [o for o in options if o != "--no-cache-dir"]  # this machine's cache is welcome
    installed = subprocess.run(
        [venv / "bin" / "pip", "install", "-q", *options, str(image / source.lstrip("/"))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    version = subprocess.run(
        [venv / "bin" / "rocm-build", "--version"], capture_output=True, text=True, check=False
    )
    assert version.returncode == 0, version.stderr
    found = installed_locations(venv / "bin" / "python", tmp_path)
    package = Path(found["package"]).parent  # the package data with it, not under share/
    assert package.is_relative_to(venv)
    assert found["suite_dir"] == str(package / "smoke" / "suite")
    assert found["shipped_dir"] == str(package / "sources" / "shipped_patches")
    assert (package / "smoke" / "suite" / "pytest.ini").is_file()
