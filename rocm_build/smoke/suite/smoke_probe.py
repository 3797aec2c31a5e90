"""Probe run in a fresh interpreter: import packages, report what the process mapped.

``python smoke_probe.py [--result FILE] PKG [PKG...]`` writes one JSON object to FILE (or, run by
hand without --result, prints it): the import error (if any), every file mapped into the process
(from /proc/self/maps), the HIP runtime's answer to hipGetDeviceCount, and torch facts when torch
is among the packages. A fresh process per probe keeps one package's imports from hiding
another's. The result goes to its own file because stdout belongs to the packages: one that
prints on import must not spoil the result.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import sys
import traceback
from pathlib import Path
from typing import Any


def mapped_files() -> list[str]:
    seen: dict[str, None] = {}
    with Path("/proc/self/maps").open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                path = parts[5].strip()
                path = path.removesuffix(" (deleted)")
                seen[path] = None
    return list(seen)


def hip_device_count(maps: list[str]) -> dict[str, Any]:
    """Call hipGetDeviceCount through the libamdhip64 this process already mapped."""
    hip = [p for p in maps if "/libamdhip64.so" in p]
    if not hip:
        return {"loaded": False}
    lib = ctypes.CDLL(hip[0])
    count = ctypes.c_int(-1)
    rc = lib.hipGetDeviceCount(ctypes.byref(count))
    version = ctypes.c_int(0)
    vrc = lib.hipRuntimeGetVersion(ctypes.byref(version))
    return {
        "loaded": True,
        "path": hip[0],
        "rc": int(rc),
        "count": int(count.value),
        "runtime_version": int(version.value) if vrc == 0 else None,
    }


def torch_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "file": torch.__file__,
        "version": torch.__version__,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": bool(torch.cuda.is_available()),
        "arch_flags": None,
        "arch_list": list(torch.cuda.get_arch_list()),
    }
    get_flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if get_flags is not None:
        flags = get_flags()
        facts["arch_flags"] = flags.split() if isinstance(flags, str) else list(flags or [])
    return facts


def main(packages: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"packages": packages, "import_error": None, "imported": {}}
    for name in packages:
        try:
            module = importlib.import_module(name)
        except BaseException:
            out["import_error"] = {"package": name, "traceback": traceback.format_exc()}
            break
        out["imported"][name] = getattr(module, "__file__", None)
    maps = mapped_files()
    out["maps"] = maps
    try:
        out["hip"] = hip_device_count(maps)
    except (OSError, AttributeError) as exc:
        out["hip"] = {"loaded": True, "error": str(exc)}
    if out["import_error"] is None and "torch" in out["imported"]:
        out["torch"] = torch_facts()
        out["maps_after_torch"] = mapped_files()
    return out


def write_result(data: dict[str, Any], path: Path) -> None:
    """The result, put in place whole (a reader never sees half of it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--result"]:
        write_result(main(args[2:]), Path(args[1]))
    else:
        json.dump(main(args), sys.stdout)
