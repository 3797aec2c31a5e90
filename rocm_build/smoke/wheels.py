"""What the wheels under test install: their top-level import names."""

from __future__ import annotations

from pathlib import Path

from rocm_build.wheel.wheelfile import WheelReader

__all__ = ["import_names"]


def import_names(wheel: Path) -> tuple[str, ...]:
    """Top-level import names a wheel installs (top_level.txt, else its RECORD's folders).

    Opened by the checking reader, so an unsafe or malformed wheel stops smoke before pip sees
    it (``UnsafeInput``)."""
    with WheelReader(wheel) as reader:
        names = [m.name for m in reader.members]
        top = f"{reader.dist_info}/top_level.txt"
        if reader.has(top):
            text = reader.read_text(top)
            found = [line.strip() for line in text.splitlines() if line.strip()]
            # torch's wheel also installs functorch and torchgen: the package named like the
            # distribution stands for the wheel (they share its files and libraries).
            dist = wheel.name.split("-", 1)[0].lower()
            if dist in found:
                return (dist,)
            if found:
                return tuple(n for n in found if not n.startswith("_"))
    packages: dict[str, None] = {}
    for name in names:
        head, sep, _ = name.partition("/")
        if not sep or head.endswith((".dist-info", ".data", ".libs")):
            continue
        if name == f"{head}/__init__.py":
            packages[head] = None
    return tuple(packages)
