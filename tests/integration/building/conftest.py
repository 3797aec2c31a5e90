"""A workspace with the fixture projects (real git repos) configured for rocm-build, built against
the real ROCm tree for two targets. The build venv and compiler cache are shared per session so
that each test pays only for its own compiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY, CliRunner
from tests.integration.tritonfix.repos import make_triton
from tests.support.gitrepo import git

PROJECTS = Path(__file__).parent / "projects"
TARGETS = "gfx90a;gfx1030"


@pytest.fixture(scope="session")
def build_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the build venv goes; the first build creates it, later ones reuse it."""
    return tmp_path_factory.mktemp("build-venv") / "venv"


@pytest.fixture(scope="session")
def session_ccache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ccache")


#: Release tags of the fixture repositories: like upstream torch, whose version.txt stays X.Y.0a0
#: on its release tags (the fixture's is 2.9.0a0), the release's version is the tag's.
TAGS = {"torch": "v2.9.1"}


def _git_repo(src: Path, dest: Path, tag: str = "") -> None:
    shutil.copytree(src, dest)
    env = {**os.environ, **GIT_IDENTITY}
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "fixture"]):
        subprocess.run(["git", *cmd], cwd=dest, env=env, check=True)
    if tag:
        subprocess.run(["git", "tag", "-a", "-m", tag, tag], cwd=dest, env=env, check=True)


@dataclass
class Workspace:
    root: Path
    tree: Path
    venv: Path
    run_cli: CliRunner
    env: dict[str, str] = field(default_factory=dict)

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    def configure(self, torch: str = "", torchvision: str = "", torchaudio: str = "") -> None:
        (self.root / "rocm-build.toml").write_text(
            f'[build]\nvenv = "{self.venv}"\n\n'
            # The Debian tree has only these CMake packages; the real torch list needs more.
            "[projects.torch]\njob_memory_gb = 0.5\n"
            + ("" if "cmake_packages" in torch else 'cmake_packages = ["hip"]\n')
            + f"{torch}\n"
            '[projects.torchvision]\ncmake_packages = ["hip"]\n'
            f"{torchvision}\n"
            '[projects.torchaudio]\ncmake_packages = ["hip"]\n'
            f"{torchaudio}\n"
        )

    def build(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        arch: str = TARGETS,
        as_json: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        flags = ["--rocm", str(self.tree), "--arch", arch] if arch else ["--rocm", str(self.tree)]
        command = [*(["--json"] if as_json else []), "build", *flags, *args]
        return self.run_cli(command, cwd=self.root, env={**self.env, **(env or {})})

    def report(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.wheels / "build-report.json").read_text())
        return data

    def wheel(self, project: str) -> Path:
        (found,) = self.wheels.glob(f"{project}-*.whl")
        return found

    def without_submodules(self, project: str = "torch") -> None:
        """The project's checkout as one whose submodules were never initialised: nothing of
        ``third_party`` in its tree, and nothing uncommitted (git status is clean)."""
        src = self.root / "src" / project
        env = {**os.environ, **GIT_IDENTITY}
        for args in (["rm", "-rq", "third_party"], ["commit", "-qm", "no submodules"]):
            subprocess.run(["git", *args], cwd=src, env=env, check=True)


@pytest.fixture
def workspace(
    tmp_path: Path, rocm_tree: Path, build_venv: Path, session_ccache: Path, run_cli: CliRunner
) -> Workspace:
    root = tmp_path / "ws"
    for name in ("torch", "torchvision", "torchaudio"):
        _git_repo(PROJECTS / name, root / "src" / name, TAGS.get(name, ""))
    # Wide lines: messages are matched as text, not as rich wraps them at 80 columns.
    env = {"CCACHE_DIR": str(session_ccache), "COLUMNS": "300"}
    ws = Workspace(root, rocm_tree, build_venv, run_cli, env)
    ws.configure()
    return ws


def read_member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name)


def extract_member(wheel: Path, suffix: str, dest: Path) -> Path:
    path = dest / suffix.rsplit("/", 1)[-1]
    path.write_bytes(read_member(wheel, suffix))
    return path


def requires_dist(wheel: Path) -> list[str]:
    meta = HeaderParser().parsestr(read_member(wheel, ".dist-info/METADATA").decode())
    return meta.get_all("Requires-Dist") or []


def shared_lib(path: Path, soname: str) -> None:
    """A real (tiny) shared library: stands in for OpenBLAS or aotriton only by its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    source = path.with_suffix(".c")
    source.write_text("int fixture_symbol(void) { return 1; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", str(source), "-o", str(path)],
        check=True,
    )
    source.unlink()


def add_triton(
    ws: Workspace, tmp_path: Path, *, release: bool = False, layout: str = "root"
) -> dict[str, str]:
    commits = make_triton(tmp_path / "upstream" / "triton", "3.5.0", "fork", layout=layout)
    src = ws.root / "src" / "triton"
    subprocess.run(
        ["git", "clone", "-q", str(tmp_path / "upstream" / "triton"), str(src)], check=True
    )
    if release:
        git(src, "checkout", "-q", "--detach", "origin/release/3.5.x")
        manifest = {"format": 1, "projects": {"triton": {"ref": "release/3.5.x"}}}
        (ws.root / "src" / "rocm-build-sources.json").write_text(json.dumps(manifest))
    else:
        git(src, "checkout", "-q", "--detach", commits["pin"])
    return commits
