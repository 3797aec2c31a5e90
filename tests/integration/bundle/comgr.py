"""The ROCm tree's own comgr through ctypes: ``amd_comgr_lookup_code_object``, the lookup the HIP
runtime uses to pick a GPU's code object out of an offload bundle."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

FATBIN = 0x10  # AMD_COMGR_DATA_KIND_FATBIN


class _Data(ctypes.Structure):
    _fields_ = [("handle", ctypes.c_uint64)]


class _Info(ctypes.Structure):
    _fields_ = [("isa", ctypes.c_char_p), ("size", ctypes.c_size_t), ("offset", ctypes.c_uint64)]


class Comgr:
    def __init__(self, tree: Path) -> None:
        found = sorted((tree / "lib").glob("libamd_comgr.so.*"))
        self._lib = ctypes.CDLL(str(found[0]))

    def lookup(self, bundle: bytes, isas: Sequence[str]) -> dict[str, bytes]:
        """The code object comgr picks from the uncompressed ``bundle`` for each ISA name
        (``amdgcn-amd-amdhsa--gfx90a:xnack+``): b"" when it finds none. One name per call, as
        the HIP runtime asks for one device: comgr 2.4 answers a list of several unreliably."""
        return {isa: self._lookup(bundle, isa) for isa in isas}

    def _lookup(self, bundle: bytes, isa: str) -> bytes:
        data = _Data()
        assert self._lib.amd_comgr_create_data(FATBIN, ctypes.byref(data)) == 0
        try:
            buf = ctypes.create_string_buffer(bundle, len(bundle))
            assert self._lib.amd_comgr_set_data(data, ctypes.c_size_t(len(bundle)), buf) == 0
            info = _Info(isa.encode(), 0, 0)
            status = self._lib.amd_comgr_lookup_code_object(data, ctypes.byref(info), 1)
            assert status == 0, f"amd_comgr_lookup_code_object: status {status}"
            return bundle[info.offset : info.offset + info.size]
        finally:
            self._lib.amd_comgr_release_data(data)
