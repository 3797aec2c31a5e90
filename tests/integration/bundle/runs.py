"""Running ``rocm-build bundle`` in the bundle tests: the small dlopen list most tests take, a
run that measures its peak memory, the one-line error a refused input gives, and a bundle of a
wheel into an output folder with what its installed check prints."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import REPO

# The HIP runtime dlopen()s comgr, which needs libLLVM (and its system libraries): ~300 MB.
# Tests that are not about dlopen take the small hiprtc-builtins library as the dlopen list.
SMALL = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"}

#: what a run that refuses a bomb unread may peak at (a bundle's own imports: about 80 MB)
PEAK_MB = 250


def peak_run(args: Sequence[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``rocm-build ARGS`` and the peak resident memory (MB) of its process: run by a Python of
    its own, so that no other child of the test counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(SMALL)
    script = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:])\n"
        "sys.stderr.write(f'\\nPEAK {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
        "sys.exit(r.returncode)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-m", "rocm_build", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    peak = next(ln for ln in res.stderr.splitlines() if ln.startswith("PEAK "))
    res.stderr = res.stderr.replace(f"\n{peak}\n", "")
    return res, int(peak.split()[1]) / 1024


def one_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "rocm-build: error:" in ln]
    assert len(lines) == 1, res.stderr
    for needle in needles:
        assert needle in lines[0], res.stderr
    return lines[0]


#: What a bundled ``hipext`` wheel's check prints: the HIP status and where rocRAND came from.
RAND_CHECK = r"""
import ctypes, json, os, hipext
status, count = hipext.device_count_status()
rand = ctypes.CDLL(os.path.join(os.path.dirname(hipext.__file__), "lib", "librocrand.so.1"))
print(json.dumps({"status": status, "rand": os.path.realpath(rand._name)}))
"""


def run_bundle(run_cli, wheel: Path, tree: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    args = ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "1"]
    front = ["--json"] if "--json" in extra else []
    return run_cli(
        [*front, *args, *(e for e in extra if e != "--json")], cwd=wheel.parent, env=SMALL
    )
