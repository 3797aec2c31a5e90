"""A tiny real project for the source-side fault and lock tests.

``proj`` (served over file://) has one submodule ``sub`` and its own hipify script, which
rewrites a CUDA file into a HIP one in the root and in the submodule (and first sleeps
``$HIPIFY_SLEEP`` seconds, or waits at a ``Gate``, so a lock test can hold a checkout). Its
patch series (a base patch in the root, hipified patches in the root and the submodule) is made
by rocm-build itself: checkout, commit, save-patches, as a developer would.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import GIT_IDENTITY, REPO
from tests.support.gitrepo import commit_files, git

HIPIFY = textwrap.dedent(
    """\
    import os, pathlib, time
    time.sleep(float(os.environ.get("HIPIFY_SLEEP") or 0))
    if os.environ.get("HIPIFY_STARTED"):  # a Gate: say so, then wait until it opens
        with open(os.environ["HIPIFY_STARTED"], "w") as fifo:
            fifo.write("started\\n")
        with open(os.environ["HIPIFY_GO"], "rb") as fifo:
            fifo.read(1)
    root = pathlib.Path.cwd()
    for cu in [root / "src" / "k.cu", root / "sub" / "s.cu"]:
        cu.with_suffix(".hip").write_text(cu.read_text().replace("cuda", "hip"))
    """
)


class Gate:
    """A handshake with the project's hipify step through two FIFOs, with no sleeps: the run
    says when its hipify started (it holds the checkout's lock then), and hipify waits until
    the test opens the gate. The test holds both FIFOs open for reading and writing, so neither
    side's open blocks."""

    def __init__(self, folder: Path) -> None:
        self.started, self.go = folder / "hipify.started", folder / "hipify.go"
        folder.mkdir(parents=True, exist_ok=True)
        os.mkfifo(self.started)
        os.mkfifo(self.go)
        self._started = os.open(self.started, os.O_RDWR)
        self._go = os.open(self.go, os.O_RDWR)

    def env(self) -> dict[str, str]:
        return {"HIPIFY_STARTED": str(self.started), "HIPIFY_GO": str(self.go)}

    def wait_started(self, proc: subprocess.Popen[str], timeout: float = 120) -> None:
        """Return once ``proc``'s hipify started (the timeout only turns a hang into a failure)."""
        ready, _, _ = select.select([self._started], [], [], timeout)
        assert ready, f"hipify never started (rocm-build: {proc.poll()})"
        os.read(self._started, 64)

    def open(self) -> None:
        os.write(self._go, b"go")

    def close(self) -> None:
        os.close(self._started)
        os.close(self._go)


def read_until(proc: subprocess.Popen[str], text: str) -> list[str]:
    """The lines ``proc`` writes to stderr up to the first that holds ``text``: a run says it
    waits for a lock before it blocks on it."""
    assert proc.stderr is not None
    lines: list[str] = []
    while line := proc.stderr.readline():
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"never said {text!r}:\n{''.join(lines)}")


def env_for(base: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ROCM_BUILD_", "RB_FAULT_"))
        and k not in ("PYTORCH_ROCM_ARCH", "ROCM_PATH", "ROCM_HOME")
    }
    env.update(GIT_IDENTITY)
    env["PYTHONPATH"] = str(REPO)
    env["XDG_RUNTIME_DIR"] = str(base / "run")  # locks of this test only
    (base / "run").mkdir(exist_ok=True)
    env.update(extra)
    return env


