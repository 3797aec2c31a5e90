"""The whole pipeline with ROCm 6.4 and clang 21, inside a Debian sid root: checkout, build,
bundle and smoke (`rocm-build all`) for gfx942, gfx1100 and gfx1201 on the vecadd example and on
the torch- and torchvision-shaped projects, with rocm-build in a venv of the root; then the fat
wheels in a fresh venv of the root with the ROCm tree not bound (gone), loading HIP 6.4
(libamdhip64.so.6) from the wheel.

There is no GPU here: hipGetDeviceCount returning 100 (hipErrorNoDevice) with a count of 0 is the
expected answer, and proves the runtime loaded and initialised.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import sys
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile

from rocm_build.common import locks
from tests.conftest import REPO, CliRunner, _test_cache
from tests.integration.building.conftest import PROJECTS, _git_repo
from tests.integration.smoke.conftest import EXAMPLE, run
from tests.support.gitrepo import make_example_repo

pytestmark = pytest.mark.slow

TARGETS = ("gfx942", "gfx1100", "gfx1201")
ARCH = ";".join(TARGETS)
OVERLAY = Path(__file__).parent / "projects"
HIP_NO_DEVICE = 100
# Build requirements of the projects and the smoke venv's pytest: with these cached, the
# pipeline runs --offline (no package index).
OFFLINE = ("pytest", "setuptools", "wheel")

PROBE = r"""
import ctypes, importlib, json, sys
from pathlib import Path
tree, names = sys.argv[1], sys.argv[2:]
imported = {n: importlib.import_module(n).__file__ for n in names}
with open("/proc/self/maps") as fh:
    maps = sorted({line.split()[-1] for line in fh if line.rstrip().split()[-1].startswith("/")})
hip = [p for p in maps if Path(p).name.startswith("libamdhip64.so")]
lib = ctypes.CDLL(hip[0])
version, count = ctypes.c_int(0), ctypes.c_int(-1)
lib.hipRuntimeGetVersion(ctypes.byref(version))
rc = lib.hipGetDeviceCount(ctypes.byref(count))
print(json.dumps({
    "tree_there": Path(tree, "lib").exists(), "imported": imported, "hip": hip,
    "version": version.value, "rc": rc, "count": count.value, "maps": maps,
}))
"""


@dataclass(frozen=True)
class SidRocmBuild:
    """rocm-build in a venv of the sid root, and running things in that root."""

    root: Path
    venv: Path
    wheels: Path  # OFFLINE's wheels and their dependencies (cached)
    run_cli: CliRunner

    def run(
        self,
        cmd: Sequence[str | Path],
        *,
        cwd: Path,
        binds: Sequence[Path] = (),
        env: dict[str, str] | None = None,
        with_checkout: bool = True,
    ) -> Any:
        # The checkout is bound for its rocm_build; a step that must not see the tree leaves it
        # out, since the tests' cache (and so the tree) may live inside it (CI's .test-cache).
        shared = (REPO, self.venv.parent) if with_checkout else ()
        flags = [x for b in (*shared, *binds) for x in ("--bind", str(b))]
        return self.run_cli(
            ["rocm", "run", str(self.root), *flags, "--", *map(str, cmd)], cwd=cwd, env=env
        )

    def rocm_build(self, args: Sequence[str], **kwargs: Any) -> Any:
        # The checkout's rocm_build (PYTHONPATH, bound at its own path) over the venv's copy.
        return self.run([self.venv / "bin" / "python", "-m", "rocm_build", *args], **kwargs)


def _requirements() -> list[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return sorted(data["project"]["dependencies"])


@pytest.fixture(scope="module")
def sid_rb(sid_root: Path, run_cli: CliRunner) -> SidRocmBuild:
    """A venv in the root with rocm-build's dependencies, and the wheels for offline runs, made
    once and kept in the tests' cache (remade when the dependencies change)."""
    reqs = _requirements()
    stamp = hashlib.sha256("\n".join([*reqs, *OFFLINE]).encode()).hexdigest()[:16]
    home = _test_cache() / "sid-rocm-build"
    tool = SidRocmBuild(sid_root, home / "venv", home / "wheels", run_cli)
    stamp_file = home / "stamp"
    # A venv cannot be moved into place (its scripts name their folder): a lock keeps two test
    # sessions from making it at once.
    with locks.hold(home, "the sid root's rocm-build venv"):
        if stamp_file.is_file() and stamp_file.read_text() == stamp:
            return tool
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        pip = [tool.venv / "bin" / "python", "-m", "pip", "-q"]
        for cmd in (
            ["python3", "-m", "venv", tool.venv],
            [*pip, "install", *reqs],
            [*pip, "download", "--only-binary", ":all:", "-d", tool.wheels, *OFFLINE],
        ):
            done = tool.run(cmd, cwd=home)
            assert done.returncode == 0, done.stderr[-3000:]
        stamp_file.write_text(stamp)
    return tool


@pytest.fixture(scope="module")
def hipify() -> Path:
    """PyTorch's hipify extracted from a torch wheel (the example's own step), cached."""
    dest = _test_cache() / "torch-hipify"
    run([sys.executable, EXAMPLE / "project" / "tools" / "fetch_hipify.py", dest])
    return dest


