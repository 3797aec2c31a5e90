"""cibuildwheel itself, in a container, builds the vecadd example and repairs it with the
repair command docs/bundle.md gives ("As cibuildwheel's repair command"): the wheel it hands back
is a fat wheel.

No registry is used: the build image is a Debian 12 root made by mmdebstrap (cached beside the
other test roots) with Python 3.11 where cibuildwheel looks for a manylinux image's
(``/opt/python/cp311-cp311``), imported into Docker under a local name. The container has no
network: rocm-build and ``build`` are installed by ``before-all`` from the mounted checkout and a
folder of wheels downloaded on the host, the ROCm tree is mounted read-only at ``/opt/rocm``.
When no Docker daemon answers, the test starts one of its own (root and Debian's ``docker.io``:
dev/apt-packages-test.txt), with a private socket and data folder, and stops it afterwards."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, _test_cache
from tests.support import services

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "vecadd" / "project"
DOCS = REPO / "docs" / "bundle.md"

#: the build image: Debian 12's Python 3.11 as a manylinux image's cp311, the compilers and the
#: system libraries the ROCm tree's clang needs. cibuildwheel runs its own helper scripts with
#: /opt/python/cp39-cp39/bin/python, so that names the same Python.
PACKAGES = (
    "python3,python3-venv,python3-dev,g++,libffi8,libedit2,libz3-4,zlib1g,libtinfo6,libxml2,"
    "libbsd0,libicu72,liblzma5,debianutils,tar,file"
)
HOOKS = (
    'chroot "$1" python3 -m venv /opt/python/cp311-cp311',
    'mkdir -p "$1/opt/python/cp39-cp39/bin" && ln -s /usr/bin/python3 '
    '"$1/opt/python/cp39-cp39/bin/python"',
)
#: the targets the ROCm 5.2 tree's compiler has device libraries for (docs/bundle.md's example
#: names gfx1100, which needs ROCm 5.5 or later)
ARCHS = "gfx90a;gfx1030"


def docs_repair_command() -> str:
    """The ``repair-wheel-command`` of the toml block under docs/bundle.md's cibuildwheel
    heading."""
    text = DOCS.read_text()
    section = text.split("## As cibuildwheel's repair command", 1)[1]
    block = section.split("```toml", 1)[1].split("```", 1)[0]
    assert "[tool.cibuildwheel.linux]" in block
    match = re.search(r'^repair-wheel-command = "(.*)"$', block, re.MULTILINE)
    assert match is not None, block
    return match.group(1)


def _docker_answers(env: dict[str, str]) -> bool:
    res = subprocess.run(["docker", "info"], env=env, capture_output=True, check=False)
    return res.returncode == 0


@pytest.fixture(scope="module")
def docker_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment in which ``docker`` reaches a daemon: the machine's, else a private
    ``dockerd`` started here (no iptables, no bridge, vfs storage: it runs inside a container)."""
    env = dict(os.environ)
    if shutil.which("docker") and _docker_answers(env):
        yield env
        return
    dockerd = shutil.which("dockerd") or (
        "/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None
    )
    if dockerd is None or shutil.which("docker") is None or os.geteuid() != 0:
        pytest.skip(
            "no container engine: no Docker daemon answers and none can be started here"
            " (needs root and docker.io)"
        )
    home = tmp_path_factory.mktemp("dockerd")
    sock = f"unix://{home}/docker.sock"
    log = (home / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [
            dockerd,
            f"--host={sock}",
            f"--data-root={home / 'data'}",
            f"--exec-root={home / 'exec'}",
            f"--pidfile={home / 'dockerd.pid'}",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--storage-driver=vfs",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    env["DOCKER_HOST"] = sock
    try:
        services.wait_until(
            lambda: _docker_answers(env),
            daemon,
            60,
            (home / "dockerd.log").read_text,
            "dockerd",
            every=1.0,  # each poll runs `docker info`
        )
        yield env
    finally:
        services.stop(daemon, 60)
        log.close()
        shutil.rmtree(home / "data", ignore_errors=True)


@pytest.fixture(scope="module")
def image(docker_env: dict[str, str]) -> str:
    """A local image name: the Debian 12 root (a tarball cached between runs, keyed by its
    packages and hooks), imported unless the daemon has it."""
    from rocm_build.rocm import debtree

    key = hashlib.sha256(json.dumps([PACKAGES, HOOKS]).encode()).hexdigest()[:12]
    name = f"rocm-build-test/cibw-bookworm:{key}"
    tarball = _test_cache() / f"cibw-bookworm-{key}.tar"
    if not tarball.is_file():
        if shutil.which("mmdebstrap") is None:
            pytest.fail("mmdebstrap is not installed: run dev/setup (dev/apt-packages-test.txt)")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_name(f"cibw-bookworm-{key}.partial.tar")
        partial.unlink(missing_ok=True)  # what a killed run left
        args = ["mmdebstrap", "--variant=minbase", "--format=tar", "--quiet"]
        args.append(f"--include={PACKAGES}")
        args += [f"--customize-hook={hook}" for hook in HOOKS]
        args += ["bookworm", str(partial), debtree.host_mirror()]
        subprocess.run(args, check=True)
        partial.rename(tarball)
    have = subprocess.run(
        ["docker", "image", "inspect", name], env=docker_env, capture_output=True, check=False
    )
    if have.returncode != 0:
        subprocess.run(
            ["docker", "import", str(tarball), name],
            env=docker_env,
            check=True,
            capture_output=True,
        )
    return name


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-build's dependencies and the build frontend as wheels, for the offline container."""
    dest = tmp_path_factory.mktemp("wheels")
    spec = [str(REPO), "build", "setuptools>=68", "wheel"]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *spec], check=True
    )
    return dest


