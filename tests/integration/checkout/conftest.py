"""Real upstream repositories for the checkout tests, served over file://.

``make_upstream`` builds:

    proj            history v1.0 -> v1.1 (tags), branch release/1, main moves on
      tools/hipify.py          the project's own hipify script (edits root and libs/sub1)
      libs/sub1     submodule, with its own nested submodule third_party/nested
      libs/sub2     submodule
    companion       a second project (pinned through proj's related_commits)

The hipify script is configured as a user project in rocm-build.toml, the same way any
project is; nothing in rocm-build knows about it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.support.gitrepo import commit_files, git

__all__ = ["commit_files", "git"]  # for the folder's tests

HIPIFY_SCRIPT = textwrap.dedent(
    '''\
    """Fixture hipify: like a real one, rewrites CUDA spellings into HIP ones in place and
    writes hipified copies of the .cu sources, in the root and in the libs/sub1 submodule."""
    import pathlib
    import sys

    root = pathlib.Path.cwd()
    changed = 0
    for cu in sorted([*root.glob("src/*.cu"), *root.glob("libs/sub1/*.cu")]):
        text = cu.read_text()
        hip = cu.with_suffix(".hip")
        hip.write_text(text.replace("cuda", "hip").replace("CUDA", "HIP"))
        changed += 1
    header = root / "src" / "config.h"
    header.write_text(header.read_text().replace("USE_CUDA", "USE_HIP"))
    print(f"hipified {changed} file(s)")
    sys.exit(0)
    '''
)


FILLER = "".join(f"// line {i}\n" for i in range(8))
KERNEL = "// kernel\n" + FILLER + "void launch() { cudaLaunch(); }\n"


def url(path: Path) -> str:
    return path.as_uri()


@dataclass
class Upstream:
    root: Path
    proj: Path
    sub1: Path
    sub2: Path
    nested: Path
    companion: Path
    commits: dict[str, str] = field(default_factory=dict)

    @property
    def proj_url(self) -> str:
        return url(self.proj)

    @property
    def companion_url(self) -> str:
        return url(self.companion)


def make_upstream(base: Path) -> Upstream:
    base.mkdir(parents=True, exist_ok=True)
    up = Upstream(
        root=base,
        proj=base / "proj",
        sub1=base / "sub1",
        sub2=base / "sub2",
        nested=base / "nested",
        companion=base / "companion",
    )
    for repo in (up.proj, up.sub1, up.sub2, up.nested, up.companion):
        repo.mkdir()
        git(repo, "init", "-q")

    c = up.commits
    c["nested1"] = commit_files(up.nested, {"nested.txt": "nested 1\n"}, "nested: first")
    c["nested2"] = commit_files(up.nested, {"nested.txt": "nested 2\n"}, "nested: second")

    c["sub1_1"] = commit_files(
        up.sub1,
        {"sub1.cu": "// sub1 kernel using cuda\nint sub1_cuda() { return 1; }\n"},
        "sub1: first",
    )
    git(up.sub1, "submodule", "add", "-q", url(up.nested), "third_party/nested")
    git(up.sub1, "-C", "third_party/nested", "checkout", "-q", c["nested1"])
    git(up.sub1, "add", "third_party/nested")
    git(up.sub1, "commit", "-q", "-m", "sub1: add nested")
    c["sub1_2"] = git(up.sub1, "rev-parse", "HEAD")
    c["sub2_1"] = commit_files(up.sub2, {"sub2.txt": "sub2 line 1\nsub2 line 2\n"}, "sub2")

    c["v1.0"] = commit_files(
        up.proj,
        {
            "README.md": "proj\n",
            "src/kernel.cu": KERNEL,
            "src/config.h": "#define USE_CUDA 1\n",
            "src/main.c": "int main(void) {\n  return 0;\n}\n",
            "tools/hipify.py": HIPIFY_SCRIPT,
        },
        "proj: first",
    )
    git(up.proj, "tag", "v1.0")
    git(up.proj, "submodule", "add", "-q", url(up.sub1), "libs/sub1")
    git(up.proj, "submodule", "add", "-q", url(up.sub2), "libs/sub2")
    # Pin sub1 below its tip, so a shallow fetch has to ask for the exact commit.
    git(up.proj, "-C", "libs/sub1", "checkout", "-q", c["sub1_2"])
    git(up.proj, "add", "libs/sub1")
    c["v1.1"] = commit_files(
        up.proj, {"src/main.c": "int main(void) {\n  return 1;\n}\n"}, "proj: v1.1"
    )
    git(up.proj, "tag", "-a", "v1.1", "-m", "release 1.1")
    git(up.proj, "branch", "release/1")
    c["main"] = commit_files(up.proj, {"NEWS": "after 1.1\n"}, "proj: news")

    c["companion1"] = commit_files(up.companion, {"comp.txt": "one\n"}, "companion: one")
    c["companion2"] = commit_files(up.companion, {"comp.txt": "two\n"}, "companion: two")
    # Upstream moves sub1 past the pinned commit; the checkout must still get the pinned one.
    commit_files(up.sub1, {"later.txt": "later\n"}, "sub1: later")
    return up


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return make_upstream(tmp_path / "upstream")


def write_config(work: Path, up: Upstream, *, extra: str = "") -> None:
    """rocm-build.toml declaring the fixture projects as user projects."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "rocm-build.toml").write_text(
        textwrap.dedent(
            f"""\
            [checkout]
            retry_delay = 0.0
            retries = 2

            [projects.proj]
            origin = "{up.proj_url}"
            ref = "v1.1"
            hipify = ["{{python}}", "tools/hipify.py"]

            [projects.companion]
            origin = "{up.companion_url}"
            depends = ["proj"]
            """
        )
        + extra
    )


