"""Progress of a real bundle (bytes bundled), and what the CLI shows of it."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.bundle.execute import bundle_many
from rocm_build.run import context
from tests.conftest import CliRunner
from tests.support.progress_recording import RecordingProgress


@pytest.mark.slow
def test_bundle_reports_bytes_up_to_the_planned_total(
    hip_ext_wheel: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = config.load(
        cwd=tmp_path,
        env=dict(os.environ),
        flags={
            "rocm": str(rocm_tree),
            "bundle.wheel_dir": str(out),
            "arch": "gfx90a",
            "bundle.compression_level": 0,  # stored: the test is about counting, not deflate
        },
    )
    rec = RecordingProgress()
    (result,) = bundle_many(context.resolve(cfg, tree=True), [hip_ext_wheel], progress=rec)
    fat = Path(result.output)
    (task,) = rec.tasks
    assert task == f"{fat.name}: bytes bundled"
    record = rec.completed(task)
    assert record.total is not None
    # The total covers every library grafted in from the tree, at its full size.
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
    grafted = sum(Path(lib["source"]).stat().st_size for lib in prov["libraries"])
    assert record.total >= grafted > 0
    # Bundling it again is a no-op: nothing is written, nothing reported.
    again = RecordingProgress()
    bundle_many(context.resolve(cfg, tree=True), [hip_ext_wheel], progress=again)
    assert again.tasks == {}


@pytest.mark.slow
def test_cli_progress_obeys_quiet_json_and_verbose(
    run_cli: CliRunner, hip_ext_wheel: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    # A terminal as far as rich can tell, so bars would be drawn (and captured) if shown.
    env = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "200"}

    def run(*front: str, out: str) -> tuple[str, str]:
        args = [*front, "bundle", str(hip_ext_wheel), "--rocm", str(rocm_tree)]
        res = run_cli(
            [*args, "--arch", "gfx90a", "-z", "0", "--output-dir", str(tmp_path / out)],
            cwd=tmp_path,
            env=env,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout, res.stderr

    _, stderr = run(out="plain")
    assert "bytes bundled" in stderr  # the control: shown by default
    stdout, stderr = run("--quiet", out="quiet")
    assert "bytes bundled" not in stdout + stderr
    stdout, stderr = run("--json", out="json")
    (item,) = json.loads(stdout)
    assert item["status"] == "bundled"
    assert "bytes bundled" not in stderr
    _, stderr = run("-v", out="verbose")
    line = next(ln for ln in stderr.splitlines() if "bytes bundled:" in ln)
    done, total = line.split("bytes bundled: ", 1)[1].strip().split("/")
    assert done == total
