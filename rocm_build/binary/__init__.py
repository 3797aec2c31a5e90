"""Binaries: ELF facts and offload bundles (:mod:`.elf`), RPATH edits as byte patches
(:mod:`.elfpatch`), PE facts (:mod:`.pe`)."""
