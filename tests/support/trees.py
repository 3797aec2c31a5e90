"""ROCm trees laid out in a temporary folder: the files a tree's validation looks at, empty."""

from __future__ import annotations

from pathlib import Path


def make_tree(root: Path, *, isa: tuple[str, ...] = ("90a", "1030")) -> Path:
    """The files validation looks at, laid out like a TheRock dist tree (empty files)."""
    for rel in (
        "lib/llvm/bin/clang",
        "lib/llvm/bin/clang++",
        "lib/libamdhip64.so.6",
        "lib/cmake/hip/hip-config.cmake",
        "lib/cmake/rocBLAS/rocblas-config.cmake",
        "lib/llvm/amdgcn/bitcode/ocml.bc",
        *(f"lib/llvm/amdgcn/bitcode/oclc_isa_version_{n}.bc" for n in isa),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"")
    (root / ".info").mkdir(parents=True, exist_ok=True)
    (root / ".info" / "version").write_text("6.4.1-120\n")
    return root
