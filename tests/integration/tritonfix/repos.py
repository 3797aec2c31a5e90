"""Real git repositories: ``triton`` (fork and upstream, with a release branch) and a ``torch``
that pins it in ``.ci/docker/ci_commit_pins/triton.txt`` and ``.ci/docker/triton_version.txt``."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.gitrepo import commit_files, git

TRITON_VERSION = "3.5.0"

# Triton's own versioning, as its setup.py does it: the base version, "+git<sha8>" unless the
# checkout is on a release branch, then TRITON_WHEEL_VERSION_SUFFIX appended as it is (a second
# "+" makes an invalid version, and setuptools refuses it).
SETUP_PY = textwrap.dedent(
    """\
    import os
    import subprocess
    from pathlib import Path

    from setuptools import Extension, find_packages, setup

    HERE = Path(__file__).resolve().parent
    PKG = "python"  # the folder holding the triton package, relative to this file


    def git(*args):
        res = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True)
        return res.stdout.strip() if res.returncode == 0 else ""


    def version():
        base = (HERE / PKG / "triton" / "VERSION").read_text().strip()
        branch = git("rev-parse", "--abbrev-ref", "HEAD")
        on_release = branch.startswith("release/") or bool(
            git("branch", "-r", "--contains", "HEAD", "--list", "*release/*")
        )
        sha = git("rev-parse", "--short=8", "HEAD")
        git_suffix = "" if on_release or not sha else f"+git{sha}"
        return base + git_suffix + os.environ.get("TRITON_WHEEL_VERSION_SUFFIX", "")


    cmake_args = os.environ.get("TRITON_APPEND_CMAKE_ARGS", "")
    (HERE / PKG / "triton" / "_build_env.txt").write_text(
        f"TRITON_APPEND_CMAKE_ARGS={cmake_args}\\n"
    )
    setup(
        name=os.environ.get("TRITON_WHEEL_NAME", "triton"),
        version=version(),
        package_dir={"": PKG},
        packages=find_packages(PKG),
        package_data={"triton": ["_build_env.txt", "VERSION"]},
        ext_modules=[Extension("triton._C.libtriton", ["csrc/triton.c"])],
    )
    """
)
EXT_C = textwrap.dedent(
    """\
    #include <Python.h>
    static PyObject *backend(PyObject *self, PyObject *args) { return PyUnicode_FromString("amd"); }
    static PyMethodDef methods[] = {{"backend", backend, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
    static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "libtriton", NULL, -1, methods};
    PyMODINIT_FUNC PyInit_libtriton(void) { return PyModule_Create(&mod); }
    """
)


@dataclass
class TritonRepos:
    fork: Path
    upstream: Path
    torch: Path
    commits: dict[str, str] = field(default_factory=dict)


#: ROCm's older Triton branches: setup.py, requirements.txt and the C sources under python/.
PYTHON_SETUP_PY = SETUP_PY.replace('PKG = "python"', 'PKG = "."')
#: What python/requirements.txt asks for: installed already, and named in rocm-build's log.
PYTHON_REQUIREMENTS = "setuptools>=40.8.0\npip>=1.0\n"


def make_triton(
    repo: Path, base_version: str, label: str, *, layout: str = "root"
) -> dict[str, str]:
    """A Triton repository; ``layout="python"`` keeps setup.py and requirements.txt in python/
    as ROCm's older Triton branches do."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    out = {}
    files = {
        "python/triton/__init__.py": f'ORIGIN = "{label}"\n',
        "python/triton/_C/__init__.py": "",
        "python/triton/VERSION": base_version + "\n",
        "python/triton/backends/amd/__init__.py": "",
    }
    if layout == "python":
        files.update(
            {
                "python/setup.py": PYTHON_SETUP_PY,
                "python/csrc/triton.c": EXT_C,
                "python/requirements.txt": PYTHON_REQUIREMENTS,
            }
        )
    else:
        files.update({"setup.py": SETUP_PY, "csrc/triton.c": EXT_C})
    out["first"] = commit_files(repo, files, f"{label}: first")
    git(repo, "branch", f"release/{'.'.join(base_version.split('.')[:2])}.x")
    out["pin"] = commit_files(repo, {"python/triton/later.py": "LATER = 1\n"}, f"{label}: pinned")
    out["main"] = commit_files(repo, {"NEWS": "after the pin\n"}, f"{label}: news")
    return out


def make_torch(repo: Path, pin: str, *, version: str = TRITON_VERSION) -> str:
    """A torch repository whose tag v2.99.0 pins Triton ``pin``; v2.98.0 has no pin files."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    commit_files(repo, {"version.txt": "2.98.0\n", "README.md": "torch\n"}, "torch: no pins yet")
    git(repo, "tag", "v2.98.0")
    sha = commit_files(
        repo,
        {
            "version.txt": "2.99.0\n",
            ".ci/docker/ci_commit_pins/triton.txt": pin + "\n",
            ".ci/docker/triton_version.txt": version + "\n",
        },
        "torch: pin triton",
    )
    git(repo, "tag", "v2.99.0")
    return sha


def make_repos(base: Path) -> TritonRepos:
    repos = TritonRepos(fork=base / "triton-fork", upstream=base / "triton", torch=base / "torch")
    fork = make_triton(repos.fork, TRITON_VERSION, "fork")
    upstream = make_triton(repos.upstream, TRITON_VERSION, "upstream")
    repos.commits.update({f"fork_{k}": v for k, v in fork.items()})
    repos.commits.update({f"upstream_{k}": v for k, v in upstream.items()})
    make_torch(repos.torch, fork["pin"])
    return repos
