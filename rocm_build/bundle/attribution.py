"""Which installed distribution a wheel's NEEDED name comes from, for ``inspect``.

The loader tries the folders of the member's search path in order and takes the first that
holds the file. So does this module, with what is known of each folder's contents:

- the inspected wheel's own top-level folders hold exactly its members (a search path entry
  into a folder of its own that has no such file is passed over);
- the wheels inspected in the same command are installed together, so their folders are
  known the same way;
- a thin wheel that ``bundle --mode thin`` made records the folder of ROCm's packages that
  holds each library it takes from them (``from_packages`` in its provenance record).

A folder of another distribution whose contents are unknown stays a candidate (``checked``
false), and so does every folder after it up to the first known to hold the file: nothing is
decided by the library's name.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocm_build.binary import elf
from rocm_build.wheel import wheelmeta

__all__ = ["Contents", "attribute", "requires_by_folder"]

_PLAIN = re.compile(r"[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*")


@dataclass(frozen=True)
class Contents:
    """What is known to be installed in site-packages: folder -> file names; ``whole`` are the
    top-level folders whose every file is known."""

    folders: Mapping[str, frozenset[str]] = field(default_factory=dict)
    whole: frozenset[str] = frozenset()

    @classmethod
    def of_members(cls, members: Iterable[str]) -> Contents:
        """The contents of a wheel with these member names (all of its top-level folders)."""
        folders: dict[str, set[str]] = defaultdict(set)
        for name in members:
            if not name.endswith("/"):
                folders[posixpath.dirname(name)].add(posixpath.basename(name))
        whole = {f.split("/", 1)[0] for f in folders if f}
        return cls({f: frozenset(n) for f, n in folders.items()}, frozenset(whole))

    @classmethod
    def of_record(cls, held: Mapping[str, str]) -> Contents:
        """Library name -> folder, as bundle recorded it (nothing else known of those folders)."""
        folders: dict[str, set[str]] = defaultdict(set)
        for name, folder in held.items():
            if _PLAIN.fullmatch(folder) and _PLAIN.fullmatch(name) and "/" not in name:
                folders[folder].add(name)  # anything else: not a record bundle writes
        return cls({f: frozenset(n) for f, n in folders.items()})

    def __or__(self, other: Contents) -> Contents:
        folders = {
            f: self.folders.get(f, frozenset()) | other.folders.get(f, frozenset())
            for f in {*self.folders, *other.folders}
        }
        return Contents(folders, self.whole | other.whole)

    def holds(self, folder: str, name: str) -> bool | None:
        """True: ``name`` is in ``folder``; False: known not to be; None: unknown."""
        if name in self.folders.get(folder, ()):
            return True
        return False if folder.split("/", 1)[0] in self.whole else None


def requires_by_folder(metadata: str) -> dict[str, str]:
    """The wheel's requirements by their distribution's name as a folder name (``rocm-sdk-core``
    installs ``_rocm_sdk_core``, ``torch`` installs ``torch``), lower case, without the
    leading ``_``."""
    out: dict[str, str] = {}
    for req in wheelmeta.parsed_requirements(metadata):
        # rocm[libraries,device-gfx942]: the extras are what installs ROCm's packages
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        out[re.sub(r"[-_.]+", "_", req.name).lower()] = f"{req.name}{extras}{req.specifier}"
    return out


def _search_folders(arc: str, info: elf.ElfInfo) -> list[str]:
    """The site-packages folders ``arc``'s ``$ORIGIN`` search path names, in the loader's order
    (entries that leave site-packages are not installed files: left out)."""
    here = posixpath.dirname(arc)
    folders: list[str] = []
    for entry in info.search_path:
        for prefix in ("${ORIGIN}", "$ORIGIN"):
            if entry == prefix or entry.startswith(prefix + "/"):
                rest = entry[len(prefix) :].lstrip("/")
                target = posixpath.normpath(posixpath.join(here or ".", rest))
                if not target.startswith(".") and target not in folders:
                    folders.append(target)
                break
    return folders


def _entry(folder: str, requires: Mapping[str, str], checked: bool) -> dict[str, object]:
    top = folder.split("/", 1)[0]
    key = top.lstrip("_").lower()
    match = [r for r in requires if key == r or key.startswith(r + "_")]
    return {
        "folder": folder,
        "distribution": top.lstrip("_").replace("_", "-"),
        "requirement": requires[max(match, key=len)] if match else "",
        "checked": checked,
    }


def attribute(
    arc: str,
    info: elf.ElfInfo,
    names: Iterable[str],
    requires: Mapping[str, str],
    known: Contents,
) -> dict[str, list[dict[str, object]]]:
    """Per NEEDED name of member ``arc`` that the wheel lacks: the folders of other
    distributions it may come from, in the loader's order, up to the first known to hold it
    (names no such folder may hold are left out: they are unresolved)."""
    folders = _search_folders(arc, info)
    out: dict[str, list[dict[str, object]]] = {}
    for name in names:
        found: list[dict[str, object]] = []
        for folder in folders:
            held = known.holds(folder, name)
            if held is False:
                continue
            found.append(_entry(folder, requires, checked=bool(held)))
            if held:
                break
        if found:
            out[name] = found
    return out
