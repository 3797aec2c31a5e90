"""The CI build matrix as data: jobs from settings, flags and config files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocm_build import config
from rocm_build.commands import matrix
from rocm_build.common.errors import ConfigError

TREE = "https://dist.example/therock-{group}.tar.gz"


def load(tmp_path: Path, env: dict[str, str] | None = None, **flags: Any) -> config.Config:
    """Settings with the given [matrix] flags; a tree URL unless ``rocm`` is given."""
    flags.setdefault("rocm", TREE)
    return config.load(
        cwd=tmp_path,
        env=env or {},
        flags={f"matrix.{k}": v for k, v in flags.items() if v is not None},
    )


def test_defaults_make_one_job_per_python_train_and_group(tmp_path: Path) -> None:
    cfg = load(tmp_path)
    jobs = matrix.plan_matrix(cfg)
    pythons = cfg.matrix.pythons
    groups = cfg.matrix.arch_groups
    assert len(jobs) == len(pythons) * len(groups)
    assert {j.train for j in jobs} == {cfg.general.train}
    assert len({j.name for j in jobs}) == len(jobs)
    assert len({j.artifact for j in jobs}) == len(jobs)
    # each group its own local version label: the wheels' file names differ
    assert len({(j.python, j.train, j.version_suffix) for j in jobs}) == len(jobs)
    # TheRock's family strings, as its tarballs ({group} in matrix.rocm) are named
    therock = ["gfx94X-dcgpu", "gfx950-dcgpu", "gfx110X-all", "gfx120X-all"]
    assert [str(g) for g in groups] == therock
    assert {j.version_suffix for j in jobs if j.arch_group == "gfx94X-dcgpu"} == {
        "+rocm{rocm}.gfx94X-dcgpu"
    }


def test_families_expand_and_explicit_groups_keep_their_targets(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        pythons=["3.12"],
        trains=["2.9", "2.10"],
        arch_groups=["gfx110X", "gfx90a;gfx942", "mi=gfx942+gfx950"],
    )
    jobs = matrix.plan_matrix(cfg)
    assert [j.name for j in jobs] == [
        "py3.12-2.9-gfx110X",
        "py3.12-2.9-gfx90a-gfx942",
        "py3.12-2.9-mi",
        "py3.12-2.10-gfx110X",
        "py3.12-2.10-gfx90a-gfx942",
        "py3.12-2.10-mi",
    ]
    by_group = {j.arch_group: j.arch for j in jobs}
    assert by_group["gfx110X"] == ";".join(cfg.target_families["gfx110X"])
    assert by_group["gfx90a-gfx942"] == "gfx90a;gfx942"
    assert by_group["mi"] == "gfx942;gfx950"


def test_rocm_and_runner_labels_are_filled_in_per_job(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        pythons=["3.13"],
        arch_groups=["gfx94X"],
        rocm="https://therock.example/dist-linux-{group}-{train}.tar.gz",
        gpu_labels=["self-hosted", "mi300-{group}"],
    )
    (job,) = matrix.plan_matrix(cfg)
    assert job.rocm == f"https://therock.example/dist-linux-gfx94X-{cfg.general.train}.tar.gz"
    assert job.gpu_runs_on == ("self-hosted", "mi300-gfx94X")


def test_rocm_defaults_to_the_rocm_setting(tmp_path: Path) -> None:
    cfg = config.load(
        cwd=tmp_path,
        env={"ROCM_PATH": "/srv/rocm-7.0"},
        flags={"matrix.pythons": ["3.12"], "matrix.arch_groups": ["gfx942"]},
    )
    (job,) = matrix.plan_matrix(cfg)
    assert job.rocm == "/srv/rocm-7.0"
    assert job.arch == "gfx942"


def test_no_tree_is_an_error_at_matrix_time(tmp_path: Path) -> None:
    """No /opt/rocm default: a hosted runner has none, and every build job would fail on it."""
    bare = load(tmp_path, pythons=["3.12"], arch_groups=["gfx942"], rocm=None)
    with pytest.raises(ConfigError, match=r"names no ROCm tree.*--rocm URL"):
        matrix.plan_matrix(bare)


def test_settings_come_from_the_config_file_and_environment(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        '[matrix]\npythons = ["3.11"]\narch_groups = ["gfx90a;gfx942"]\ntrains = ["2.10"]\n'
        f'rocm = "{TREE}"\n'
    )
    jobs = matrix.plan_matrix(config.load(cwd=tmp_path, env={}))
    assert [(j.python, j.train, j.arch) for j in jobs] == [("3.11", "2.10", "gfx90a;gfx942")]
    env = {"ROCM_BUILD_MATRIX_ARCH_GROUPS": "gfx94X,gfx1100+gfx1151"}
    jobs = matrix.plan_matrix(config.load(cwd=tmp_path, env=env))
    assert [j.arch for j in jobs] == ["gfx942", "gfx1100;gfx1151"]


def test_duplicates_collapse_and_order_is_stable(tmp_path: Path) -> None:
    cfg = load(tmp_path, pythons=["3.12", "3.12"], arch_groups=["gfx942+gfx942"])
    (job,) = matrix.plan_matrix(cfg)
    assert job.arch == "gfx942"
    assert matrix.plan_matrix(cfg) == (job,)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"pythons": ["python3.12"]}, "not MAJOR.MINOR"),
        ({"trains": ["2.99"]}, "unknown release train '2.99'"),
        ({"arch_groups": ["gfx9422"]}, "did you mean 'gfx942'"),
        ({"arch_groups": ["gfx94X", "gfx94X"]}, "given twice"),
        ({"arch_groups": ["x=;"]}, "is empty"),
        ({"arch_groups": ["bad/name=gfx942"]}, "may only use"),
        ({"pythons": []}, "--python is empty"),
        ({"arch_groups": []}, "--arch-groups is empty"),
    ],
)
def test_bad_input_is_a_config_error(tmp_path: Path, flags: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        matrix.plan_matrix(load(tmp_path, **flags))


def test_more_jobs_than_github_allows(tmp_path: Path) -> None:
    pythons = [f"3.{n}" for n in range(11, 25)]
    groups = sorted(set(config.load(cwd=tmp_path, env={}).known_targets))
    cfg = load(tmp_path, pythons=pythons, arch_groups=groups[:20])
    with pytest.raises(ConfigError, match="more than GitHub's 256"):
        matrix.plan_matrix(cfg)


def test_github_output_is_one_line_with_an_include_list(tmp_path: Path) -> None:
    jobs = matrix.plan_matrix(load(tmp_path, pythons=["3.12"], arch_groups=["gfx94X"]))
    line = matrix.as_github_output(jobs)
    assert "\n" not in line
    key, _, value = line.partition("=")
    assert key == "matrix"
    data = json.loads(value)
    assert data == matrix.as_json(jobs)
    (entry,) = data["include"]
    assert set(entry) == set(matrix.JOB_KEYS)
    assert entry["gpu_runs_on"] == list(jobs[0].gpu_runs_on)


def test_split_list_keeps_semicolons_inside_a_group() -> None:
    assert matrix.split_list("gfx94X, gfx90a;gfx942  mi=gfx950") == [
        "gfx94X",
        "gfx90a;gfx942",
        "mi=gfx950",
    ]
    assert matrix.split_list(["a,b", "c"]) == ["a", "b", "c"]


def test_version_suffix_per_group_keeps_wheel_names_apart(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        pythons=["3.12"],
        arch_groups=["gfx94X", "gfx110X"],
        version_suffix="+rocm7.0.{group}",
    )
    assert [j.version_suffix for j in matrix.plan_matrix(cfg)] == [
        "+rocm7.0.gfx94X",
        "+rocm7.0.gfx110X",
    ]
    one_group = load(tmp_path, arch_groups=["gfx94X"], version_suffix="")
    assert {j.version_suffix for j in matrix.plan_matrix(one_group)} == {""}


@pytest.mark.parametrize("suffix", ["", "+rocm7.0", "+rocm7.0.{python}"])
def test_groups_that_would_share_wheel_names_are_an_error(tmp_path: Path, suffix: str) -> None:
    cfg = load(tmp_path, arch_groups=["gfx94X", "gfx110X"], version_suffix=suffix)
    with pytest.raises(ConfigError, match=r"same names .*put \{group\}"):
        matrix.plan_matrix(cfg)
    # labels that differ only as PEP 440 normalizes them are the same label
    cfg = load(tmp_path, arch_groups=["a=gfx942", "A=gfx950"], version_suffix="+r.{group}")
    with pytest.raises(ConfigError, match="same names"):
        matrix.plan_matrix(cfg)


def test_each_job_builds_its_trains_projects_and_triton(tmp_path: Path) -> None:
    cfg = load(tmp_path, pythons=["3.12"], trains=["2.11", "2.12"], arch_groups=["gfx94X"])
    by_train = {j.train: j.projects for j in matrix.plan_matrix(cfg)}
    assert by_train == {
        "2.11": "torch,torchvision,torchaudio,triton",
        "2.12": "torch,torchvision,torchaudio,triton",  # torchaudio v2.11.0, as TheRock pairs it
    }
    # what a job's ROCM_BUILD_DEFAULT_PROJECTS makes of it: triton built before torch
    env = {"ROCM_BUILD_TRAIN": "2.12", "ROCM_BUILD_DEFAULT_PROJECTS": by_train["2.12"]}
    chosen = [s.name for s in config.load(cwd=tmp_path, env=env).selected_projects()]
    assert chosen == ["triton", "torch", "torchvision", "torchaudio"]


def test_extra_projects_can_be_none_or_must_be_known(tmp_path: Path) -> None:
    none = load(tmp_path, pythons=["3.12"], arch_groups=["gfx94X"], extra_projects=[])
    assert {j.projects for j in matrix.plan_matrix(none)} == {"torch,torchvision,torchaudio"}
    # default_projects replaces the train's, and a name in both is listed once
    own = config.load(
        cwd=tmp_path,
        env={"ROCM_BUILD_DEFAULT_PROJECTS": "torch,triton"},
        flags={"matrix.rocm": TREE, "matrix.pythons": ["3.12"], "matrix.arch_groups": ["gfx94X"]},
    )
    assert {j.projects for j in matrix.plan_matrix(own)} == {"torch,triton"}
    bad = load(tmp_path, pythons=["3.12"], arch_groups=["gfx94X"], extra_projects=["tritn"])
    with pytest.raises(ConfigError, match=r"matrix jobs of train 2\.14: unknown project 'tritn'"):
        matrix.plan_matrix(bad)
