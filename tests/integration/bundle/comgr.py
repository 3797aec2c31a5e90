"""The ROCm tree's own comgr through ctypes, the two ways the HIP runtime picks a GPU's code object
out of an offload bundle: ``amd_comgr_lookup_code_object`` (an uncompressed bundle) and, for a
compressed one (``CCOB``, which that lookup refuses), comgr's unbundle action
(``AMD_COMGR_ACTION_UNBUNDLE``, comgr 2.8+: what HIP 6.x's
``CodeObject::extractCodeObjectFromFatBinaryUsingComgr`` does)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

FATBIN = 0x10  # AMD_COMGR_DATA_KIND_FATBIN
OBJ_BUNDLE = 0x14  # AMD_COMGR_DATA_KIND_OBJ_BUNDLE
EXECUTABLE = 0x8  # AMD_COMGR_DATA_KIND_EXECUTABLE
UNBUNDLE = 0xF  # AMD_COMGR_ACTION_UNBUNDLE
LANGUAGE_HIP = 0x3  # AMD_COMGR_LANGUAGE_HIP


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

    def unbundle(self, bundle: bytes, ids: Sequence[str]) -> dict[str, bytes]:
        """The code object comgr's unbundle action extracts from ``bundle`` (compressed or not)
        for each bundle entry id (``hipv4-amdgcn-amd-amdhsa--gfx11-generic``): b"" when the
        bundle has none. The HIP runtime asks for the device's id and its generic one, and
        takes the device's own code object where there is one."""
        lib, done = self._lib, []
        data, given, result, info = _Data(), _Data(), _Data(), _Data()
        try:
            _ok(lib.amd_comgr_create_data(OBJ_BUNDLE, ctypes.byref(data)))
            done.append(("amd_comgr_release_data", data))
            buf = ctypes.create_string_buffer(bundle, len(bundle))
            _ok(lib.amd_comgr_set_data(data, ctypes.c_size_t(len(bundle)), buf))
            _ok(lib.amd_comgr_set_data_name(data, b"hipfatbin"))
            _ok(lib.amd_comgr_create_data_set(ctypes.byref(given)))
            done.append(("amd_comgr_destroy_data_set", given))
            _ok(lib.amd_comgr_data_set_add(given, data))
            _ok(lib.amd_comgr_create_action_info(ctypes.byref(info)))
            done.append(("amd_comgr_destroy_action_info", info))
            _ok(lib.amd_comgr_action_info_set_language(info, LANGUAGE_HIP))
            names = (ctypes.c_char_p * len(ids))(*(i.encode() for i in ids))
            _ok(lib.amd_comgr_action_info_set_bundle_entry_ids(info, names, len(ids)))
            _ok(lib.amd_comgr_create_data_set(ctypes.byref(result)))
            done.append(("amd_comgr_destroy_data_set", result))
            _ok(lib.amd_comgr_do_action(UNBUNDLE, info, given, result))
            return self._items(result, ids)
        finally:
            for fn, handle in reversed(done):
                getattr(lib, fn)(handle)

    def _items(self, result: _Data, ids: Sequence[str]) -> dict[str, bytes]:
        lib = self._lib
        count = ctypes.c_size_t()
        _ok(lib.amd_comgr_action_data_count(result, EXECUTABLE, ctypes.byref(count)))
        found = dict.fromkeys(ids, b"")
        for i in range(count.value):
            item = _Data()
            _ok(lib.amd_comgr_action_data_get_data(result, EXECUTABLE, i, ctypes.byref(item)))
            try:
                name = self._read(lib.amd_comgr_get_data_name, item).rstrip(b"\0").decode()
                # "hipfatbin-hipv4-amdgcn-amd-amdhsa--gfx1100.co": the id between name and suffix
                (which,) = [i for i in ids if name.startswith(f"hipfatbin-{i}.")]
                found[which] = self._read(lib.amd_comgr_get_data, item)
            finally:
                lib.amd_comgr_release_data(item)
        return found

    @staticmethod
    def _read(fn: ctypes._CFuncPtr, item: _Data) -> bytes:  # type: ignore[name-defined]
        size = ctypes.c_size_t(0)
        _ok(fn(item, ctypes.byref(size), None))
        buf = ctypes.create_string_buffer(size.value)
        _ok(fn(item, ctypes.byref(size), buf))
        return buf.raw[: size.value]


def _ok(status: int) -> None:
    assert status == 0, f"comgr: status {status}"
