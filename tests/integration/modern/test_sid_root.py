"""hipcc of the sid tree compiles for gfx942, gfx1100 and gfx1201 inside a sid root, and the
program loads HIP 6.4 there and reports no device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocm_build import elf, sysroot

pytestmark = pytest.mark.slow

PROGRAM = r"""
#include <hip/hip_runtime.h>
#include <cstdio>
__global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
int main() {
  int count = -1;
  hipError_t err = hipGetDeviceCount(&count);
  int version = 0;
  hipRuntimeGetVersion(&version);
  std::printf("%d %d %d\n", (int)err, count, version);
  return 0;
}
"""


def test_root_is_reused_and_trusts_the_hosts_certificates(sid_root: Path) -> None:
    root, made = sysroot.make_root(sid_root, release="sid")
    assert root == sid_root
    assert not made
    bundle = sysroot.host_ca_bundle({})
    assert bundle is not None
    inside = sid_root / "etc/ssl/certs/ca-certificates.crt"
    assert inside.read_bytes() == bundle.read_bytes()
    assert (sid_root / "usr/bin/python3").exists()


def test_hipcc_in_the_root_builds_for_three_targets_and_runs(
    sid_root: Path, sid_tree: Path, run_cli: Any, tmp_path: Path
) -> None:
    (tmp_path / "k.hip").write_text(PROGRAM)
    tree = str(sid_tree)
    compiled = run_cli(
        [
            "rocm", "run", str(sid_root), "--bind", tree, "--",
            "env", "HIP_PLATFORM=amd", f"ROCM_PATH={tree}", f"{tree}/bin/hipcc",
            "--offload-arch=gfx942", "--offload-arch=gfx1100", "--offload-arch=gfx1201",
            f"-Wl,-rpath,{tree}/lib", "k.hip", "-o", "k",
        ],
        cwd=tmp_path,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    assert elf.offload_targets(tmp_path / "k") == {"gfx942", "gfx1100", "gfx1201"}

    ran = run_cli(["rocm", "run", str(sid_root), "--bind", tree, "--", "./k"], cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    err, count, version = (int(x) for x in ran.stdout.split()[-3:])
    assert err == 100  # hipErrorNoDevice: HIP 6.4 loaded, there is no GPU here
    assert count == 0
    assert version // 10_000_000 == 6  # HIP_VERSION: major * 10^7 + minor * 10^5 + patch
    # The private mount namespace leaves nothing mounted behind.
    assert str(sid_root) not in Path("/proc/self/mounts").read_text()

    failed = run_cli(["rocm", "run", str(sid_root), "--", "sh", "-c", "exit 7"], cwd=tmp_path)
    assert failed.returncode == 7


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_run_by_another_user_enters_through_a_user_namespace(
    sid_root: Path, tmp_path: Path
) -> None:
    """`rocm run` by a user other than root: mounting and chroot happen in a user namespace
    where that user is root; the root's own files stay read-only to it, the bound folder is
    written as that user."""
    import os
    import subprocess
    import sys
    import tempfile

    from tests.conftest import REPO

    # What `rocm run` does as that user: start this Python in a user namespace, read the root.
    check = f"import rocm_build, os; assert os.listdir({str(sid_root)!r})"
    probe = subprocess.run(
        [*NOBODY, "unshare", "--user", "--map-root-user", sys.executable, "-c", check],
        cwd="/",
        env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(
            f"the checkout or the root is not readable by another user: {probe.stderr[-80:]!r}"
        )
    work = Path(tempfile.mkdtemp(prefix="rb-userns-"))
    try:
        work.chmod(0o777)
        script = (
            "id -u; test -r /proc/self/status && echo proc; "
            "touch /etc/x 2>/dev/null || echo ro; touch made"
        )
        cli = [sys.executable, "-m", "rocm_build", "rocm", "run", str(sid_root)]
        ran = subprocess.run(
            [*NOBODY, *cli, "--", "sh", "-c", script],
            cwd=work,
            env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], "HOME": str(work)},
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == ["0", "proc", "ro"]
        assert (work / "made").stat().st_uid == 65534
        assert not (sid_root / "etc/x").exists()
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)


def test_root_may_choose_the_user_namespace_too(sid_root: Path, tmp_path: Path) -> None:
    """The same path as an unprivileged user's, taken by root (maps root to root)."""
    out = tmp_path / "out"
    code = sysroot.run(
        sid_root,
        ["sh", "-c", f"cat /etc/debian_version > {out}; ls /proc/self/fd > /dev/null"],
        user_namespace=True,
        cwd=tmp_path,
    )
    assert code == 0
    assert out.read_text().strip()  # sid's /etc/debian_version, read inside the root
    assert str(sid_root) not in Path("/proc/self/mounts").read_text()
