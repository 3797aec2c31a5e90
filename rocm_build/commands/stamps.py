"""The stamps of ``all``: per stage, a key made of its inputs (:func:`key`, a digest per part
for a dry run's why: :func:`parts`) and its outputs as they were (size, mtime), written when the
stage succeeds into ``<work_dir>/stamps/<stage>.json``; :func:`load` gives the stamp back only
when the key matches and the outputs are intact. A stamp that is stale, damaged or of other types
is as good as none; one that is no regular file of this user's alone stops the run
(``statefile``, exit 14). :data:`STAMP_SECTIONS` says which settings each stage's key takes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocm_build.common import statefile
from rocm_build.config import Config

__all__ = [
    "FOLDER_WHAT",
    "STAMP_SECTIONS",
    "WHAT",
    "file_facts",
    "is_stamp",
    "key",
    "load",
    "parts",
    "save",
    "stage_settings",
]


def key(inputs: Mapping[str, Any]) -> str:
    """A stable digest of a stage's inputs."""
    return statefile.settings_digest(dict(inputs))


def file_facts(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _intact(outputs: Sequence[Mapping[str, Any]]) -> bool:
    for out in outputs:
        path = Path(str(out["path"]))
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != out["size"] or st.st_mtime_ns != out["mtime_ns"]:
            return False
    return True


WHAT = "`all` stamp"
FOLDER_WHAT = "folder of `all` stamps"
_OUTPUT_TYPES = {"path": str, "size": int, "mtime_ns": int}


def is_stamp(data: Any) -> bool:
    """Whether ``data`` has the types ``_save_stamp`` writes (anything else is not used)."""
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        return False
    outputs = data.get("outputs")
    if not isinstance(outputs, list) or not isinstance(data.get("detail", {}), dict):
        return False
    if not isinstance(data.get("finished", ""), str):
        return False
    return all(
        isinstance(out, dict) and all(isinstance(out.get(k), t) for k, t in _OUTPUT_TYPES.items())
        for out in outputs
    )


def load(folder: Path, stage: str, key: str, *, redo: bool = False) -> dict[str, Any] | None:
    """The stage's stamp when it says the stage is done for ``key``; a stamp that is stale,
    damaged or of other types is as good as none (the stage runs and writes a new one)."""
    path = folder / f"{stage}.json"
    if redo or statefile.check_folder(folder, FOLDER_WHAT) is None:
        return None
    try:
        data = statefile.read_json(path, WHAT)
    except (FileNotFoundError, ValueError):
        return None
    if not is_stamp(data) or data["key"] != key or not _intact(data["outputs"]):
        return None
    return dict(data)


def parts(inputs: Mapping[str, Any]) -> dict[str, str]:
    """A digest per part of a stage's inputs (a dry run names the parts that changed)."""
    return {k: key({k: v}) for k, v in inputs.items()}


def save(
    folder: Path,
    stage: str,
    key: str,
    outputs: Sequence[Path],
    detail: Mapping[str, Any],
    parts: Mapping[str, str],
) -> None:
    data = {
        "stage": stage,
        "key": key,
        "parts": dict(parts),
        "outputs": [file_facts(p) for p in outputs],
        "detail": dict(detail),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    statefile.own_folder(folder, FOLDER_WHAT)
    statefile.write_json(folder / f"{stage}.json", data, WHAT, sort_keys=False)


#: The settings each stamped stage's key takes, by section: the build's also the torch
#: features and Triton's settings it turns into the build environment.
STAMP_SECTIONS = {
    "build": ("build.", "features.", "triton."),
    "bundle": ("bundle.",),
    "smoke": ("smoke.",),
}


def stage_settings(cfg: Config, stage: str) -> dict[str, Any]:
    """The settings the key of ``stage``'s stamp is made of (:data:`STAMP_SECTIONS`)."""
    return {k: v for k, v in cfg.values.items() if k.startswith(STAMP_SECTIONS[stage])}
