"""The run report's Markdown summary and the stage stamps' keys (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.commands import pipeline, runreport, stamps
from rocm_build.commands.runreport import StageOutcome
from tests.support.runreports import run_report_data


def test_markdown_of_a_failed_run() -> None:
    text = runreport.render_markdown(run_report_data(ok=False))
    assert text.startswith("# rocm-build run: FAILED in smoke\n")
    assert "ROCm 6.4.1 (/opt/rocm), targets gfx90a;gfx1030, 81.2 s in total." in text
    assert "torch: https://github.com/pytorch/pytorch.git v2.9.1 at `d38164a545b4`" in text
    assert "patches (2.9): base/0001-fix.patch" in text
    assert "- torchvision: not checked out" in text
    assert "| torch-2.9.1+rocm6.4.1-cp311-cp311-manylinux_2_28_x86_64.whl | 4.7 GB | `ffff" in text
    assert "FAILED: 9 passed, 1 failed, 0 errors, 10 skipped (torch)." in text
    assert "- failed: suite.test_torch::test_arch_flags: differ\n" in text
    assert "| smoke | failed | 20.0 s | a / b |" in text


def test_markdown_of_a_run_without_smoke() -> None:
    text = runreport.render_markdown(run_report_data(ok=True))
    assert text.startswith("# rocm-build run: passed\n")
    assert "## Smoke tests\n\nnot run\n" in text


def test_stamp_key_is_stable_and_sensitive() -> None:
    a = stamps.key({"targets": ["gfx90a"], "rocm": {"version": "6.4.1", "root": "/r"}})
    b = stamps.key({"rocm": {"root": "/r", "version": "6.4.1"}, "targets": ["gfx90a"]})
    c = stamps.key({"rocm": {"root": "/r", "version": "6.4.2"}, "targets": ["gfx90a"]})
    assert a == b
    assert a != c


@pytest.mark.parametrize(
    ("stage", "flag", "value"),
    [
        ("build", "features.flash_attention", "off"),  # torch's build environment
        ("build", "triton.repo", "upstream"),
        ("build", "build.aotriton", "off"),
        ("bundle", "bundle.compression_level", 1),
        ("smoke", "smoke.offline", True),
    ],
)
def test_a_stage_stamp_takes_every_setting_its_stage_reads(
    tmp_path: Path, stage: str, flag: str, value: object
) -> None:
    """A setting the stage turns into its outputs changes its ``all`` stamp: a changed torch
    feature is never answered with the last run's wheel."""
    before = stamps.stage_settings(config.load(cwd=tmp_path, env={}), stage)
    after = stamps.stage_settings(config.load(cwd=tmp_path, env={}, flags={flag: value}), stage)
    assert stamps.key(before) != stamps.key(after)
    others = [s for s in stamps.STAMP_SECTIONS if s != stage]
    for other in others:  # and no other stage's
        a = stamps.stage_settings(config.load(cwd=tmp_path, env={}), other)
        b = stamps.stage_settings(config.load(cwd=tmp_path, env={}, flags={flag: value}), other)
        assert a == b, other


def test_a_stop_between_stages_is_blamed_on_the_next_stage() -> None:
    # Ctrl-C right after build's stamp (while "build done" is printed) is not build's failure
    done = [StageOutcome("checkout", "skipped"), StageOutcome("build", "ran", 1.0)]
    assert pipeline.blamed(done) == "bundle"
    assert pipeline.blamed([]) == "checkout"  # before the first stage's outcome
    assert pipeline.blamed([*done, StageOutcome("bundle", "failed", 1.0, "no")]) == "bundle"
    assert pipeline.blamed([*done, StageOutcome("bundle", "interrupted")]) == "bundle"
    finished = [*done, StageOutcome("bundle", "ran"), StageOutcome("smoke", "ran")]
    assert pipeline.blamed(finished) == "smoke"  # the last stage: nothing after it to blame


def test_run_report_keeps_each_builds_version_origin_switches_and_notes(tmp_path: Path) -> None:
    import json

    from rocm_build import config
    from rocm_build.run import context

    cfg = config.load(cwd=tmp_path, env={})
    ctx = context.resolve(cfg)
    ctx.output_dir.mkdir(parents=True)
    entry = {
        "version": "2.9.1+rocm7.1.0",
        "version_from": "release tag v2.9.1",
        "device_code": True,
        "environment": {"ROCM_SOURCE_DIR": "/t", "USE_NUMA": "0"},
        "notes": ["no pre-fetched aotriton"],
        "sha256": "ab",
    }
    report_file = ctx.output_dir / "build-report.json"
    report_file.write_text(json.dumps({"projects": {"torch": entry}}))
    data = runreport.collect(ctx, {}, [], ok=True)
    assert data["build"]["torch"]["version_from"] == "release tag v2.9.1"
    assert data["build"]["torch"]["environment"]["ROCM_SOURCE_DIR"] == "/t"
    assert data["build"]["torch"]["notes"] == ["no pre-fetched aotriton"]
    report_file.write_text("not json")
    assert runreport.collect(ctx, {}, [], ok=True)["build"] == {}


def test_the_written_report_is_typed_for_people_as_its_json_says(tmp_path: Path) -> None:
    import json

    from rocm_build import config
    from rocm_build.run import context

    cfg = config.load(cwd=tmp_path, env={})
    ctx = context.resolve(cfg)
    ctx.work_dir.mkdir(parents=True)
    fat = tmp_path / "fat-1.0-py3-none-any.whl"
    fat.write_bytes(b"w")
    secret = "https://user:hunter2@example.com/x"
    outcomes = [
        StageOutcome("build", "ran", 12.345, ""),
        StageOutcome("bundle", "failed", 1.0, f"could not reach {secret}"),
    ]
    report = runreport.write(ctx, {"bundled": [str(fat)]}, outcomes, ok=False)
    assert report.bundled == (str(fat),)
    assert [(s.name, s.status, s.seconds) for s in report.stages] == [
        ("build", "ran", 12.3),
        ("bundle", "failed", 1.0),
    ]
    assert "hunter2" not in report.stages[1].reason  # as the report has it: masked
    assert report.stages[1].reason == report.data["stages"][1]["reason"]
    written = json.loads(report.json_path.read_text())
    assert report.as_json() == {
        **written,
        "report": str(report.json_path),
        "markdown": str(report.markdown),
    }


def test_all_dry_run_entries_for_people_and_as_json() -> None:
    entries = [
        pipeline.StageWould("checkout", "run", "it checks each checkout", ("torch: upstream",)),
        pipeline.StageWould("build", "skip", "up to date for its inputs (stamp t)"),
        pipeline.StageWould("smoke", "not run", "--no-smoke"),
    ]
    assert list(pipeline.dry_run_lines(entries)) == [
        "checkout: would run: it checks each checkout",
        "  torch: upstream",
        "build: would be skipped: up to date for its inputs (stamp t)",
        "smoke: not run (--no-smoke)",
    ]
    assert entries[0].as_json() == {
        "stage": "checkout",
        "would": "run",
        "why": "it checks each checkout",
        "details": ["torch: upstream"],
    }
    assert list(entries[1].as_json()) == ["stage", "would", "why", "details"]
