"""The build matrix for CI: one job per Python version x release train x group of gfx targets.

Jobs are plain data so a CI system's own fan-out runs them (GitHub Actions ``strategy.matrix``);
rocm-build itself never schedules machines. Each job names the ROCm tree it builds against (a
folder or a tarball URL, which ``build --rocm`` and ``rocm fetch`` accept) and the runner labels of
its GPU smoke test.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rocm_build.common import arch
from rocm_build.common.errors import ConfigError
from rocm_build.config.loader import Config, natural_key

__all__ = [
    "JOB_KEYS",
    "MAX_JOBS",
    "ArchGroup",
    "Job",
    "as_github_output",
    "as_json",
    "parse_arch_group",
    "plan_matrix",
    "split_list",
]

#: GitHub Actions refuses a matrix with more jobs than this.
MAX_JOBS = 256

PYTHON_RE = re.compile(r"^3\.\d{1,2}t?$")
MEMBER_SEPARATORS = re.compile(r"[;+\s]+")


@dataclass(frozen=True)
class ArchGroup:
    name: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """One CI job. Field names are the matrix keys the workflow uses (``matrix.arch``, ...)."""

    name: str
    python: str
    train: str
    arch_group: str
    arch: str  # ';'-separated gfx targets, as --arch and PYTORCH_ROCM_ARCH take them
    rocm: str  # ROCm tree folder or tarball URL, never empty (a job names its tree)
    artifact: str
    gpu_runs_on: tuple[str, ...]
    version_suffix: str  # build --version-suffix ({rocm}: the tree's version); "" = +rocm<version>
    projects: str  # ','-separated, as ROCM_BUILD_DEFAULT_PROJECTS takes them: train's + extras

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpu_runs_on"] = list(self.gpu_runs_on)
        return data


JOB_KEYS = tuple(Job.__dataclass_fields__)


def split_list(value: str | Sequence[str]) -> list[str]:
    """Groups from a flag or setting: ``,`` or whitespace between items (``;`` stays inside an
    item, since it separates the targets of one group)."""
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        out.extend(p.strip() for p in re.split(r"[,\s]+", item) if p.strip())
    return out


def _expand(member: str, cfg: Config) -> tuple[str, ...]:
    """A group member as ``--arch`` reads it (a target, TheRock's family strings, rocm-bootstrap's
    groups)."""
    known, families = cfg.known_targets, cfg.target_families
    base = member.split(":", 1)[0]
    if not arch.is_known(base, known=known, families=families):
        close = arch.suggest(base, known=known, families=families)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        msg = (
            f"unknown gfx target or family '{member}' in --arch-groups{hint} (families: "
            "TheRock's strings such as gfx94X-dcgpu, rocm-bootstrap's groups such as gfx110x, "
            "targets.families in the config; `rocm-build config --json` lists them)"
        )
        raise ConfigError(msg)
    try:
        return arch.expand([member], known=known, families=families)
    except ConfigError as err:  # a target's features
        raise ConfigError(f"--arch-groups: {err}") from None


def parse_arch_group(spec: str, cfg: Config) -> ArchGroup:
    """``gfx94X`` (a family), ``gfx90a;gfx942`` or ``gfx90a+gfx942`` (explicit targets), or
    ``NAME=gfx90a;gfx942`` (explicit targets with a name for artifacts and runner labels)."""
    name, sep, members_text = spec.partition("=")
    if not sep:
        members_text, name = spec, ""
    members = [m for m in MEMBER_SEPARATORS.split(members_text.strip()) if m]
    name = name.strip()
    if not members or (sep and not name):
        msg = f"arch group '{spec}' is empty; give a family (gfx94X) or targets (gfx90a;gfx942)"
        raise ConfigError(msg)
    if name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        msg = f"arch group name '{name}' may only use letters, digits, '.', '_' and '-'"
        raise ConfigError(msg)
    targets = tuple(dict.fromkeys(t for m in members for t in _expand(m, cfg)))
    if not name:
        name = members[0] if len(members) == 1 else "-".join(members)
    return ArchGroup(name, targets)


def _check_python(version: str) -> str:
    if not PYTHON_RE.match(version):
        msg = f"Python version '{version}' is not MAJOR.MINOR like 3.12 (3.13t: free-threaded)"
        raise ConfigError(msg)
    return version


def _check_train(train: str, cfg: Config) -> str:
    if train not in cfg.trains:
        close = difflib.get_close_matches(train, list(cfg.trains), n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
        known = ", ".join(sorted(cfg.trains, key=natural_key))
        msg = f"unknown release train '{train}'; {hint}known: {known}"
        raise ConfigError(msg)
    return train


def _fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{python}``, ``{train}``, ``{group}``, ``{arch}``; other braces are kept."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _projects(cfg: Config, train: str) -> str:
    """What a job of ``train`` checks out and builds: ``default_projects`` or the train's, then
    ``matrix.extra_projects`` (triton). An unknown name is a ``ConfigError`` with its close
    matches."""
    base = list(cfg.general.default_projects) or list(cfg.trains[train])
    names = _dedupe([*base, *cfg.matrix.extra_projects])
    for name in names:
        try:
            cfg.project(name)
        except ConfigError as err:
            raise ConfigError(f"matrix jobs of train {train}: {err}") from None
    return ",".join(names)


def plan_matrix(cfg: Config) -> tuple[Job, ...]:
    """Every job of the matrix from the ``[matrix]`` settings, in a stable order."""
    settings = cfg.matrix
    pythons = _dedupe(_check_python(p) for p in split_list(settings.pythons))
    trains = _dedupe(
        _check_train(t, cfg) for t in (split_list(settings.trains) or [cfg.general.train])
    )
    groups = [parse_arch_group(g, cfg) for g in split_list(settings.arch_groups)]
    names = [g.name for g in groups]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        msg = f"arch group {duplicated[0]!r} is given twice; name groups with NAME=targets"
        raise ConfigError(msg)
    for what, items in (("--python", pythons), ("--train", trains), ("--arch-groups", groups)):
        if not items:
            msg = f"the matrix has no jobs: {what} is empty; give at least one value"
            raise ConfigError(msg)
    count = len(pythons) * len(trains) * len(groups)
    if count > MAX_JOBS:
        msg = f"the matrix has {count} jobs, more than GitHub's {MAX_JOBS}; split it up"
        raise ConfigError(msg)
    # Never empty: an empty --rocm would hide the build machine's ROCM_PATH from some stages.
    # No default: a hosted runner has no /opt/rocm, and every build job would fail on it.
    rocm_template = settings.rocm or cfg.general.rocm
    if not rocm_template:
        msg = (
            "the matrix names no ROCm tree for its jobs: give --rocm URL (a tarball, "
            "{group} replaced per job; the workflow's `rocm` input or ROCM_BUILD_ROCM variable), "
            "matrix.rocm in rocm-build.toml, or a folder every build machine has"
        )
        raise ConfigError(msg)
    labels = split_list(settings.gpu_labels)
    suffix_template = settings.version_suffix
    jobs: list[Job] = []
    for train in trains:
        projects = _projects(cfg, train)
        for group in groups:
            for python in pythons:
                values = {
                    "python": python,
                    "train": train,
                    "group": group.name,
                    "arch": ";".join(group.targets),
                }
                name = f"py{python}-{train}-{group.name}"
                jobs.append(
                    Job(
                        name=name,
                        python=python,
                        train=train,
                        arch_group=group.name,
                        arch=values["arch"],
                        rocm=_fill(rocm_template, values),
                        artifact=f"wheels-{name}",
                        gpu_runs_on=tuple(_dedupe(_fill(label, values) for label in labels)),
                        version_suffix=_fill(suffix_template, values),
                        projects=projects,
                    )
                )
    _check_wheel_names(jobs)
    return tuple(jobs)


def _check_wheel_names(jobs: Sequence[Job]) -> None:
    """Jobs of one Python and train build wheels of the same versions: only their local version
    labels (build --version-suffix) keep the file names apart, for artifacts and the index."""
    seen: dict[tuple[str, str, str], Job] = {}
    for job in jobs:
        label = re.sub(r"[-_.]+", ".", job.version_suffix.lstrip("+").lower())
        other = seen.setdefault((job.python, job.train, label), job)
        if other is not job:
            msg = (
                f"jobs {other.name} and {job.name} would build wheels with the same names "
                f"(version suffix {job.version_suffix or 'the default'!r}); put {{group}} in "
                "matrix.version_suffix (ROCM_BUILD_MATRIX_VERSION_SUFFIX), e.g. "
                "'+rocm{rocm}.{group}'"
            )
            raise ConfigError(msg)


def as_json(jobs: Sequence[Job]) -> dict[str, Any]:
    """The matrix as GitHub's ``strategy.matrix`` takes it: ``{"include": [job, ...]}``."""
    return {"include": [job.as_dict() for job in jobs]}


def as_github_output(jobs: Sequence[Job]) -> str:
    """``matrix=<json>`` on one line, for ``>> "$GITHUB_OUTPUT"``."""
    return "matrix=" + json.dumps(as_json(jobs), separators=(",", ":"), sort_keys=True)