@dataclass
class Project:
    base: Path
    work: Path

    def rb(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(
            [sys.executable, "-m", "rocm_build", "-q", *args],
            cwd=self.work,
            env=env_for(self.base, **env),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"rocm-build {args} exited {res.returncode}:\n{res.stderr}")
        return res

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "rocm_build", "-q", *args],
            cwd=self.work,
            env=env_for(self.base, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    @property
    def src(self) -> Path:
        return self.work / "src" / "proj"

    @property
    def series(self) -> Path:
        return self.work / "patches" / "t" / "proj"


def make_project(base: Path) -> Project:
    """Upstream repos, the work folder with its config and a saved series (base + hipified)."""
    up = base / "upstream"
    sub = up / "sub"
    proj = up / "proj"
    for repo in (sub, proj):
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    commit_files(sub, {"s.cu": "int s() { return cuda(); }\n"}, "sub: first")
    commit_files(
        proj,
        {
            "README.md": "proj\n",
            "src/k.cu": "void k() { cudaLaunch(); }\n",
            "tools/hipify.py": HIPIFY,
        },
        "proj: first",
    )
    git(proj, "submodule", "add", "-q", sub.as_uri(), "sub")
    git(proj, "commit", "-q", "-m", "proj: add sub")
    git(proj, "tag", "v1")
    work = base / "work"
    work.mkdir()
    (work / "rocm-build.toml").write_text(
        textwrap.dedent(
            f"""\
            patchset = "t"
            default_projects = ["proj"]
            [checkout]
            retries = 1
            retry_delay = 0.0
            [projects.proj]
            origin = "{proj.as_uri()}"
            ref = "v1"
            hipify = ["{{python}}", "tools/hipify.py"]
            """
        )
    )
    p = Project(base, work)
    p.rb("checkout", "--no-hipify")
    commit_files(p.src, {"README.md": "proj, patched\n"}, "base: readme")
    p.rb("save-patches")
    shutil.rmtree(work / "src")
    p.rb("checkout")
    commit_files(p.src, {"src/k.hip": "void k() { hipLaunchKernel(); }\n"}, "hipified: launch")
    commit_files(p.src / "sub", {"s.hip": "int s() { return hip() + 1; }\n"}, "hipified: sub")
    p.rb("save-patches")
    shutil.rmtree(work / "src")
    return p


def tree_bytes(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def checkout_state(p: Project) -> dict[str, Any]:
    """What an uninterrupted run must give: HEADs and trees of every repo, patch bytes, the
    manifest (it holds no timestamps)."""
    state: dict[str, Any] = {"patches": tree_bytes(p.series)}
    if p.src.is_dir():
        for rel in (".", "sub"):
            repo = p.src / rel
            state[rel] = (
                git(repo, "rev-parse", "HEAD"),
                git(repo, "rev-parse", "HEAD^{tree}"),
                git(repo, "status", "--porcelain", "--ignore-submodules=all"),
                git(repo, "tag", "--points-at", "HEAD"),
            )
    manifest = p.work / "src" / "rocm-build-sources.json"
    state["manifest"] = json.loads(manifest.read_text()) if manifest.is_file() else None
    return state


def strays(p: Project) -> list[str]:
    """Temporary files and folders of killed runs, and journals of unfinished work."""
    found: list[str] = []
    src_dir = p.work / "src"
    if src_dir.is_dir():
        found += [f.name for f in src_dir.iterdir() if f.name.startswith(".rocm-build-sources")]
        journal = src_dir / ".rocm-build-journal"
        if journal.is_dir():
            found += [f"journal/{f.name}" for f in journal.iterdir()]
    parent = p.series.parent
    if parent.is_dir():
        found += [f.name for f in parent.iterdir() if f.name.startswith(".")]
    if p.src.is_dir():
        for gdir in (p.src / ".git", p.src / ".git" / "modules" / "sub"):
            found += [f"{gdir.name}/{f.name}" for f in gdir.glob("*.lock")]
            if (gdir / "rebase-apply").exists():
                found.append(f"{gdir.name}/rebase-apply")
    return found


def fault_points(log: Path) -> list[str]:
    """``name@N`` for each time a point was reached, in order."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for name in log.read_text().split():
        seen[name] = seen.get(name, 0) + 1
        out.append(f"{name}@{seen[name]}")
    return out


def kill_after(proc: subprocess.Popen[str], delay: float) -> None:
    """SIGKILL the run and its children (its own session) after ``delay`` seconds, as an OOM
    kill of the whole job would."""
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    time.sleep(0.05)
