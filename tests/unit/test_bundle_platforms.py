"""The bundle platforms are a registry: the stage asks it which platform bundles a wheel, so a
platform registered here (a test-only one, for a made-up ``plan9`` tag) is the one chosen for its
wheel, gets the job made from the settings, and prints its own dry-run lines."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocm_build import bundle, config
from rocm_build.bundle import platforms
from rocm_build.bundle.job import BundleJob, Platform, WheelTask
from rocm_build.bundle.model import BundleResult
from rocm_build.common.errors import BundleError, ConfigError
from rocm_build.common.progress import Progress
from rocm_build.config.loader import ProjectSpec
from rocm_build.config.schema import BundleSettings
from rocm_build.run import context
from tests.support.trees import make_tree

WHEEL = Path("ext-1.0-cp311-cp311-plan9_amd64.whl")


@dataclass
class Plan9:
    """A test-only platform: it owns ``plan9`` tags and records the jobs it is given."""

    name: str = "plan9"
    label: str = "Plan 9"
    thin: bool = False
    split_arch: bool = False
    jobs: list[BundleJob] = field(default_factory=list)

    def owns(self, platform_tags: Sequence[str]) -> bool:
        return any(t.startswith("plan9") for t in platform_tags)

    def lib_dir(self, wheel: Path, projects: Mapping[str, ProjectSpec], flag: str | None) -> str:
        return "ext/plan9libs"

    def plan(self, job: BundleJob) -> WheelTask:
        self.jobs.append(job)
        return WheelTask(job, self.name, "bundle", "", "", summary={"platform": self.name})

    def execute(self, planned: WheelTask, progress: Progress) -> BundleResult:
        raise AssertionError("a dry run executes nothing")

    def plan_lines(self, result: BundleResult) -> Iterator[str]:
        yield f"would bundle {Path(result.input).name} for Plan 9"


@pytest.fixture
def plan9(monkeypatch: pytest.MonkeyPatch) -> Plan9:
    platform = Plan9()
    registered: Platform = platform  # it answers what a platform must
    monkeypatch.setitem(platforms.PLATFORMS, platform.name, registered)
    return platform


def _plans(tmp_path: Path, **flags: object) -> bundle.Plan:
    make_tree(tmp_path / "rocm")
    cfg = config.load(cwd=tmp_path, env={}, flags={"rocm": "rocm", "arch": "gfx90a", **flags})
    return bundle.plan(context.resolve(cfg, tree=True, targets=True), [WHEEL], dry_run=True)


def test_a_registered_platform_is_chosen_for_its_wheel(plan9: Plan9, tmp_path: Path) -> None:
    plans = _plans(tmp_path, **{"bundle.compression_level": 3})
    (job,) = plan9.jobs  # asked for its plan by the stage's plan
    (result,) = bundle.execute(plans).results
    assert (job.wheel, job.lib_dir, job.deflate.level, job.dry_run) == (
        WHEEL,
        "ext/plan9libs",
        3,
        True,
    )
    assert job.rocm == tmp_path / "rocm"
    assert list(platforms.plan_lines(result)) == [f"would bundle {WHEEL.name} for Plan 9"]


def test_a_platform_the_tag_contradicts_is_refused(plan9: Plan9, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _plans(tmp_path, **{"bundle.platform": "linux"})
    assert str(err.value).startswith(f"{WHEEL.name} is a Plan 9 wheel but --platform")
    assert err.value.exit_code == 2
    assert plan9.jobs == []


def test_capabilities_come_from_the_platforms(plan9: Plan9) -> None:
    thin = "--mode thin makes Linux wheels only so far: bundle this Plan 9 wheel in fat mode"
    with pytest.raises(BundleError, match=thin):
        platforms.choose(WHEEL, "auto", thin=True)
    with pytest.raises(BundleError, match="--split-arch makes Linux wheels only so far"):
        platforms.check_split(WHEEL, "auto")
    assert platforms.platform_for(Path("x-1-py3-none-any.whl"), "auto").name == "linux"


def test_the_setting_offers_exactly_the_registered_platforms() -> None:
    """``bundle.platform``'s choices live in config (below the stages): a new platform adds its
    name there too, and this test says so."""
    setting = BundleSettings.__dataclass_fields__["platform"].metadata["setting"]
    assert setting.choices == ("auto", *platforms.PLATFORMS)
