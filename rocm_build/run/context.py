"""One run context: the settings, the folders, the ROCm tree and the gfx targets.

``resolve(settings, tree=..., targets=...)`` is the one step of a command that may look around
before planning: the folders are paths; the gfx targets (the ``arch`` setting, else this
machine's GPUs) and the ROCm tree (a folder found, a URL downloaded into the cache) are decided
only for the commands that need them, once, and held as values. A stage's ``plan`` reads them and
never decides them (``checkout`` needs no tree, ``inspect`` no targets); asking a context for a
tree not decided is a bug (``RuntimeError``), never a download in the middle of a plan, and the
targets not decided are the ``arch`` setting's alone (:class:`rocm_build.common.arch.Targets`: names
with features, base names, where they came from), never a detection. ``all`` decides both
before its first stage and hands the same context to every stage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rocm_build.common import arch
from rocm_build.common.errors import RocmTreeError
from rocm_build.common.masking import mask_url
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
    output_dir: Path  # built (unbundled) wheels
    work_dir: Path
    #: bundled (fat) wheels, one folder per target set (``bundle -w DIR``: DIR alone)
    wheelhouse: Path
    #: How a download of the ROCm tree (``rocm`` is a URL) is shown; None: not at all.
    download_progress: DownloadProgress | None = field(default=None, compare=False)
    #: The ROCm tree, once decided (:meth:`decide`); None: not decided (not needed).
    rocm_tree: dist.RocmTree | None = None
    #: The gfx targets decided with detection (:meth:`decide`); None: not decided (not needed).
    gfx_targets: arch.Targets | None = None

    # --- decided values ---------------------------------------------------------------------

    @property
    def tree(self) -> dist.RocmTree:
        """The decided ROCm tree."""
        if self.rocm_tree is None:
            raise RuntimeError("the ROCm tree was not decided: resolve(..., tree=True) first")
        return self.rocm_tree

    @property
    def targets(self) -> arch.Targets:
        """This run's gfx targets (names with features, base names, where they came from): as
        decided (the ``arch`` setting, else this machine's GPUs); not decided, the ``arch``
        setting's alone, never a detection (none given: no names, and a stage keeps the wheels'
        own targets). An unknown name in the setting is a ``ConfigError`` when asked for, so a
        command that never reads the targets (``checkout``) is not stopped by one."""
        if self.gfx_targets is not None:
            return self.gfx_targets
        s = self.settings
        return arch.Targets.parse(s.general.arch, known=s.known_targets, families=s.target_families)

    # --- deciding (the only part that looks around) ------------------------------------------

    def decide(
        self, *, tree: bool = True, targets: bool = True, download: bool = True
    ) -> RunContext:
        """A new context with the targets and the tree decided (what is decided already stays),
        also written into its settings (``arch`` = the targets, ``rocm`` = the tree's root): the
        run report and every later stage see exactly these. The targets first: a typo in
        ``arch`` fails before a download. Without ``download`` (a dry run) a tree URL is only
        looked up in the download cache (:meth:`open_tree`)."""
        chosen, found = self.gfx_targets, self.rocm_tree
        if targets and chosen is None:
            s = self.settings
            chosen = arch.resolve_targets(
                s.general.arch, known=s.known_targets, families=s.target_families, env=s.env
            )
        if tree and found is None:
            found = self.open_tree(download=download)
        general = self.settings.general
        if chosen is not None:
            general = dataclasses.replace(general, arch=";".join(chosen.names))
        if found is not None:
            general = dataclasses.replace(general, rocm=str(found.root))
        return dataclasses.replace(
            self,
            settings=dataclasses.replace(self.settings, general=general),
            rocm_tree=found,
            gfx_targets=chosen,
        )

    def open_tree(self, *, download: bool = True) -> dist.RocmTree:
        """The ROCm tree of the ``rocm`` setting: a URL is downloaded (once, into the cache;
        without ``download`` only a download already in the cache is taken, else a
        ``RocmTreeError`` says how to get it), a folder found (``_rocm_sdk_devel`` inside a venv
        too); empty: ``/opt/rocm``."""
        setting = self.settings.general.rocm
        if setting and dist.is_url(setting):
            root = self.fetch(setting) if download else self.cached(setting)
        else:
            root = dist.find_tree(
                str(self.settings.cwd / Path(setting).expanduser()) if setting else ""
            )
        return dist.open_tree(root)

    def cached(self, url: str) -> Path:
        """The tree a download of ``url`` left in the cache; none: a ``RocmTreeError`` (a dry
        run downloads nothing)."""
        found = dist.cached(url, self._cache_dir(), "")
        if found is None:
            msg = (
                f"the ROCm tree {mask_url(url)} is not downloaded yet, and a dry run downloads "
                f"nothing: run `rocm-build rocm fetch {mask_url(url)}` first, or drop --dry-run"
            )
            raise RocmTreeError(msg)
        return found

    def _cache_dir(self) -> Path:
        return dist.download_cache_dir(
            self.settings.build.rocm_cache, self.settings.env, self.work_dir
        )

    def fetch(self, url: str, sha256: str = "") -> Path:
        """Download and unpack a tarball of a ROCm tree into the cache; its root."""
        cache_dir = self._cache_dir()
        show = self.download_progress
        update, close = show(url) if show else (None, lambda: None)
        try:
            return dist.fetch(url, cache_dir=cache_dir, sha256=sha256, progress=update)
        finally:
            close()


def resolve(
    settings: Config,
    *,
    download_progress: DownloadProgress | None = None,
    tree: bool = False,
    targets: bool = False,
) -> RunContext:
    """The run context of ``settings``: the folders, and the tree and the targets where asked
    for (see :meth:`RunContext.decide`)."""
    g = settings.general
    ctx = RunContext(
        settings=settings,
        src_dir=settings.absolute(g.src_dir),
        patches_dir=settings.absolute(g.patches_dir),
        output_dir=settings.absolute(g.output_dir),
        work_dir=settings.absolute(g.work_dir),
        wheelhouse=settings.absolute(g.wheelhouse),
        download_progress=download_progress,
    )
    return ctx.decide(tree=tree, targets=targets)
