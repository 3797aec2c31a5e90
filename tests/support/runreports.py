"""A run report's data as ``all`` writes it (a failed or a finished run), for its readers."""

from __future__ import annotations


def run_report_data(ok: bool) -> dict[str, object]:
    return {
        "ok": ok,
        "failed_stage": None if ok else "smoke",
        "seconds": 81.2,
        "rocm": {"root": "/opt/rocm", "version": "6.4.1"},
        "targets": ["gfx90a", "gfx1030"],
        "sources": [
            {
                "name": "torch",
                "origin": "https://github.com/pytorch/pytorch.git",
                "ref": "v2.9.1",
                "commit": "d38164a545b4a4e4e0cf73ce67173f70574890b6",
                "head": "0123456789abcdef0123456789abcdef01234567",
                "patchset": "2.9",
                "patches": [{"file": "base/0001-fix.patch", "sha256": "ab"}],
                "hipify": True,
            },
            {"name": "torchvision", "checked_out": False},
        ],
        "wheels": {
            "built": [],
            "bundled": [
                {
                    "name": "torch-2.9.1+rocm6.4.1-cp311-cp311-manylinux_2_28_x86_64.whl",
                    "size": 4_700_000_000,
                    "sha256": "f" * 64,
                },
            ],
        },
        "smoke": None
        if ok
        else {
            "ok": False,
            "passed": 9,
            "failed": 1,
            "errors": 0,
            "skipped": 10,
            "packages": ["torch"],
            "hip": {"path": "/v/torch/lib/libamdhip64.so", "rc": 100},
            "code_object_targets": {"torch": ["gfx1030", "gfx90a"]},
            "devices": [],
            "failures": [{"test": "suite.test_torch::test_arch_flags", "message": "differ\nmore"}],
        },
        "stages": [
            {
                "stage": "checkout",
                "status": "skipped",
                "seconds": 0.1,
                "reason": "sources up to date",
            },
            {"stage": "smoke", "status": "failed", "seconds": 20.0, "reason": "a | b"},
        ],
    }
