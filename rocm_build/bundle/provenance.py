"""The provenance record a bundled wheel carries (``<top package>/.rocm-build-bundle.json``):
what it was made from and with, read back to make a re-run on the same inputs a no-op."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocm_build import __version__
from rocm_build.common import statefile
from rocm_build.common.errors import RocmBuildError
from rocm_build.wheel.analyze import PROVENANCE
from rocm_build.wheel.wheelfile import WheelReader

__all__ = [
    "fingerprint",
    "found_in",
    "header",
    "input_record",
    "input_unchanged",
    "provenance_in",
    "read_provenance",
    "rocm_version",
    "up_to_date",
]

log = logging.getLogger(__name__)


def fingerprint(settings: Any) -> str:
    """What an output depends on (:func:`.statefile.settings_digest`), as the record keeps it."""
    return statefile.settings_digest(settings)[:32]


def header(fp: str, rocm: Path) -> dict[str, Any]:
    """The fields every record starts with: the tool, the fingerprint, the tree and its ROCm."""
    return {
        "tool": f"rocm-build {__version__}",
        "fingerprint": fp,
        "rocm": str(rocm.resolve()),
        "rocm_version": rocm_version(rocm),
    }


def read_provenance(path: Path, arcname: str) -> dict[str, Any] | None:
    try:
        with WheelReader(path) as reader:
            return provenance_in(reader, arcname)
    except RocmBuildError:
        return None


def provenance_in(reader: WheelReader, arcname: str) -> dict[str, Any] | None:
    if not reader.has(arcname):
        return None
    # A record of other types (crafted, or another tool's) is as good as none: bundled again.
    return reader.read_json_object(arcname)


def found_in(reader: WheelReader) -> tuple[str, dict[str, Any]]:
    """The record of a wheel whose top package is not known: (its member, its data), else
    ("", {}); ({} too for a record that is no JSON)."""
    for m in reader.members:
        if m.name.count("/") == 1 and m.name.endswith("/" + PROVENANCE):
            return m.name, provenance_in(reader, m.name) or {}
    return "", {}


def input_record(wheel: Path, fd: int, facts: Sequence[int]) -> dict[str, Any]:
    """What an output records of its input wheel (open as ``fd``): its content's sha256 and
    the stat facts that spare hashing it again while they hold."""
    return {"facts": [str(wheel), *facts], "sha256": statefile.content_sha256(wheel, fd)}


def input_unchanged(wheel: Path, record: Any) -> bool:
    """Whether ``wheel`` holds the bytes ``record`` (:func:`input_record`) was made from: its
    stat facts the same (inode and ctime included: no rewrite or swap keeps both), else its
    sha256 (a copy or a touched file of the same bytes is the same input)."""
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        return False
    facts = record.get("facts")
    if isinstance(facts, list) and facts[:1] == [str(wheel)] and statefile.facts_unchanged([facts]):
        return True
    try:
        return bool(statefile.content_sha256(wheel) == record["sha256"])
    except OSError:
        return False


def up_to_date(
    wheel: Path, output_dir: Path, arcname: str, fingerprint: str, *, content: bool = False
) -> Path | None:
    """The output of these very inputs and settings, if it is already in ``output_dir``.
    ``content``: the record must also say the input wheel's bytes (``input``, see
    :func:`input_unchanged`): its fingerprint names the input by path only."""
    for existing in sorted(output_dir.glob(f"{wheel.name.split('-')[0]}-*.whl")):
        # a link, FIFO or another user's file there is refused (exit 14), never read through
        statefile.check(existing, "bundled wheel")
        prov = read_provenance(existing, arcname)
        if (
            prov
            and prov.get("fingerprint") == fingerprint
            and statefile.facts_unchanged(prov.get("sources", []))
            and (not content or input_unchanged(wheel, prov.get("input")))
        ):
            log.info("%s is up to date (same input, tree and settings)", existing.name)
            return existing
    return None


def rocm_version(rocm: Path) -> str:
    for rel in (".info/version", ".info/version-dev"):
        path = rocm / rel
        if path.is_file():
            return path.read_text().strip()
    return ""
