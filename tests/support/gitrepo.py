"""Git repositories for tests: ``git`` run with the tests' identity (no system config, ``main``
as the first branch, file:// submodules allowed), files committed in one step, and the vecadd
example project as a repository with a little history."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import GIT_IDENTITY, REPO

#: The example project ``make_example_repo`` commits.
EXAMPLE_PROJECT = REPO / "examples" / "vecadd" / "project"


def git(cwd: Path, *args: str) -> str:
    """``git args`` in ``cwd``; its output, stripped. A failure fails the test with git's
    error."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
    res = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} in {cwd} failed:\n{res.stderr}")
    return res.stdout.strip()


def commit_files(repo: Path, files: dict[str, str], message: str) -> str:
    """Writes ``files`` (path in ``repo``: text) and commits them; the new commit's sha."""
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # Only the named files: `add -A` in a parent would also stage moved submodule pointers.
    git(repo, "add", "--", *files)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_example_repo(dest: Path) -> str:
    """The example project as a git repository with a little history; returns its file:// URL."""
    shutil.copytree(EXAMPLE_PROJECT, dest)
    env = {**os.environ, **GIT_IDENTITY}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=dest, env=env, check=True, capture_output=True)

    readme = (dest / "README.md").read_text()
    (dest / "README.md").write_text(readme.split("```")[0])
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "vecadd 1.0.0")
    git("tag", "v1.0.0")
    (dest / "README.md").write_text(readme)
    git("commit", "-q", "-am", "README: usage")
    return f"file://{dest}"