def test_cibuildwheel_repairs_vecadd_into_a_fat_wheel(
    docker_env: dict[str, str], image: str, wheels: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    project = tmp_path / "vecadd"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    rocm = tmp_path / "rocm"
    subprocess.run(["cp", "-al", str(rocm_tree), str(rocm)], check=True)  # mounted read-only
    repair = docs_repair_command().replace("gfx90a;gfx1100", ARCHS)
    # the docs' toml block as the project's own configuration, the rest as CI would pass it
    with (project / "pyproject.toml").open("a") as f:
        f.write(f'\n[tool.cibuildwheel.linux]\nrepair-wheel-command = "{repair}"\n')
    volumes = [f"{rocm}:/opt/rocm:ro", f"{REPO}:/rocm-build-src:ro", f"{wheels}:/wheels:ro"]
    create = " ".join(["--network=none", *(f"--volume={v}" for v in volumes)])
    env = dict(docker_env)
    env.update(
        {
            "CIBW_BUILD": "cp311-manylinux_x86_64",
            "CIBW_MANYLINUX_X86_64_IMAGE": image,
            "CIBW_CONTAINER_ENGINE": f"docker; create_args: {create}; disable_host_mount: true",
            "CIBW_BEFORE_ALL": (
                "cp -r /rocm-build-src /tmp/rocm-build && /opt/python/cp311-cp311/bin/pip install"
                " --no-index --find-links /wheels /tmp/rocm-build build"
            ),
            "CIBW_ENVIRONMENT": (
                f"PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels PYTORCH_ROCM_ARCH='{ARCHS}'"
                " ROCM_PATH=/opt/rocm ROCM_BUILD_BUNDLE_DLOPEN_LIBS='libhiprtc-builtins.so*'"
            ),
        }
    )
    env.pop("PYTHONPATH", None)
    out = tmp_path / "wheelhouse"
    cibw = [
        sys.executable,
        "-m",
        "cibuildwheel",
        "--platform",
        "linux",
        "--output-dir",
        str(out),
        ".",
    ]
    res = subprocess.run(cibw, cwd=project, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    assert "rocm-build bundle" in res.stdout + res.stderr  # the repair command ran
    (fat,) = out.glob("*.whl")
    assert re.fullmatch(r"vecadd-1\.0\.0-cp311-cp311-manylinux_2_\d+_x86_64\.whl", fat.name)
    names = zipfile.ZipFile(fat).namelist()
    for lib in ("libamdhip64.so.5", "libhsa-runtime64.so.1", "libhsakmt.so.1"):
        assert f"vecadd/lib/{lib}" in names
    record = json.loads(zipfile.ZipFile(fat).read("vecadd/.rocm-build-bundle.json"))
    assert sorted(record["device_targets"]) == ["gfx1030", "gfx90a"]
    assert record["lib_dir"] == "vecadd/lib"
    rep = subprocess.run(
        [sys.executable, "-m", "rocm_build", "inspect", str(fat)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert rep.returncode == 0, rep.stderr
    assert "device code: gfx1030, gfx90a" in rep.stdout
    assert "libamdhip64.so.5  from rocm: /opt/rocm/lib/" in rep.stdout
