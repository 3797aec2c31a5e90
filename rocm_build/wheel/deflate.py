"""How a wheel writer deflates new members, as one value: the deflater, its level and the
deflate cache. The bundle's plan decides it from the ``bundle`` settings and hands it down to
every :class:`.wheelfile.WheelWriter` it makes; nothing is configured behind their backs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocm_build.wheel import deflatecache, rawdeflate
from rocm_build.wheel.deflatecache import DeflateCache

__all__ = ["DEFAULT_DEFLATE", "Deflate"]


@dataclass(frozen=True)
class Deflate:
    """``deflater``: one of :data:`.rawdeflate.DEFLATERS` (``bundle.deflater``; it may run as
    another here: :attr:`implementation`); ``level``: zlib's scale, 0 stores
    (``bundle.compression_level``); ``cache``: the deflate cache, None for none."""

    deflater: str = rawdeflate.DEFAULT
    level: int = 6
    cache: DeflateCache | None = None

    @classmethod
    def of(
        cls, deflater: str, level: int, cache: str, cache_gb: float, env: Mapping[str, str]
    ) -> Deflate:
        """The value the settings describe (``cache``, ``cache_gb``: ``bundle.deflate_cache``
        and ``bundle.deflate_cache_gb``, see :func:`.deflatecache.from_settings`)."""
        return cls(deflater, level, deflatecache.from_settings(cache, cache_gb, env))

    @property
    def implementation(self) -> str:
        """The deflater as it runs here (what the output's bytes depend on)."""
        return rawdeflate.implementation(self.deflater)

    def check(self) -> None:
        """Refuse a cache folder that is not this user's alone (exit 14), before writing
        through it (:func:`.deflatecache.check_folder`)."""
        if self.cache is not None:
            deflatecache.check_folder(self.cache.folder)


#: The default deflater at level 6, without a cache (what a writer not told otherwise uses)
DEFAULT_DEFLATE = Deflate()
