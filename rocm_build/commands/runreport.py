"""The run report of ``rocm-build all``: what was built from what, and whether it works.

``collect`` gathers the facts (pure apart from reading the source manifest and hashing the
wheels), ``render_markdown`` turns them into a short summary (pure), and ``write`` puts both
next to each other in the work folder, atomically: ``run-report.json`` and ``run-report.md``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common import statefile
from rocm_build.common.errors import FileAccessError, RocmBuildError
from rocm_build.common.masking import mask_values
from rocm_build.common.sizes import human_size
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest
from rocm_build.run.context import RunContext
from rocm_build.wheel import torchinfo
from rocm_build.wheel.wheelread import WheelReader

__all__ = ["RunReport", "StageOutcome", "collect", "render_markdown", "write"]

JSON_NAME = "run-report.json"
MARKDOWN_NAME = "run-report.md"


@dataclass(frozen=True)
class StageOutcome:
    """How one stage of ``rocm-build all`` ended (made by the pipeline, shown in the report)."""

    name: str
    status: str  # "ran" | "skipped" | "failed" | "interrupted" | "not run"
    seconds: float = 0.0
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RunReport:
    """The written run report: its files, the report (``data``, masked, as the JSON file holds
    it) and, typed for people, each stage's outcome and the fat wheels, as the report has them
    (masked: read back from ``data`` when it is written)."""

    json_path: Path
    markdown: Path
    data: Mapping[str, Any]
    stages: tuple[StageOutcome, ...] = ()
    bundled: tuple[str, ...] = ()  # the fat wheels' paths

    @property
    def ok(self) -> bool:
        return bool(self.data.get("ok"))

    def as_json(self) -> dict[str, Any]:
        return {**self.data, "report": str(self.json_path), "markdown": str(self.markdown)}


def _wheel(path_text: str) -> dict[str, Any]:
    path = Path(path_text)
    if not path.is_file():
        return {"name": path.name, "path": str(path), "missing": True}
    entry: dict[str, Any] = {
        "name": path.name,
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": statefile.file_sha256(path),
    }
    if path.name.startswith("torch-"):
        entry["build_features"] = _torch_features(path)
    return entry


def _torch_features(path: Path) -> dict[str, Any] | None:
    """What the torch wheel says it was built with (its macros.h, version.py, aotriton)."""
    try:
        with WheelReader(path) as reader:
            return torchinfo.build_features(reader, [m.name for m in reader.members])
    except (OSError, RocmBuildError):
        return None  # an unreadable wheel is the bundle's or inspect's to report


def _sources(ctx: RunContext, names: Sequence[str]) -> list[dict[str, Any]]:
    try:
        manifest = read_manifest(ctx.src_dir / MANIFEST_NAME)
    except RocmBuildError:  # a manifest no one may trust: the checkout stage stopped on it
        manifest = {"projects": {}}
    out = []
    for name in names:
        entry = manifest.get("projects", {}).get(name)
        if not entry:
            out.append({"name": name, "checked_out": False})
            continue
        out.append(
            {
                "name": name,
                "origin": entry.get("origin"),
                "ref": entry.get("ref"),
                "commit": entry.get("commit"),
                "head": entry.get("head"),
                "patchset": entry.get("patchset"),
                "patches": [
                    {"file": p.get("file"), "sha256": p.get("sha256")}
                    for p in entry.get("patches", [])
                ],
                "hipify": bool(entry.get("hipify")),
                "submodules": len(entry.get("submodules", [])),
            }
        )
    return out


#: What the run report keeps of each project in the build's own report (build-report.json):
#: the version and where it came from, the switches set and what the plan decided.
_BUILD_KEYS = ("version", "version_from", "device_code", "environment", "notes")


def _build(ctx: RunContext) -> dict[str, Any]:
    path = ctx.output_dir / "build-report.json"
    try:
        data = statefile.read_json(path, "build report")
    except (FileNotFoundError, ValueError, FileAccessError):
        return {}  # a build report no one may trust: the build stage itself stopped on it
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return {}
    return {
        name: {k: entry.get(k) for k in _BUILD_KEYS}
        for name, entry in projects.items()
        if isinstance(entry, dict)
    }


def _smoke(data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not data:
        return None
    facts = data.get("facts") or {}
    hip = next(
        (
            p.get("hip")
            for p in facts.get("probes", {}).values()
            if (p.get("hip") or {}).get("loaded")
        ),
        None,
    )
    return {
        "ok": data.get("ok"),
        "passed": data.get("passed"),
        "failed": data.get("failed"),
        "errors": data.get("errors"),
        "skipped": data.get("skipped"),
        "failures": data.get("failures", []),
        "packages": (data.get("plan") or {}).get("packages", []),
        "hip": hip,
        "code_object_targets": facts.get("found_targets", {}),
        # Triton beside torch: where its HIP lookup led and the kernels compiled per target
        "triton": facts.get("triton"),
        "devices": facts.get("devices", []),
        "log": data.get("log"),
    }


def collect(
    ctx: RunContext, facts: Mapping[str, Any], outcomes: Sequence[StageOutcome], *, ok: bool
) -> dict[str, Any]:
    cfg = ctx.settings
    finished = time.time()
    started = float(facts.get("started", finished))
    # Masked as a whole: settings, origins, URLs and error messages alike.
    return mask_values(
        {
            "format": 1,
            "ok": ok,
            "failed_stage": facts.get("failed_stage"),
            "tool": facts.get("tool"),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "seconds": round(finished - started, 1),
            "settings": mask_values(cfg.as_json()["settings"]),
            # What torch's build was asked for; each torch wheel's entry says what it got.
            "features": dataclasses.asdict(cfg.features),
            "config_file": str(cfg.config_file) if cfg.config_file else None,
            "sources": _sources(ctx, facts.get("projects", [])),
            "rocm": facts.get("rocm"),
            "targets": facts.get("targets", []),
            "wheels": {
                "built": [_wheel(p) for p in facts.get("built", [])],
                "bundled": [_wheel(p) for p in facts.get("bundled", [])],
            },
            "build": _build(ctx),
            "smoke": _smoke(facts.get("smoke")),
            "stages": [o.as_json() for o in outcomes],
        }
    )


def _size(n: int | None) -> str:
    return "?" if n is None else human_size(n)


def _feature_lines(data: Mapping[str, Any]) -> list[str]:
    """The features asked for, and what each torch wheel says it was built with."""
    asked = data.get("features") or {}
    if not asked:
        return []
    lines = ["", "## Build features", ""]
    lines.append("asked: " + ", ".join(f"{k} = {v}" for k, v in asked.items()))
    wheels = data.get("wheels") or {}
    for wheel in [*wheels.get("built", []), *wheels.get("bundled", [])]:
        said = wheel.get("build_features")
        if said:
            asserts = {True: "on", False: "off"}.get(said["gpu_asserts"], "not recorded")
            lines.append(
                f"- {wheel['name']}: flash attention {'on' if said['flash_attention'] else 'off'}"
                f" (aotriton images: {', '.join(said['aotriton_images']) or 'none'}), GPU asserts "
                f"{asserts}, HIP {said['hip'] or 'not recorded'}"
            )
    return lines


def render_markdown(data: Mapping[str, Any]) -> str:
    """A short human summary of a run report."""
    status = "passed" if data.get("ok") else f"FAILED in {data.get('failed_stage')}"
    lines = [f"# rocm-build run: {status}", ""]
    rocm = data.get("rocm") or {}
    lines.append(
        f"ROCm {rocm.get('version') or '?'} ({rocm.get('root') or 'not resolved'}), targets "
        f"{';'.join(data.get('targets') or []) or '?'}, {data.get('seconds')} s in total."
    )
    lines += ["", "## Sources", ""]
    for src in data.get("sources", []):
        if not src.get("commit"):
            lines.append(f"- {src['name']}: not checked out")
            continue
        patches = ", ".join(p["file"] for p in src.get("patches", [])) or "none"
        lines.append(
            f"- {src['name']}: {src.get('origin')} {src.get('ref')} at "
            f"`{str(src.get('commit'))[:12]}` (head `{str(src.get('head'))[:12]}`); "
            f"hipify: {'yes' if src.get('hipify') else 'no'}; patches ({src.get('patchset')}): "
            f"{patches}"
        )
    wheels = data.get("wheels") or {}
    for kind in ("bundled", "built"):
        if wheels.get(kind):
            lines += [
                "",
                f"## Wheels ({kind})",
                "",
                "| wheel | size | sha256 |",
                "| --- | --- | --- |",
            ]
            lines += [
                f"| {w['name']} | {_size(w.get('size'))} | `{w.get('sha256', 'missing')}` |"
                for w in wheels[kind]
            ]
    lines += _feature_lines(data)
    smoke = data.get("smoke")
    lines += ["", "## Smoke tests", ""]
    if smoke:
        verdict = "passed" if smoke.get("ok") else "FAILED"
        lines.append(
            f"{verdict}: {smoke.get('passed')} passed, {smoke.get('failed')} failed, "
            f"{smoke.get('errors')} errors, {smoke.get('skipped')} skipped "
            f"({', '.join(smoke.get('packages') or [])})."
        )
        hip = smoke.get("hip") or {}
        if hip:
            lines.append(
                f"HIP runtime from `{hip.get('path')}`: hipGetDeviceCount -> {hip.get('rc')}."
            )
        for pkg, found in (smoke.get("code_object_targets") or {}).items():
            lines.append(f"Code objects in {pkg}: {';'.join(found)}.")
        for dev in smoke.get("devices") or []:
            lines.append(
                f"Device {dev['index']}: {dev['name']} {dev['gfx']}, "
                f"{dev['memory_gib']:.1f} GiB, {dev['compute_units']} CUs."
            )
        for failure in smoke.get("failures") or []:
            first = (str(failure["message"]).splitlines() or [""])[0]
            lines.append(f"- failed: {failure['test']}: {first}")
    else:
        lines.append("not run")
    lines += ["", "## Stages", "", "| stage | status | time | note |", "| --- | --- | --- | --- |"]
    for stage in data.get("stages", []):
        note = str(stage.get("reason") or "").replace("|", "/")
        lines.append(
            f"| {stage['stage']} | {stage['status']} | {stage['seconds']} s | {note[:160]} |"
        )
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    statefile.write_bytes(path, text.encode("utf-8"), "run report")


def write(
    ctx: RunContext, facts: Mapping[str, Any], outcomes: Sequence[StageOutcome], *, ok: bool
) -> RunReport:
    data = collect(ctx, facts, outcomes, ok=ok)
    folder = ctx.work_dir
    json_path = folder / JSON_NAME
    md_path = folder / MARKDOWN_NAME
    _atomic_write(json_path, json.dumps(data, indent=2, default=str) + "\n")
    _atomic_write(md_path, render_markdown(data))
    stages = tuple(
        StageOutcome(s["stage"], s["status"], s["seconds"], s["reason"]) for s in data["stages"]
    )
    bundled = tuple(str(w["path"]) for w in data["wheels"]["bundled"])
    return RunReport(json_path, md_path, data, stages, bundled)