def _all(
    tool: SidRocmBuild,
    work: Path,
    tree: Path,
    binds: Sequence[Path],
    extra: Sequence[str],
    env: dict[str, str],
) -> Any:
    args = ["--json", "all", "--rocm", str(tree), "--arch", ARCH]
    args += ["--find-links", str(tool.wheels), "--offline", *extra]
    return tool.rocm_build(
        args,
        cwd=work,
        binds=[tree, work.parent, *binds],
        # Level 1 keeps the bundled libLLVM quick to compress; the content is the same.
        env={"ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "1", **env},
    )


@dataclass(frozen=True)
class Run:
    work: Path
    first: dict[str, Any]
    again: dict[str, Any]


def _run_twice(
    tool: SidRocmBuild,
    work: Path,
    tree: Path,
    binds: Sequence[Path],
    extra: Sequence[str] = (),
    **env: str,
) -> Run:
    first = _all(tool, work, tree, binds, extra, env)
    assert first.returncode == 0, first.stderr[-5000:]
    again = _all(tool, work, tree, binds, extra, env)
    assert again.returncode == 0, again.stderr[-5000:]
    return Run(work, json.loads(first.stdout), json.loads(again.stdout))


@pytest.fixture(scope="module")
def vecadd_run(
    sid_rb: SidRocmBuild, sid_tree: Path, hipify: Path, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """The quick start's `rocm-build all` on examples/vecadd, in the root, for three targets."""
    base = tmp_path_factory.mktemp("sid-vecadd")
    work = base / "work"
    work.mkdir()
    shutil.copy(EXAMPLE / "rocm-build.toml", work)
    shutil.copytree(EXAMPLE / "patches", work / "patches")
    origin = make_example_repo(base / "vecadd-repo")
    return _run_twice(
        sid_rb,
        work,
        sid_tree,
        [hipify],
        ["--origin", f"vecadd={origin}"],
        TORCH_HIPIFY_PATH=str(hipify),
    )


TORCH_CONFIG = """\
default_projects = ["torch", "torchvision"]

[projects.torch]
origin = "file://{base}/torch"
ref = "main"
hipify = []
job_memory_gb = 0.5
cmake_packages = ["hip"]
# Compressed offload bundles for torch (as hipcc 7 writes with --offload-compress); the
# example and torchvision keep hipcc's default, uncompressed ones.
build_env = ["PYTORCH_BUILD_NUMBER=1", "CXXFLAGS=--offload-compress"]

[projects.torchvision]
origin = "file://{base}/torchvision"
ref = "main"
"""


@pytest.fixture(scope="module")
def torch_run(
    sid_rb: SidRocmBuild, sid_tree: Path, tmp_path_factory: pytest.TempPathFactory
) -> Run:
    """`rocm-build all` on the torch- and torchvision-shaped projects, in the root."""
    base = tmp_path_factory.mktemp("sid-torch")
    upstream = base / "upstream"
    for name in ("torch", "torchvision"):
        staged = base / "staged" / name
        shutil.copytree(PROJECTS / name, staged)
        shutil.copytree(OVERLAY / name, staged, dirs_exist_ok=True)
        _git_repo(staged, upstream / name)
        run(["git", "branch", "-M", "main"], cwd=upstream / name)
    work = base / "work"
    work.mkdir()
    (work / "rocm-build.toml").write_text(TORCH_CONFIG.format(base=upstream))
    return _run_twice(sid_rb, work, sid_tree, [])


def _fat(report: dict[str, Any], project: str) -> Path:
    (path,) = [
        Path(w["path"]) for w in report["wheels"]["bundled"] if w["name"].startswith(project)
    ]
    return path


def _inspect(run_cli: CliRunner, wheel: Path, tmp_path: Path) -> dict[str, Any]:
    required = run_cli(["inspect", str(wheel), "--require-arch", ",".join(TARGETS)], cwd=tmp_path)
    assert required.returncode == 0, required.stdout + required.stderr
    result = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _compiler(wheel: Path, member: str) -> str:
    """The .comment section of a wheel member: which compilers made it."""
    with zipfile.ZipFile(wheel) as zf:
        elf = ELFFile(io.BytesIO(zf.read(member)))
        section = elf.get_section_by_name(".comment")
        return "" if section is None else section.data().decode(errors="replace")


def _check_run(run: Run) -> None:
    report = run.first
    assert report["ok"] is True, report
    assert report["targets"] == list(TARGETS)
    assert report["smoke"]["ok"] is True, report["smoke"]
    assert report["smoke"]["failed"] == 0
    # The smoke suite read every package's code objects in the root (Python 3.14 there).
    targets = report["smoke"]["code_object_targets"]
    assert set(targets) == set(report["smoke"]["packages"])
    assert all(found == sorted(TARGETS) for found in targets.values()), targets
    assert report["smoke"]["hip"]["rc"] == HIP_NO_DEVICE  # no GPU here: the expected answer
    assert "/site-packages/" in report["smoke"]["hip"]["path"]
    assert report["smoke"]["hip"]["path"].endswith("/libamdhip64.so.6")
    # A second run finds every stage done: the fat wheel did not replace the built one.
    assert [(s["stage"], s["status"]) for s in run.again["stages"]] == [
        ("checkout", "skipped"),
        ("build", "skipped"),
        ("bundle", "skipped"),
        ("smoke", "skipped"),
    ]
    built = {Path(w["path"]) for w in report["wheels"]["built"]}
    bundled = {Path(w["path"]) for w in report["wheels"]["bundled"]}
    assert all(p.is_file() for p in built | bundled)
    for wheel in bundled:
        # +rocm6.4 (major.minor, as PyTorch labels), or .rocm6.4 after a dev build's +git<sha8>
        assert re.search(r"[+.]rocm6\.4(?![.0-9])", wheel.name), wheel.name
        assert "-manylinux_2_" in wheel.name or ".manylinux_2_" in wheel.name, wheel.name


def test_vecadd_example_through_the_pipeline_in_the_root(
    vecadd_run: Run, run_cli: CliRunner, tmp_path: Path
) -> None:
    _check_run(vecadd_run)
    facts = _inspect(run_cli, _fat(vecadd_run.first, "vecadd"), tmp_path)
    assert facts["code_targets"] == sorted(TARGETS)
    (ext,) = [e for e in facts["elf_files"] if e["targets"]]
    assert "clang version 21." in _compiler(_fat(vecadd_run.first, "vecadd"), ext["path"])
    # hipcc 7's default: uncompressed offload bundles, read as such.
    assert ext["offload_bundles"] >= 1
    assert ext["compressed_bundles"] == 0
    names = {b["name"]: b for b in facts["bundled"]}
    assert names["libamdhip64.so.6"]["reason"] == "needed"
    assert names["libamd_comgr.so.3"]["reason"] == "dlopen"  # comgr 3, dlopened by HIP


def test_torch_and_torchvision_through_the_pipeline_in_the_root(
    torch_run: Run, run_cli: CliRunner, tmp_path: Path
) -> None:
    _check_run(torch_run)
    torch = _inspect(run_cli, _fat(torch_run.first, "torch-"), tmp_path)
    assert torch["code_targets"] == sorted(TARGETS)
    (lib,) = [e for e in torch["elf_files"] if e["targets"]]
    assert lib["path"] == "torch/lib/libtorch_fixture_hip.so"
    assert "clang version 21." in _compiler(_fat(torch_run.first, "torch-"), lib["path"])
    # Built with --offload-compress: compressed (CCOB) bundles, read through.
    assert lib["compressed_bundles"] == lib["offload_bundles"] >= 1
    assert {"libamdhip64.so.6", "libamd_comgr.so.3"} <= {b["name"] for b in torch["bundled"]}
    vision = _inspect(run_cli, _fat(torch_run.first, "torchvision"), tmp_path)
    assert vision["code_targets"] == sorted(TARGETS)
    assert vision["bundled"] == []  # it uses torch's libraries
    (ext,) = [e for e in vision["elf_files"] if e["targets"]]
    assert ext["compressed_bundles"] == 0


def test_fat_wheels_import_in_a_fresh_venv_with_the_tree_gone(
    sid_rb: SidRocmBuild, sid_tree: Path, vecadd_run: Run, torch_run: Run, tmp_path: Path
) -> None:
    wheels = [
        _fat(vecadd_run.first, "vecadd"),
        _fat(torch_run.first, "torch-"),
        _fat(torch_run.first, "torchvision"),
    ]
    venv = tmp_path / "venv"
    (tmp_path / "probe.py").write_text(PROBE)
    binds = [tmp_path, *(w.parent for w in wheels)]  # not the tree
    made = sid_rb.run(
        ["python3", "-m", "venv", venv], cwd=tmp_path, binds=binds, with_checkout=False
    )
    assert made.returncode == 0, made.stderr
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", *wheels]
    installed = sid_rb.run(pip, cwd=tmp_path, binds=binds, with_checkout=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    for names in (["vecadd"], ["torch", "torchvision"]):
        probe = [venv / "bin" / "python", "probe.py", str(sid_tree), *names]
        ran = sid_rb.run(
            probe, cwd=tmp_path, binds=binds, env={"PYTHONPATH": ""}, with_checkout=False
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        facts = json.loads(ran.stdout.splitlines()[-1])
        assert facts["tree_there"] is False  # the tree is not in the root
        (hip,) = facts["hip"]
        assert hip.startswith(f"{venv}/lib/python3.")
        assert hip.endswith(f"/site-packages/{names[0]}/lib/libamdhip64.so.6")
        # HIP_VERSION = major * 10^7 + minor * 10^5 + patch: 6.4.x
        assert facts["version"] // 100_000 == 604, facts["version"]
        assert facts["rc"] == HIP_NO_DEVICE  # hipErrorNoDevice: no GPU here, as expected
        assert facts["count"] == 0
        outside = [p for p in facts["maps"] if "/site-packages/" not in p and "rocm" in p]
        assert not outside, outside
