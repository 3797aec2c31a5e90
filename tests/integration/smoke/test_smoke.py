"""rocm-build smoke on real wheels: the vecadd example compiled for two gfx targets with the
Debian ROCm tree's clang, installed into fresh virtual environments with no GPU (the only fake:
there is no GPU, so HIP must answer hipErrorNoDevice)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliRunner

from .conftest import HIP_CLOSURE, TARGETS, graft

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fat_wheel(
    tmp_path_factory: pytest.TempPathFactory, vecadd_wheel: Path, rocm_tree: Path
) -> Path:
    dest = tmp_path_factory.mktemp("fat")
    return graft(vecadd_wheel, rocm_tree, dest, ext_rpath="$ORIGIN/lib", package="vecadd")


def smoke(run_cli: CliRunner, cwd: Path, *args: str | Path, env: dict[str, str] | None = None):
    return run_cli(["--json", "smoke", *(str(a) for a in args)], cwd=cwd, env=env)


def failed_tests(stdout: str) -> set[str]:
    data = json.loads(stdout)
    return {f["test"].rsplit("::", 1)[-1].split("[")[0] for f in data["failures"]}


def test_fat_wheel_passes_with_rocm_out_of_reach(
    run_cli: CliRunner, tmp_path: Path, fat_wheel: Path, offline_wheels: Path, rocm_tree: Path
) -> None:
    junit = tmp_path / "out" / "smoke.xml"
    # A user's ROCm settings must not leak into the run: they are scrubbed.
    env = {"LD_LIBRARY_PATH": str(rocm_tree / "lib"), "ROCM_PATH": str(rocm_tree)}
    result = smoke(
        run_cli,
        tmp_path,
        fat_wheel,
        "--arch",
        TARGETS,
        "--offline",
        "--find-links",
        offline_wheels,
        "--junit",
        junit,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["ok"]
    assert data["failed"] == 0
    assert data["passed"] >= 5
    assert data["facts"]["found_targets"]["vecadd"] == ["gfx1030", "gfx90a"]
    (probe,) = data["facts"]["probes"].values()
    assert probe["hip"]["rc"] == 100  # hipErrorNoDevice, from the bundled runtime
    assert "/site-packages/vecadd/lib/libamdhip64.so.5" in probe["hip"]["path"]
    assert "LD_LIBRARY_PATH" in data["plan"]["scrubbed"]
    assert str(rocm_tree) in data["plan"]["forbidden"]
    assert "<testsuite" in junit.read_text()
    # a passing run's venv (the unpacked wheels) is removed; its log and report stay
    venv = Path(data["plan"]["venv"])
    assert (venv.parent / "smoke.log").is_file()
    assert not venv.exists()


def test_library_loaded_from_outside_the_environment_fails(
    run_cli: CliRunner, tmp_path: Path, vecadd_wheel: Path, rocm_tree: Path, offline_wheels: Path
) -> None:
    # Planted: copies of the HIP runtime in a folder outside any venv, and an absolute RPATH to it
    # ahead of the wheel's own copies.
    outside = tmp_path / "outside" / "lib"
    outside.mkdir(parents=True)
    for name in HIP_CLOSURE:
        for folder in (rocm_tree / "lib", rocm_tree / "lib" / "rocm_sysdeps" / "lib"):
            if (folder / name).exists():
                shutil.copyfile(folder / name, outside / name)
    planted = graft(
        vecadd_wheel,
        rocm_tree,
        tmp_path / "planted",
        ext_rpath=f"{outside}:$ORIGIN/lib",
        package="vecadd",
    )
    result = smoke(
        run_cli, tmp_path, planted, "--arch", TARGETS, "--offline", "--find-links", offline_wheels
    )
    assert result.returncode == 12, result.stdout + result.stderr
    failed = failed_tests(result.stdout)
    assert "test_rocm_libraries_come_from_the_environment" in failed
    assert "test_search_paths_stay_inside" in failed
    assert "test_hip_runtime_from_wheel_answers" in failed
    assert "smoke tests failed" in result.stderr
    assert str(outside) in result.stdout
    # a failing run keeps its venv, to look into
    assert (Path(json.loads(result.stdout)["plan"]["venv"]) / "bin" / "python").exists()


def test_import_failure_fails_even_with_rocm_on_ld_library_path(
    run_cli: CliRunner, tmp_path: Path, vecadd_wheel: Path, rocm_tree: Path, offline_wheels: Path
) -> None:
    # The wheel as built needs libamdhip64 from the ROCm tree; LD_LIBRARY_PATH would find it, but
    # the smoke run scrubs it, so the import fails as it would on a user's machine.
    env = {"LD_LIBRARY_PATH": str(rocm_tree / "lib")}
    result = smoke(
        run_cli,
        tmp_path,
        vecadd_wheel,
        "--arch",
        TARGETS,
        "--offline",
        "--find-links",
        offline_wheels,
        env=env,
    )
    assert result.returncode == 12, result.stdout + result.stderr
    data = json.loads(result.stdout)
    failures = {f["test"].rsplit("::", 1)[-1]: f["message"] for f in data["failures"]}
    assert "libamdhip64.so.5" in failures["test_imports[vecadd]"]


def test_code_objects_for_other_targets_fail(
    run_cli: CliRunner, tmp_path: Path, fat_wheel: Path, offline_wheels: Path
) -> None:
    result = smoke(
        run_cli,
        tmp_path,
        fat_wheel,
        "--arch",
        "gfx90a",
        "--offline",
        "--find-links",
        offline_wheels,
    )
    assert result.returncode == 12
    data = json.loads(result.stdout)
    assert failed_tests(result.stdout) == {"test_code_object_targets"}
    (failure,) = data["failures"]
    assert "not requested gfx1030" in failure["message"]


def test_torch_arch_flags_that_differ_fail(
    run_cli: CliRunner, tmp_path: Path, minitorch_wheel: Path, offline_wheels: Path
) -> None:
    args = ["--offline", "--find-links", offline_wheels]
    good = smoke(run_cli, tmp_path, minitorch_wheel, "--arch", TARGETS, *args)
    assert good.returncode == 0, good.stdout + good.stderr
    data = json.loads(good.stdout)
    skips = {s["test"].rsplit("::", 1)[-1]: s["reason"] for s in data["skips"]}
    # No GPU here: each GPU check is skipped with its reason.
    assert "no GPU visible" in skips["test_matmul_matches_cpu"]
    assert data["plan"]["packages"] == ["torch"]

    bad = smoke(run_cli, tmp_path, minitorch_wheel, "--arch", "gfx90a", *args)
    assert bad.returncode == 12
    failures = {
        f["test"].rsplit("::", 1)[-1]: f["message"] for f in json.loads(bad.stdout)["failures"]
    }
    assert (
        "torch was compiled for gfx1030;gfx90a, requested gfx90a"
        in (failures["test_arch_flags_equal_requested_targets"])
    )


UPSTREAM_TESTS = """
import os

