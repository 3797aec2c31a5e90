"""hipcc of the sid tree compiles for gfx942, gfx1100 and gfx1201 inside a sid root, and the
program loads HIP 6.4 there and reports no device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocm_build.binary import elf
from rocm_build.rocm import sysroot

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
    # The private mount namespace leaves nothing mounted behind, nor the folders mounted on:
    # a later run without --bind does not find the tree's path standing (empty) in the root.
    assert str(sid_root) not in Path("/proc/self/mounts").read_text()
    assert not (sid_root / tmp_path.relative_to("/")).exists()
    assert not (sid_root / sid_tree.resolve().relative_to("/") / "lib").exists()

    failed = run_cli(["rocm", "run", str(sid_root), "--", "sh", "-c", "exit 7"], cwd=tmp_path)
    assert failed.returncode == 7


def test_run_by_another_user_enters_through_a_user_namespace(
    sid_root: Path, nobody_python: Path
) -> None:
    """`rocm run` by a user other than root: mounting and chroot happen in a user namespace
    where that user is root; the root's own files stay read-only to it, the bound folder is
    written as that user. nobody runs rocm-build from an install it may read, on a hard-link
    view of the cached root in a folder it may enter (the cache may lie in a private folder)."""
    import os
    import shutil
    import subprocess

    from tests.support.otheruser import NOBODY_UID, as_nobody, link_copy, readable_folder

    env = {"PATH": os.environ["PATH"]}
    userns = [*as_nobody(), "unshare", "--user", "--map-root-user"]
    probe = subprocess.run([*userns, "true"], env=env, capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(
            "the kernel refuses user namespaces to other users: allow them "
            f"(sysctl kernel.unprivileged_userns_clone=1): {probe.stderr.strip()[-60:]}"
        )
    # What `rocm run` does as that user: start its Python again in a user namespace.
    probe = subprocess.run(
        [*userns, str(nobody_python), "-c", "import rocm_build"],
        cwd="/", env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(
            f"nobody cannot start {nobody_python.resolve()} in a user namespace: make the venv "
            f"with a Python installed outside a private folder ({probe.stderr.strip()[-60:]})"
        )
    base = readable_folder("rb-userns-")
    try:
        root = base / "root"
        link_copy(sid_root, root)
        work = base / "work"
        work.mkdir()
        work.chmod(0o777)
        script = (
            "id -u; test -r /proc/self/status && echo proc; "
            "touch /etc/x 2>/dev/null || echo ro; touch made"
        )
        cli = [str(nobody_python), "-m", "rocm_build", "rocm", "run", str(root)]
        ran = subprocess.run(
            [*as_nobody(), *cli, "--", "sh", "-c", script],
            cwd=work, env={**env, "HOME": str(work)}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == ["0", "proc", "ro"]
        assert (work / "made").stat().st_uid == NOBODY_UID
        assert not (root / "etc/x").exists()
    finally:
        shutil.rmtree(base)


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
