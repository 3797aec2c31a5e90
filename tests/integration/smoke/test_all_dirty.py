"""``all`` after an edit in a checkout: never "every stage up to date" with the last clean wheel.
A small pure-Python project through ``all --no-smoke`` (a real checkout from a local repository,
build venv, build and bundle against the real ROCm tree); then a tracked edit in its checkout
stops the build stage with exit 6, and ``--allow-dirty`` builds the edit into a ``.dirty`` wheel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.faults.sources_fixture import env_for
from tests.support.gitrepo import commit_files, git

pytestmark = pytest.mark.slow

SETUP = (
    "import os\nfrom setuptools import setup\n"
    "setup(name='mini', version=os.environ['MINI_VERSION'], packages=['mini'])\n"
)
CONFIG = """\
patchset = "t"
default_projects = ["mini"]
[build]
venv = "{venv}"
[checkout]
retries = 1
retry_delay = 0.0
[projects.mini]
origin = "{origin}"
ref = "v1"
hipify = []
build_tool = "pip"
device_code = false
version_env = ["MINI_VERSION"]
"""


def test_all_refuses_a_dirty_checkout_and_builds_it_when_allowed(
    tmp_path: Path, rocm_tree: Path
) -> None:
    upstream = tmp_path / "upstream" / "mini"
    upstream.mkdir(parents=True)
    git(upstream, "init", "-q")
    files = {
        "setup.py": SETUP,
        "version.txt": "1.0\n",
        "mini/__init__.py": "x = 1\n",
        ".gitignore": "build/\n*.egg-info/\n",
    }
    commit_files(upstream, files, "mini 1.0")
    git(upstream, "tag", "v1")
    work = tmp_path / "work"
    work.mkdir()
    config = CONFIG.format(origin=upstream.as_uri(), venv=tmp_path / "venv")
    (work / "rocm-build.toml").write_text(config)

    def run_all(*flags: str) -> subprocess.CompletedProcess[str]:
        args = ["all", "--rocm", str(rocm_tree), "--arch", "gfx90a", "--no-smoke", *flags]
        return subprocess.run(
            [sys.executable, "-m", "rocm_build", *args],
            cwd=work,
            env=env_for(tmp_path, XDG_CACHE_HOME=str(tmp_path / "cache"), COLUMNS="300"),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    first = run_all()
    assert first.returncode == 0, first.stderr
    (clean,) = (work / "wheels").glob("mini-*.whl")
    assert clean.name.startswith("mini-1.0+rocm5.2-")

    (work / "src" / "mini" / "mini" / "__init__.py").write_text("x = 2\n")
    refused = run_all()
    assert refused.returncode == 6, refused.stderr
    errors = [ln for ln in refused.stderr.splitlines() if "uncommitted changes" in ln]
    assert len(errors) == 1, refused.stderr
    assert (
        "build failed: mini: its checkout has uncommitted changes (mini/__init__.py)" in errors[0]
    )
    assert "--allow-dirty" in errors[0]
    assert [p.name for p in (work / "wheels").glob("mini-*.whl")] == [clean.name]

    allowed = run_all("--allow-dirty")
    assert allowed.returncode == 0, allowed.stderr
    assert "build: done" in allowed.stderr
    report = json.loads((work / "wheels" / "build-report.json").read_text())
    entry = report["projects"]["mini"]
    assert entry["version"] == "1.0+rocm5.2.dirty"
    assert entry["dirty"] is True
    assert entry["dirty_paths"] == ["mini/__init__.py"]
    (dirty,) = (work / "wheels").glob("mini-1.0+rocm5.2.dirty-*.whl")
    run = json.loads((work / ".rocm-build" / "run-report.json").read_text())
    assert any(dirty.name in json.dumps(w) for w in run["wheels"]["built"]), run["wheels"]