import torch

MISSING = (
    "Could not run 'aten::_fft_c2c' with arguments from the 'CUDA' backend. This could be "
    "because the operator doesn't exist for this backend."
)


def test_runs_with_rocm_flag():
    assert os.environ["PYTORCH_TEST_WITH_ROCM"] == "1"


def test_uses_the_installed_wheel():
    assert "site-packages" in torch.__file__


def test_fft_float32():
    raise NotImplementedError(MISSING)


def test_fft_float64():
    raise NotImplementedError(MISSING)


def test_addmm_complex_half():
    raise RuntimeError("\\"addmm_cuda\\" not implemented for 'ComplexHalf'")
"""


def test_upstream_tests_are_run_and_summarized(
    run_cli: CliRunner, tmp_path: Path, minitorch_wheel: Path, offline_wheels: Path
) -> None:
    # Stand-in for the torch checkout's own test folder; the wheel is the torch fixture.
    tests = tmp_path / "src" / "torch" / "test"
    tests.mkdir(parents=True)
    (tests / "test_small_ops.py").write_text(UPSTREAM_TESTS)
    result = run_cli(
        [
            "--json",
            "smoke",
            str(minitorch_wheel),
            "--arch",
            TARGETS,
            "--upstream-tests",
            "test_small_*.py",
            "--find-links",
            str(offline_wheels),
        ],
        cwd=tmp_path,
    )
    # Upstream failures are reported, not a smoke failure.
    assert result.returncode == 0, result.stdout + result.stderr
    upstream = json.loads(result.stdout)["upstream"]
    assert upstream["totals"] == {"failed": 3, "passed": 2}
    assert upstream["not_implemented"] == [
        {"op": "aten::_fft_c2c", "on": "CUDA", "tests": 2},
        {"op": "addmm_cuda", "on": "ComplexHalf", "tests": 1},
    ]


def test_wheel_whose_dependency_is_missing_offline_fails(
    run_cli: CliRunner, tmp_path: Path, offline_wheels: Path
) -> None:
    project = tmp_path / "needy"
    (project / "needy").mkdir(parents=True)
    (project / "needy" / "__init__.py").write_text("")
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "needy"\nversion = "1.0"\ndependencies = ["rocm-build-no-such-dep"]\n'
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, project],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("*.whl")
    result = smoke(run_cli, tmp_path, wheel, "--offline", "--find-links", offline_wheels)
    assert result.returncode == 12, result.stderr
    assert "do not install into a fresh environment" in result.stderr
    assert "rocm-build-no-such-dep" in result.stderr


def test_the_run_counts_its_tests_as_they_finish(
    tmp_path: Path, fat_wheel: Path, offline_wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sign of life while the suite runs (a count of the tests finished, not a spinner
    alone) and the count when it finishes (``tally``, which ``all`` prints)."""
    import os

    from rocm_build import config, smoke
    from rocm_build.run import context
    from tests.support.progress_recording import RecordingProgress

    for name in ("ROCM_PATH", "ROCM_HOME", "LD_LIBRARY_PATH"):
        monkeypatch.delenv(name, raising=False)
    flags = {
        "arch": TARGETS,
        "smoke.offline": True,
        "smoke.find_links": [str(offline_wheels)],
        "smoke.keep_venv": True,  # asked for: a passing run's venv stays
    }
    cfg = config.load(cwd=tmp_path, env=dict(os.environ), flags=flags)
    bars = RecordingProgress()
    result = smoke.execute(smoke.plan(context.resolve(cfg), [fat_wheel]), bars)
    assert result.ok, result.log_file.read_text()[-2000:]
    record = bars.tasks["smoke: tests run"]
    assert record.done
    # every test that ran (a module skipped whole at collection, test_gpu.py here, runs none)
    ran = [o for o in result.outcomes if o.message != "collection skipped"]
    assert record.count == len(ran) >= 5
    assert record.counts == list(range(1, record.count + 1))  # one by one, as they finish
    passed, skipped = result.count("passed"), result.count("skipped")
    tally = f"{len(result.outcomes)} tests: {passed} passed" + (
        f", {skipped} skipped" if skipped else ""
    )
    assert result.tally() == tally
    assert result.plan.venv_python.exists()
