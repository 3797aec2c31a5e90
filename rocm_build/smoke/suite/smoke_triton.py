"""Triton checks run in a fresh interpreter (standard library, torch and triton only).

``python smoke_triton.py --result FILE imports PKG [PKG...]``: import the packages in that order,
then ask Triton's AMD backend where it finds the HIP runtime and load it the way the backend does
(by that path), so the result says which runtime files the process mapped.
``... compile GFX [GFX...]``: compile a small kernel ahead of time for each target (no GPU used);
a target this Triton refuses as unsupported (its own verdict) is listed apart from the failures.
``... flash``: ``torch.backends.cuda.is_flash_attention_available()``, or null where this torch
has no such function.
The result goes to FILE as JSON: stdout belongs to the packages, which may print.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _mapped_hip() -> list[str]:
    seen: dict[str, None] = {}
    with Path("/proc/self/maps").open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) == 6 and "/libamdhip64.so" in parts[5]:
                seen[parts[5].strip().removesuffix(" (deleted)")] = None
    return list(seen)


def imports(packages: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"order": packages, "import_error": None, "imported": {}}
    for name in packages:
        try:
            module = importlib.import_module(name)
        except BaseException:
            out["import_error"] = {"package": name, "traceback": traceback.format_exc()}
            return out
        out["imported"][name] = getattr(module, "__file__", None)
    from triton.backends.amd import driver

    lookup = getattr(driver, "_get_path_to_hip_runtime_dylib", None)
    if lookup is None:
        out["lookup_error"] = "triton.backends.amd.driver has no _get_path_to_hip_runtime_dylib"
        return out
    try:
        found = str(lookup())
    except BaseException:
        out["lookup_error"] = traceback.format_exc()
        return out
    out["found"] = found
    hip = ctypes.CDLL(found)
    count = ctypes.c_int(-1)
    out["rc"] = int(hip.hipGetDeviceCount(ctypes.byref(count)))
    out["maps"] = _mapped_hip()
    return out


def _warp_size(arch: str) -> int:
    # CDNA and GCN (gfx9 and older) run 64-wide wavefronts; RDNA (gfx10 and later) 32-wide.
    return 64 if arch.startswith(("gfx8", "gfx9")) else 32


def compile_for(targets: list[str]) -> dict[str, Any]:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit  # type: ignore[misc]
    def add(x, y, out, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

    signature = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    sizes: dict[str, Any] = {}
    unsupported: dict[str, str] = {}
    for target in targets:
        arch = target.split(":", 1)[0]
        with _stderr_captured() as said:
            try:
                src = ASTSource(add, signature=signature, constexprs={"BLOCK": 64})
                compiled = triton.compile(src, target=GPUTarget("hip", arch, _warp_size(arch)))
                sizes[target] = len(compiled.asm["hsaco"])
            except BaseException:
                sizes[target] = traceback.format_exc()
        verdict = _unsupported_verdict(said.text, arch)
        if verdict is not None and not isinstance(sizes[target], int):
            unsupported[target] = verdict
            del sizes[target]
        elif not isinstance(sizes[target], int):
            sizes[target] += said.text[-3000:]
    return {"hsaco": sizes, "unsupported": unsupported}


def _unsupported_verdict(stderr: str, arch: str) -> str | None:
    """Triton's own word that it has no code generator for ``arch``: its AMD backend keeps the
    list of the ISA families it generates code for in its compiled core (no Python API tells
    it), and refuses any other target with an MLIR diagnostic ``unsupported target: 'gfxN'``.
    The line it printed, or None when it did not refuse the target."""
    for line in stderr.splitlines():
        if f"unsupported target: '{arch}'" in line:
            return line.strip()
    return None


class _Captured:
    text = ""


@contextlib.contextmanager
def _stderr_captured() -> Iterator[_Captured]:
    """File descriptor 2 into a temporary file while the block runs (its text in ``.text``
    afterwards): Triton's compiled core writes its diagnostics there, not to sys.stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    said = _Captured()
    with tempfile.TemporaryFile() as fh:
        os.dup2(fh.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            fh.seek(0)
            said.text = fh.read().decode("utf-8", "replace")


def flash() -> dict[str, Any]:
    try:
        cuda = importlib.import_module("torch.backends.cuda")
    except ImportError:
        return {"available": None}
    check = getattr(cuda, "is_flash_attention_available", None)
    return {"available": None if check is None else bool(check())}


def main(args: list[str]) -> dict[str, Any]:
    what, rest = args[0], args[1:]
    if what == "imports":
        return imports(rest)
    if what == "compile":
        return compile_for(rest)
    return flash()


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--result"]:
        result = Path(argv[1])
        tmp = result.with_name(result.name + ".tmp")
        tmp.write_text(json.dumps(main(argv[2:])), encoding="utf-8")
        tmp.replace(result)
    else:
        json.dump(main(argv), sys.stdout)
