"""Build planning (pure), job counts, versions, requirements and wheel metadata pinning."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.building import commands, jobs, wheelcheck
from rocm_build.building.requirements import read_build_requirements
from rocm_build.common.errors import BuildFailed, ConfigError
from tests.support.buildplans import build_plan, project_sources

GIB = 1 << 30


def test_default_jobs_is_bounded_by_cores_and_memory() -> None:
    assert jobs.default_jobs(16, 64 * GIB, 5.0) == 12
    assert jobs.default_jobs(16, 24 * GIB, 5.0) == 4
    assert jobs.default_jobs(2, 24 * GIB, 2.0) == 2
    assert jobs.default_jobs(8, 1 * GIB, 5.0) == 1
    assert jobs.default_jobs(8, None, 5.0) == 8


def test_memory_available_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   2048 kB\n")
    assert jobs.memory_available(meminfo) == 2048 * 1024
    assert jobs.memory_available(tmp_path / "missing") is None


def test_oom_patterns() -> None:
    assert commands.OOM.search("c++: fatal error: Killed signal terminated program cc1plus")
    assert commands.OOM.search("ninja: subcommand failed with exit code 137")
    assert commands.OOM.search("subprocess.CalledProcessError: returned non-zero exit status 137.")
    assert not commands.OOM.search("error: use of undeclared identifier 'x'\nexit code 1")


def test_plan_orders_pins_and_composes(tmp_path: Path) -> None:
    cfg, src = project_sources(tmp_path)
    plan = build_plan(cfg, src, tmp_path)
    torch, vision = plan.steps
    assert (torch.name, vision.name) == ("torch", "torchvision")
    assert torch.install_after
    assert not vision.install_after
    venv_python = str(tmp_path / "work" / "venv" / "bin" / "python")
    assert torch.command[:5] == (venv_python, "-m", "pip", "wheel", "-v")
    assert "--no-build-isolation" in torch.command
    assert "--no-deps" in torch.command
    assert vision.command[:3] == (venv_python, "setup.py", "bdist_wheel")
    assert torch.jobs == 3  # 16 GiB / 5 GB per job
    assert vision.jobs == 8
    assert torch.env["MAX_JOBS"] == "3"
    assert torch.version == "2.9.0+rocm6.4"
    assert torch.env["PYTORCH_BUILD_VERSION"] == "2.9.0+rocm6.4"
    assert torch.env["PYTORCH_BUILD_NUMBER"] == "1"
    assert vision.env["BUILD_VERSION"] == "0.24.0a0+rocm6.4"
    assert vision.pin_env == {"PYTORCH_VERSION": "torch"}
    assert vision.env["PATH"].startswith(str(tmp_path / "work" / "venv" / "bin") + ":")
    assert "CUDA_HOME" in vision.removed
    assert "CUDA_HOME" not in vision.env
    # torch is never a build requirement of its dependents: its fresh wheel is installed instead
    assert vision.requires == ("setuptools", "Wheel")
    assert torch.requirement_files == (src / "torch" / "requirements.txt",)
    assert torch.log == tmp_path / "work" / "logs" / "build-torch.log"


def test_plan_flags_win(tmp_path: Path) -> None:
    cfg, src = project_sources(tmp_path)
    plan = build_plan(
        cfg,
        src,
        tmp_path,
        jobs=2,
        version_suffix="rocm6.4.1.mine",
        venv_setting="current",
        cache="ccache",
        cache_env={"CMAKE_CXX_COMPILER_LAUNCHER": "/usr/bin/ccache"},
    )
    torch = plan.steps[0]
    assert torch.jobs == 2
    assert torch.env["CMAKE_BUILD_PARALLEL_LEVEL"] == "2"
    assert torch.version == "2.9.0+rocm6.4.1.mine"
    assert torch.command[0] == "/usr/bin/python3"
    assert plan.venv is None
    assert torch.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "/usr/bin/ccache"


def test_project_settings_from_the_config_file(tmp_path: Path) -> None:
    cfg, src = project_sources(
        tmp_path,
        '[projects.torch]\nbuild_env = ["FOO=bar"]\nbuild_tool = "setup.py"\nversion_file = ""\n',
    )
    torch = build_plan(cfg, src, tmp_path).steps[0]
    assert torch.env["FOO"] == "bar"
    assert "PYTORCH_BUILD_NUMBER" not in torch.env
    assert torch.command[1] == "setup.py"
    assert torch.version == ""
    assert "PYTORCH_BUILD_VERSION" not in torch.env


def test_missing_checkout_and_bad_settings_are_errors(tmp_path: Path) -> None:
    cfg, src = project_sources(tmp_path)
    with pytest.raises(ConfigError, match="rocm-build checkout"):
        build_plan(cfg, tmp_path / "elsewhere", tmp_path)
    cfg, src = project_sources(tmp_path / "b", '[projects.torch]\nbuild_env = ["NOEQUALS"]\n')
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        build_plan(cfg, src, tmp_path / "b")
    with pytest.raises(ConfigError, match="not a valid version"):
        build_plan(cfg, src, tmp_path / "b", version_suffix="+bad label!")


def test_requirement_files_drop_the_projects_we_build(tmp_path: Path) -> None:
    _cfg, src = project_sources(tmp_path)
    torch = src / "torch"
    lines = commands.filtered_requirements(torch, torch / "requirements.txt", {"torch"}, set())  # type: ignore[arg-type]
    assert lines == ["cmake", "numpy"]


def _wheel(path: Path, requires: list[str]) -> Path:
    meta = "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.24.0\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nLong description.\n"
    files = {
        "torchvision/__init__.py": b"",
        "torchvision-0.24.0.dist-info/METADATA": meta.encode(),
        "torchvision-0.24.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
    }
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}")
    rows.append("torchvision-0.24.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("torchvision-0.24.0.dist-info/RECORD", "\n".join(rows) + "\n")
    return path


def _record_ok(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as zf:
        record = zf.read("torchvision-0.24.0.dist-info/RECORD").decode()
        for row in csv.reader(io.StringIO(record)):
            if row[1]:
                data = zf.read(row[0])
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
                if row[1] != "sha256=" + digest.decode() or int(row[2]) != len(data):
                    return False
    return True


def test_pin_is_added_when_the_build_did_not_pin(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "torchvision-0.24.0-cp311-cp311-linux_x86_64.whl",
        ["torch", "numpy", 'torch[x]; extra == "full"'],
    )
    change = wheelcheck.pin_requirement(wheel, "torch", "2.9.0+rocm6.4.1")
    assert change == "Requires-Dist torch==2.9.0+rocm6.4.1 (was torch)"
    _, _, requires = wheelcheck.wheel_metadata(wheel)
    assert requires == ("numpy", 'torch[x]; extra == "full"', "torch==2.9.0+rocm6.4.1")
    assert _record_ok(wheel)
    with zipfile.ZipFile(wheel) as zf:
        assert (
            zf.read("torchvision-0.24.0.dist-info/METADATA")
            .decode()
            .endswith("\n\nLong description.\n")
        )
    assert wheelcheck.pin_requirement(wheel, "torch", "2.9.0+rocm6.4.1") is None


def test_pin_conflict_is_a_failed_build(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "torchvision-0.24.0-cp311-cp311-linux_x86_64.whl", ["torch==2.8.0"])
    with pytest.raises(BuildFailed, match="wrong version"):
        wheelcheck.pin_requirement(wheel, "torch", "2.9.0+rocm6.4.1")


@pytest.mark.parametrize(
    ("pyproject", "tool", "expected"),
    [
        # torchvision/torchaudio: tool settings only -> PEP 517's legacy setuptools backend.
        ("[tool.black]\nline-length = 120\n", "pip", ("setuptools>=40.8.0", "wheel")),
        (None, "pip", ("setuptools>=40.8.0", "wheel")),
        ('[build-system]\nrequires = ["setuptools>=61"]\n', "pip", ("setuptools>=61", "wheel")),
        (
            '[build-system]\nrequires = ["setuptools", "Wheel>=0.40"]\n'
            'build-backend = "setuptools.build_meta"\n',
            "pip",
            ("setuptools", "Wheel>=0.40"),
        ),
        (
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
            "pip",
            ("hatchling",),
        ),
        (
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
            "setup.py",
            ("hatchling", "wheel"),
        ),
    ],
)
def test_build_requirements_cover_what_the_backend_asks_for(
    tmp_path: Path, pyproject: str | None, tool: str, expected: tuple[str, ...]
) -> None:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    spec = config.ProjectSpec(name="p", origin="x", build_tool=tool)
    assert read_build_requirements(tmp_path, spec) == expected


def test_torch_version_from_release_tag_or_dev_commit(tmp_path: Path) -> None:
    from rocm_build.building.version import Revision, release_version

    assert release_version("v2.9.1") == "2.9.1"
    assert release_version("v2.10.0-rc3") == "2.10.0"
    assert release_version("ciflow/rocm/123") is None
    cfg, src = project_sources(tmp_path)
    (src / "torch" / "version.txt").write_text("2.9.0a0\n")  # as on upstream's v2.9.1
    sha = "0123456789abcdef" * 2 + "01234567"
    released = {"torch": Revision(commit=sha, tag="v2.9.1", ref="v2.9.1")}
    torch, vision = build_plan(cfg, src, tmp_path / "a", revisions=released).steps
    assert torch.version == torch.env["PYTORCH_BUILD_VERSION"] == "2.9.1+rocm6.4"
    assert torch.version_from == "release tag v2.9.1"
    assert vision.version == "0.24.0a0+rocm6.4"  # vision's own version file
    dev = {"torch": Revision(commit=sha, ref="main")}
    torch, _ = build_plan(cfg, src, tmp_path / "b", revisions=dev).steps
    assert torch.version == "2.9.0a0+git01234567.rocm6.4"
    assert torch.version_from == "development build of main at 01234567"
