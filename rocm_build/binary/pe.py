"""Windows PE files (DLLs and PYDs): what ``inspect`` and ``bundle`` need to know about them.

pefile comes with delvewheel, which bundles Windows wheels; Windows' own DLLs are recognised by
delvewheel's lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["device_targets", "read_pe", "windows_provides"]


def read_pe(path: Path | Any) -> tuple[str, list[str], tuple[int, int] | None] | None:
    """A PE file's machine, the DLLs it imports (plain and delay-load) and the file range of its
    HIP fat binary section (``.hip_fat``: image section names stop at 8 bytes); None if not PE.
    ``path``: the file, or its bytes (a buffer or an :class:`~.elf.ByteView`)."""
    import pefile  # type: ignore[import-untyped]  # comes with delvewheel

    try:
        if isinstance(path, (str, Path)):
            pe = pefile.PE(str(path), fast_load=True)
        else:
            pe = pefile.PE(data=path, fast_load=True)
    except pefile.PEFormatError:
        return None
    try:
        pe.parse_data_directories(
            directories=[
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_IMPORT"],
                pefile.DIRECTORY_ENTRY["IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT"],
            ]
        )
        entries = [
            *getattr(pe, "DIRECTORY_ENTRY_IMPORT", []),
            *getattr(pe, "DIRECTORY_ENTRY_DELAY_IMPORT", []),
        ]
        machine = pefile.MACHINE_TYPE.get(pe.FILE_HEADER.Machine, "")
        fatbin = next(
            (
                (int(sec.PointerToRawData), int(sec.SizeOfRawData))
                for sec in pe.sections
                if sec.Name.rstrip(b"\0").startswith(b".hip_fat")
            ),
            None,
        )
        return str(machine), [e.dll.decode(errors="replace") for e in entries], fatbin
    finally:
        pe.close()


def windows_provides(dll: str, machine: str) -> bool:
    """Whether Windows itself provides ``dll``, by delvewheel's lists (its internal module;
    without it nothing counts as provided, so more is reported, never less)."""
    try:
        from delvewheel import _dll_list
    except ImportError:  # pragma: no cover - delvewheel is a dependency
        return False
    names = {
        "IMAGE_FILE_MACHINE_AMD64": _dll_list.ignore_names_x64,
        "IMAGE_FILE_MACHINE_ARM64": _dll_list.ignore_names_arm64,
        "IMAGE_FILE_MACHINE_I386": _dll_list.ignore_names_x86,
    }.get(machine, _dll_list.ignore_names_x64)
    low = dll.lower()
    return low in names or any(r.fullmatch(low) for r in _dll_list.ignore_regexes)


def device_targets(path: Path) -> frozenset[str]:
    """The gfx targets of the device code in a PE file's ``.hip_fat`` section (none if none)."""
    from rocm_build.binary import elf

    info = read_pe(path)
    if info is None or info[2] is None:
        return frozenset()
    return frozenset().union(*(b.targets for b in elf.offload_bundles_at(path, *info[2])))