@pytest.fixture
def work(tmp_path: Path, upstream: Upstream) -> Path:
    path = tmp_path / "work"
    write_config(path, upstream)
    return path


Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def rb(run_cli: Runner, work: Path) -> Runner:
    """``rocm-build ARGS`` in the work folder; ``ok=True`` asserts success."""

    def run(*args: str, ok: bool = True, cwd: Path | None = None, **kw: object) -> Any:
        return run_cli(list(args), cwd=cwd or work, check=ok, **kw)

    return run


def run_without_identity(
    args: list[str], *, cwd: Path, home: Path
) -> subprocess.CompletedProcess[str]:
    """rocm-build with no git identity anywhere: empty HOME, no system config, no GIT_* env."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GIT_", "ROCM_BUILD_", "EMAIL"))
        and k not in ("HOME", "XDG_CONFIG_HOME")
    }
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "rocm_build", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


# An extension project whose .gitignore hides its hipify output, as many do.
EXT_GITIGNORE = "*.hip\nhip/\nbuild/\n__pycache__/\n"
EXT_HIPIFY = textwrap.dedent(
    '''\
    """Fixture hipify of the ext project: writes .hip copies and a hip/ header (both ignored by
    the project's .gitignore) and edits a tracked header. Imports a helper module, so a Python
    that writes bytecode would leave tools/__pycache__ behind."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    import hipify_rules

    root = pathlib.Path.cwd()
    for cu in sorted(root.glob("src/*.cu")):
        cu.with_suffix(".hip").write_text(hipify_rules.convert(cu.read_text()))
    (root / "hip").mkdir(exist_ok=True)
    (root / "hip" / "gen.h").write_text("#define GENERATED_BY_HIPIFY 1\\n")
    header = root / "src" / "config.h"
    header.write_text(hipify_rules.convert(header.read_text()))
    '''
)
EXT_RULES = 'def convert(text):\n    return text.replace("cuda", "hip").replace("CUDA", "HIP")\n'


def make_ignoring_project(base: Path) -> Path:
    """``ext``: tags v1 and v2; its hipify output is hidden by its own .gitignore."""
    repo = base / "ext"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    commit_files(
        repo,
        {
            ".gitignore": EXT_GITIGNORE,
            "src/ops.cu": "// ops\n" + FILLER + "void ops() { cudaLaunch(); }\n",
            "src/config.h": "#define USE_CUDA 1\n",
            "tools/hipify.py": EXT_HIPIFY,
            "tools/hipify_rules.py": EXT_RULES,
        },
        "ext: first",
    )
    git(repo, "tag", "v1")
    commit_files(repo, {"README.md": "ext\n"}, "ext: readme")
    git(repo, "tag", "v2")
    return repo


def make_patch(
    scratch_origin: str,
    at: str,
    dest: Path,
    files: dict[str, str],
    message: str,
    *,
    hipify: bool = False,
) -> Path:
    """A real patch: clone, (hipify,) commit ``files``, ``git format-patch`` into ``dest``."""
    scratch = dest.parent / f".scratch-{dest.name}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.parent.mkdir(parents=True, exist_ok=True)
    git(scratch.parent, "clone", "-q", scratch_origin, str(scratch))
    git(scratch, "checkout", "-q", "--detach", at)
    if hipify:
        git(scratch, "submodule", "update", "-q", "--init", "--recursive")
        subprocess.run([sys.executable, "tools/hipify.py"], cwd=scratch, check=True)
        git(scratch, "add", "-A", ".")
        git(scratch, "commit", "-q", "-m", "hipify")
    commit_files(scratch, files, message)
    text = git(scratch, "format-patch", "-1", "--stdout")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text + "\n")
    shutil.rmtree(scratch)
    return dest
