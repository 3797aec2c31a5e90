"""One run context: the settings, the folders, the ROCm tree and the gfx targets, resolved once.

``resolve(settings)`` is cheap and never fails: the folders are paths, and the tree and the
targets are worked out when a command first asks for them (``checkout`` needs no ROCm tree,
``inspect`` no targets), raising the same errors wherever they are asked for. ``all`` decides
both once (``resolved()``) and hands the same context to every stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from rocm_build import arch
from rocm_build.config.loader import Config
from rocm_build.rocm import dist

__all__ = ["DownloadProgress", "RunContext", "resolve"]

#: ``progress(url) -> (update(done, total), close())``: shows a download (the CLI's rich bar).
DownloadProgress = Callable[[str], tuple[Callable[[int, int | None], None], Callable[[], None]]]


@dataclass(frozen=True)
class RunContext:
    """What every command and stage works from."""

    settings: Config
    src_dir: Path
    patches_dir: Path
    output_dir: Path
    work_dir: Path
    #: How a download of the ROCm tree (``rocm`` is a URL) is shown; None: not at all.
    download_progress: DownloadProgress | None = field(default=None, compare=False)

    # --- the ROCm tree ---------------------------------------------------------------------

    @cached_property
    def tree(self) -> dist.RocmTree:
        """The ROCm tree of the ``rocm`` setting: a URL is downloaded (once, into the cache),
        a folder found (``_rocm_sdk_devel`` inside a venv too); empty: ``/opt/rocm``."""
        setting = self.settings.general.rocm
        if setting and dist.is_url(setting):
            root = self.fetch(setting)
        else:
            root = dist.find_tree(
                str(self.settings.cwd / Path(setting).expanduser()) if setting else ""
            )
        return dist.open_tree(root)

    def check_tree(self) -> None:
        """Fail now if a local tree is missing (a URL is fetched only when the tree is needed)."""
        setting = self.settings.general.rocm
        if not (setting and dist.is_url(setting)):
            dist.find_tree(str(self.settings.cwd / Path(setting).expanduser()) if setting else "")

    def fetch(self, url: str, sha256: str = "") -> Path:
        """Download and unpack a tarball of a ROCm tree into the cache; its root."""
        cache_dir = dist.download_cache_dir(
            self.settings.build.rocm_cache, self.settings.env, self.work_dir
        )
        show = self.download_progress
        update, close = show(url) if show else (None, lambda: None)
        try:
            return dist.fetch(url, cache_dir=cache_dir, sha256=sha256, progress=update)
        finally:
            close()

    # --- the gfx targets -------------------------------------------------------------------

    @cached_property
    def build_targets(self) -> tuple[tuple[str, ...], str]:
        """(targets to build for, where they came from): the ``arch`` setting (families
        expanded, features kept), else this machine's GPUs; neither is a ``ConfigError``."""
        s = self.settings
        return arch.resolve_targets(
            s.general.arch, known=s.known_targets, families=s.target_families, env=s.env
        )

    @property
    def targets(self) -> tuple[str, ...]:
        return self.build_targets[0]

    @cached_property
    def arch_targets(self) -> tuple[str, ...]:
        """The ``arch`` setting's targets by base name (no GPU detection): () when unset."""
        return self.parse_targets(self.settings.general.arch)

    def parse_targets(self, text: str) -> tuple[str, ...]:
        """``"gfx90a;gfx110X"`` -> base target names, families expanded, duplicates dropped;
        an unknown name is a ``ConfigError`` with its close matches."""
        expanded = arch.expand(
            arch.split_arch(text or ""),
            known=self.settings.known_targets,
            families=self.settings.target_families,
        )
        return tuple(dict.fromkeys(arch.base_name(t) for t in expanded))

    # --- all ----------------------------------------------------------------------------------

    def resolved(self) -> RunContext:
        """This context with the tree and the build targets decided, written into its settings
        (``rocm`` = the tree's root, ``arch`` = the targets) as ``all`` records and hands them
        on: every later stage uses exactly these."""
        tree = self.tree
        targets = self.build_targets
        general = dataclasses.replace(
            self.settings.general, rocm=str(tree.root), arch=";".join(targets[0])
        )
        ctx = dataclasses.replace(
            self, settings=dataclasses.replace(self.settings, general=general)
        )
        # Decided already: the new context must not look again (cached_property's own slot).
        ctx.__dict__.update(tree=tree, build_targets=targets)
        return ctx


def resolve(settings: Config, *, download_progress: DownloadProgress | None = None) -> RunContext:
    """The run context of ``settings``: the folders now, the tree and targets when asked for."""
    g = settings.general
    return RunContext(
        settings=settings,
        src_dir=settings.absolute(g.src_dir),
        patches_dir=settings.absolute(g.patches_dir),
        output_dir=settings.absolute(g.output_dir),
        work_dir=settings.absolute(g.work_dir),
        download_progress=download_progress,
    )
