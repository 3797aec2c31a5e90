"""Where bundled wheels go: the wheelhouse, one folder per target set.

Unbundled wheels stay in ``output_dir`` (``wheels/``); a bundled wheel goes to
``<wheelhouse>/<target set>/``, so that pip never meets an unbundled and a bundled wheel of one
name side by side, and fat wheels bundled for different targets (which have the same file name)
never replace each other. The target set is named by :func:`set_name`: a family of the
``[targets.families]`` table when the targets are exactly that family (the first such family in
the table's order), else the sorted targets joined by ``_`` (``gfx90a_gfx942``; one target is
its own name; features stay: ``gfx90a-xnack+``). A thin wheel goes to ``<targets>-thin/``, or
``<family>-thin/`` with no targets asked for (it carries no device code: it depends on ROCm's
packages), ``--split-arch``'s host and device wheels to ``<target set>-split/`` (the host
wheel has the fat wheel's file name). ``bundle -w DIR`` puts the wheels into DIR as they are
(auditwheel's convention; :class:`Wheelhouse` is not used)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common.arch import base_name

__all__ = ["Wheelhouse", "set_name"]


def set_name(targets: Sequence[str], families: Mapping[str, Sequence[str]]) -> str:
    """The folder name of a target set: one target's own name; the first family that is
    exactly these targets; else the sorted targets joined by ``_``; none: ``any``. A target's
    features stay in the name, ``:`` written ``-`` (``gfx90a-xnack+``: its code differs from
    ``gfx90a:xnack-``'s, so its wheel goes to a folder of its own), and a set with features is
    named by no family (a family is of base names)."""
    names = sorted(dict.fromkeys(t.replace(":", "-") for t in targets))
    if not names:
        return "any"  # no device code found and none asked for
    if len(names) == 1:
        return names[0]
    bases = sorted(dict.fromkeys(base_name(t) for t in targets))
    if bases == names:
        for name, members in families.items():
            if sorted(set(members)) == bases:
                return name
    return "_".join(names)


@dataclass(frozen=True)
class Wheelhouse:
    """The folder of bundled wheels and the families that name its target sets."""

    root: Path
    families: Mapping[str, tuple[str, ...]]

    def folder(self, targets: Sequence[str], *, thin: str | None = None) -> Path:
        """Where a wheel bundled for ``targets`` goes; ``thin``: the family of a thin wheel
        (``<targets>-thin`` when targets were asked for: from a kpack-split tree a thin wheel
        requires the device packages of those targets, so it differs per set; else
        ``<family>-thin``)."""
        if thin is not None:
            named = set_name(targets, self.families) if targets else thin
            return self.root / f"{named}-thin"
        return self.root / set_name(targets, self.families)

    def split_folder(self, targets: Sequence[str]) -> Path:
        """Where ``--split-arch`` writes the host and device wheels of ``targets``."""
        return self.root / f"{set_name(targets, self.families)}-split"

    def fat_folders(self) -> tuple[Path, ...]:
        """The fat wheels' folders there are now (where a bundle without ``--arch`` may find
        its output up to date before it knows its wheel's targets)."""
        if not self.root.is_dir():
            return ()
        return tuple(
            p
            for p in sorted(self.root.iterdir())
            if p.is_dir() and not p.is_symlink() and not p.name.endswith(("-thin", "-split"))
        )
