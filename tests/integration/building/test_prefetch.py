"""``rocm-build fetch``: aotriton (as the torch checkout's aotriton.cmake names it) and Triton's
pinned LLVM with the JSON and pybind11 packages its setup.py names, served from a real HTTP
server on 127.0.0.1 as archives shaped like the real ones (aotriton's runtime and images under a
top ``aotriton/`` folder, LLVM under ``llvm-<rev8>-<host>/``, JSON's ``include.zip`` with a top
``include/``, pybind11's tag archive under ``pybind11-<version>/``); then ``build --dry-run``
passes them to torch and Triton (offline) and turns flash attention on under auto."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import socket
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocm_build.building import prefetch
from rocm_build.common.errors import FetchError
from rocm_build.repo import llvmpin
from rocm_build.rocm.dist import open_tree
from tests.conftest import CliRunner
from tests.support import hostile
from tests.support.httpserver import PADDING, Server, small_tree_tarball

HERE = Path(__file__).parent
TEMPLATE = HERE / "projects" / "aotriton" / "aotriton.cmake.in"
TORCH = HERE / "projects" / "torch"
VER = "0.99fx"
LLVM_REV = "0123abcd4567ef890123abcd4567ef890123abcd"
ARCH = "gfx90a"
PYBIND11 = "2.13.1"
#: Triton's setup.py as it names its third-party packages (``https://github.com`` replaced by the
#: test server's address).
SETUP_PY = """\
import os
from typing import NamedTuple


class Package(NamedTuple):
    package: str
    name: str
    url: str
    include_flag: str
    lib_flag: str
    syspath_var_name: str


def get_pybind11_package_info():
    pybind11_version_path = os.path.join(get_base_dir(), "cmake", "pybind11-version.txt")
    with open(pybind11_version_path, "r") as pybind11_version_file:
        version = pybind11_version_file.read().strip()
    name = f"pybind11-{version}"
    url = f"@GITHUB@/pybind/pybind11/archive/refs/tags/v{version}.tar.gz"
    return Package("pybind11", name, url, "PYBIND11_INCLUDE_DIR", "", "PYBIND11_SYSPATH")


def get_json_package_info():
    url = "@GITHUB@/nlohmann/json/releases/download/v3.11.3/include.zip"
    return Package("json", "", url, "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")


def get_llvm_package_info():
    name = "llvm-" + open("cmake/llvm-hash.txt").read(8)
    return Package("llvm", name, "", "LLVM_INCLUDE_DIRS", "LLVM_LIBRARY_DIR", "LLVM_SYSPATH")


def is_offline_build():
    return os.environ.get("TRITON_OFFLINE_BUILD", "") == "1"
"""
JSON_PATH = "/gh/nlohmann/json/releases/download/v3.11.3/include.zip"
PYBIND11_PATH = f"/gh/pybind/pybind11/archive/refs/tags/v{PYBIND11}.tar.gz"


def _tar(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def runtime_tarball() -> bytes:
    return _tar(
        {
            "aotriton/lib/libaotriton_v2.so.0.99.0": b"\x7fELF runtime",
            "aotriton/include/aotriton/flash.h": b"#pragma once\n",
        },
        {
            "aotriton/lib/libaotriton_v2.so.0": "libaotriton_v2.so.0.99.0",
            "aotriton/lib/libaotriton_v2.so": "libaotriton_v2.so.0",
        },
    )


def image_tarball(image: str) -> bytes:
    base = f"aotriton/lib/aotriton.images/{image}"
    return _tar({f"{base}/__signature__": image.encode(), f"{base}/flash/attn_fwd/k.aks2": PADDING})


def llvm_tarball(name: str) -> bytes:
    return _tar(
        {
            f"{name}/bin/mlir-tblgen": b"#!/bin/sh\n",
            f"{name}/include/llvm/Config/llvm-config.h": b"#define LLVM_VERSION_MAJOR 21\n",
            f"{name}/lib/cmake/mlir/MLIRConfig.cmake": b"",
            f"{name}/lib/libLLVMCore.a": PADDING,
        }
    )


def json_zip(members: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in (members or JSON_MEMBERS).items():
            zf.writestr(name, data)
    return buf.getvalue()


JSON_MEMBERS = {
    "include/nlohmann/json.hpp": b"// nlohmann json\n",
    "include/nlohmann/detail/macro_scope.hpp": b"#pragma once\n",
    "single_include/nlohmann/json.hpp": b"// single\n",
    "meson.build": b"project('nlohmann_json')\n",
}


def pybind11_tarball() -> bytes:
    top = f"pybind11-{PYBIND11}"
    return _tar(
        {
            f"{top}/include/pybind11/pybind11.h": b"#pragma once\n",
            f"{top}/CMakeLists.txt": b"project(pybind11)\n",
        }
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Setup:
    root: Path
    tree: Path
    server: Server
    env: dict[str, str]
    llvm_name: str

    def cli(
        self, run_cli: CliRunner, *args: str, json_out: bool = False
    ) -> subprocess.CompletedProcess[str]:
        flags = ["--json"] if json_out else []
        return run_cli(
            [*flags, *args[:1], "--rocm", str(self.tree), "--arch", ARCH, *args[1:]],
            cwd=self.root,
            env=self.env,
        )

    def cache(self) -> Path:
        return self.root / "xdg" / "rocm-build"


def write_aotriton_cmake(torch: Path, base_url: str, shas: dict[str, str]) -> None:
    text = TEMPLATE.read_text()
    for key, value in {**shas, "BASE_URL": base_url}.items():
        text = text.replace(f"@{key}@", value)
    dest = torch / "cmake" / "External" / "aotriton.cmake"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


@pytest.fixture
def setup(tmp_path: Path, server: Server) -> Setup:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    # The small tree has only hip's CMake package (as the building workspace's settings say).
    (root / "rocm-build.toml").write_text('[projects.torch]\ncmake_packages = ["hip"]\n')
    tree_tar = tmp_path / "rocm.tar.gz"
    tree_tar.write_bytes(small_tree_tarball())
    with tarfile.open(tree_tar) as tar:
        tar.extractall(tmp_path / "rocm", filter="data")
    tree = tmp_path / "rocm" / "rocm-6.4.1"
    torch = root / "src" / "torch"
    shutil.copytree(TORCH, torch)
    runtime = runtime_tarball()
    images = {i: image_tarball(i) for i in ("amd-gfx90a", "amd-gfx942", "amd-gfx110x")}
    name = f"aotriton-{VER}-manylinux_2_28_{prefetch._host()[0]}-rocm6.4-shared.tar.gz"
    server.files[f"/dl/{VER}/{name}"] = runtime
    for image, data in images.items():
        server.files[f"/dl/{VER}/aotriton-{VER}-images-{image}.tar.gz"] = data
    shas = {
        "RUNTIME_SHA256": _sha(runtime),
        "OTHER_SHA256": "0" * 64,
        "GFX90A_SHA256": _sha(images["amd-gfx90a"]),
        "GFX942_SHA256": _sha(images["amd-gfx942"]),
        "GFX110X_SHA256": _sha(images["amd-gfx110x"]),
    }
    # The rocm5.2 runtime's entry is first in the file, the tree's (6.4) second.
    shas["RUNTIME_SHA256"], shas["OTHER_SHA256"] = shas["OTHER_SHA256"], shas["RUNTIME_SHA256"]
    write_aotriton_cmake(torch, server.url("/dl/"), shas)
    triton = root / "src" / "triton"
    (triton / "cmake").mkdir(parents=True)
    (triton / "cmake" / "llvm-hash.txt").write_text(LLVM_REV + "\n")
    (triton / "setup.py").write_text(SETUP_PY.replace("@GITHUB@", server.url("/gh")))
    (triton / "cmake" / "pybind11-version.txt").write_text(PYBIND11 + "\n")
    server.files[JSON_PATH] = json_zip()
    server.files[PYBIND11_PATH] = pybind11_tarball()
    machine, glibc = prefetch._host()
    llvm_name = f"llvm-{LLVM_REV[:8]}-{llvmpin.host_suffix(machine, glibc)}"
    server.files[f"/llvm-builds/{llvm_name}.tar.gz"] = llvm_tarball(llvm_name)
    env = {
        "XDG_CACHE_HOME": str(root / "xdg"),
        "ROCM_BUILD_TRITON_LLVM_URL": server.url("/llvm-builds/"),
        "COLUMNS": "300",
    }
    return Setup(root, tree, server, env, llvm_name)


def test_fetch_downloads_checks_and_unpacks_then_the_plan_uses_them(
    setup: Setup, run_cli: CliRunner
) -> None:
    res = setup.cli(run_cli, "fetch")
    assert res.returncode == 0, res.stderr
    prefix = setup.cache() / "aotriton" / f"aotriton-{VER}-rocm6.4-{prefetch._host()[0]}-gfx90a"
    assert (prefix / "lib" / "libaotriton_v2.so").is_symlink()
    assert (prefix / "lib" / "libaotriton_v2.so.0.99.0").is_file()
    assert (prefix / "include" / "aotriton" / "flash.h").is_file()
    assert (prefix / "lib" / "aotriton.images" / "amd-gfx90a" / "__signature__").is_file()
    assert not (prefix / "lib" / "aotriton.images" / "amd-gfx942").exists()
    assert f"aotriton: {prefix}" in res.stdout
    llvm = [p for p in (setup.cache() / "llvm").glob("*/tree") if (p / "bin").is_dir()]
    assert len(llvm) == 1
    assert (llvm[0] / "bin" / "mlir-tblgen").is_file()
    assert len(list((setup.cache() / "llvm").glob("*/tree"))) == 3  # LLVM, JSON, pybind11
    requests = len(setup.server.requests)

    again = setup.cli(run_cli, "fetch")
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stdout
    assert len(setup.server.requests) == requests

    planned = setup.cli(run_cli, "build", "triton", "torch", "--dry-run", json_out=True)
    assert planned.returncode == 0, planned.stderr
    steps = {s["name"]: s for s in json.loads(planned.stdout)["projects"]}
    torch_env = steps["torch"]["env"]
    assert torch_env["AOTRITON_INSTALLED_PREFIX"] == str(prefix)
    assert "USE_FLASH_ATTENTION" not in torch_env
    flash = next(f for f in steps["torch"]["features"] if f["name"] == "flash_attention")
    assert flash["on"] is True, flash
    triton_env = steps["triton"]["env"]
    assert triton_env["LLVM_SYSPATH"] == str(llvm[0])
    assert triton_env["TRITON_OFFLINE_BUILD"] == "1"
    json_dir, pybind_dir = Path(triton_env["JSON_SYSPATH"]), Path(triton_env["PYBIND11_SYSPATH"])
    assert (json_dir / "include" / "nlohmann" / "json.hpp").is_file()
    assert (pybind_dir / "include" / "pybind11" / "pybind11.h").is_file()
    assert f"JSON_SYSPATH: {json_dir}" in res.stdout
    first = json.loads((setup.cache() / "llvm" / prefetch.FIRST_SEEN).read_text())
    served = setup.server.files
    llvm_path = f"/llvm-builds/{setup.llvm_name}.tar.gz"
    assert first == {
        setup.server.url(p): _sha(served[p]) for p in (llvm_path, JSON_PATH, PYBIND11_PATH)
    }


def test_without_a_fetch_the_dry_run_says_what_is_missing(setup: Setup, run_cli: CliRunner) -> None:
    planned = setup.cli(run_cli, "build", "triton", "torch", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    out = planned.stdout
    assert f"aotriton-{VER}-images-amd-gfx90a.tar.gz" in out, out
    assert "rocm-build fetch --what aotriton" in out
    assert "rocm-build fetch --what llvm" in out
    assert "Triton's nlohmann JSON (include.zip)" in out, out
    assert f"Triton's pybind11 (v{PYBIND11}.tar.gz)" in out, out
    assert "flash_attention: off (no aotriton at hand" in out
    assert "AOTRITON_INSTALLED_PREFIX" not in out
    assert not (setup.cache() / "aotriton").exists()


def test_a_wrong_hash_keeps_nothing(setup: Setup, run_cli: CliRunner) -> None:
    path = f"/dl/{VER}/aotriton-{VER}-images-amd-gfx90a.tar.gz"
    setup.server.files[path] = image_tarball("amd-gfx942")  # not what the file's hash says
    res = setup.cli(run_cli, "fetch", "--what", "aotriton")
    assert res.returncode == 5, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "sha256" in ln]
    assert len(lines) == 1, res.stderr
    assert "the download was deleted" in lines[0]
    downloads = setup.cache() / "aotriton" / "downloads"
    kept = [p for p in downloads.iterdir() if not (p / "done.json").exists()]
    assert kept == []
    assert not list((setup.cache() / "aotriton").glob("aotriton-*"))


def test_a_partial_download_keeps_nothing(setup: Setup, run_cli: CliRunner) -> None:
    setup.server.cut_after = 1000
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == 5, res.stderr
    assert "nothing was kept" in res.stderr
    assert list((setup.cache() / "llvm").iterdir()) == []


def test_an_oversized_download_keeps_nothing(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefetch, "MAX_BYTES", 5000)
    plan = prefetch.plan(
        ["llvm"],
        torch_source=setup.root / "src" / "torch",
        triton_source=setup.root / "src" / "triton",
        tree=None,
        targets=(),
        env={**setup.env},
        work_dir=setup.root,
        llvm_url=setup.env["ROCM_BUILD_TRITON_LLVM_URL"],
    )
    with pytest.raises(FetchError, match="is over 5000 bytes"):
        prefetch.execute(plan)
    assert list((setup.cache() / "llvm").iterdir()) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_url_is_one_line_with_the_credential_masked(
    setup: Setup, run_cli: CliRunner
) -> None:
    url = f"http://fetcher:T0ken-99@127.0.0.1:{_closed_port()}/llvm-builds/"
    env = {**setup.env, "ROCM_BUILD_TRITON_LLVM_URL": url}
    res = run_cli(["fetch", "--what", "llvm"], cwd=setup.root, env=env)
    assert res.returncode == 5, res.stderr
    assert "T0ken-99" not in res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "failed" in ln]
    assert len(errors) == 1, res.stderr
    assert "http://fetcher:***@127.0.0.1:" in errors[0]
    assert "Traceback" not in res.stderr


def test_a_malformed_pin_and_an_unknown_aotriton_cmake_are_one_line(
    setup: Setup, run_cli: CliRunner
) -> None:
    (setup.root / "src" / "triton" / "cmake" / "llvm-hash.txt").write_text("main\n")
    res = run_cli(["fetch", "--what", "llvm"], cwd=setup.root, env=setup.env)
    assert res.returncode == 2, res.stderr
    assert "llvm-hash.txt holds 'main', not an LLVM commit hash" in res.stderr
    assert "Traceback" not in res.stderr

    # The older shape: version, URL and hashes read from .ci/docker/aotriton_version.txt.
    old = setup.root / "src" / "torch" / "cmake" / "External" / "aotriton.cmake"
    old.write_text(
        'file(STRINGS "${CMAKE_CURRENT_SOURCE_DIR}/.ci/docker/aotriton_version.txt" __I)\n'
        "list(GET __I 0 __AOTRITON_VER)\n"
    )
    res = setup.cli(run_cli, "fetch", "--what", "aotriton")
    assert res.returncode == 2, res.stderr
    assert "not the aotriton.cmake shape rocm-build reads" in res.stderr
    assert "Traceback" not in res.stderr


def test_the_tree_is_never_an_aotriton_prefix(setup: Setup, run_cli: CliRunner) -> None:
    lib = setup.tree / "lib"
    (lib / "libaotriton_v2.so.0").write_bytes(b"\x7fELF")
    assert open_tree(setup.tree).root == setup.tree
    planned = setup.cli(run_cli, "build", "torch", "--dry-run", json_out=True)
    assert planned.returncode == 0, planned.stderr
    (step,) = json.loads(planned.stdout)["projects"]
    assert "AOTRITON_INSTALLED_PREFIX" not in step["env"]


@pytest.mark.parametrize("where", ["aotriton", "llvm"])
@pytest.mark.parametrize("attack", hostile.FOLDER_ATTACKS)
def test_a_hostile_prefetch_cache_folder_is_refused_or_left_alone(
    setup: Setup, run_cli: CliRunner, tmp_path: Path, attack: str, where: str
) -> None:
    """The download caches ``fetch`` fills (``<cache>/rocm-build/aotriton`` and ``llvm``) under
    the usual attacks (tests/support/hostile.py): a file, a link elsewhere, another user's folder,
    one others may write to. Each is refused in one line (exit 14; a file there: exit 2 or 14) and
    left as it is; nothing is written where a link points, nothing is downloaded into it."""
    if attack in ("symlink", "foreign-owner"):
        hostile.need_root("a link or a folder owned by another user")
    planted = hostile.plant(
        setup.cache() / where, attack, elsewhere=tmp_path / "elsewhere", folder=True
    )
    res = setup.cli(run_cli, "fetch")
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert res.returncode in ((2, 14) if attack == "wrong-type" else (14,)), res.stderr
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    planted.assert_left_alone()


def _json_folder(setup: Setup) -> Path:
    from rocm_build.rocm import distfetch

    return distfetch.cache_folder(setup.server.url(JSON_PATH), setup.cache() / "llvm")


def _triton_env(setup: Setup, run_cli: CliRunner) -> tuple[dict[str, str], str]:
    planned = setup.cli(run_cli, "build", "triton", "--dry-run", json_out=True)
    assert planned.returncode == 0, planned.stderr
    (step,) = json.loads(planned.stdout)["projects"]
    return step["env"], planned.stdout


def test_a_missing_package_turns_offline_off_and_names_the_fetch(
    setup: Setup, run_cli: CliRunner
) -> None:
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    shutil.rmtree(_json_folder(setup))
    env, out = _triton_env(setup, run_cli)
    assert "LLVM_SYSPATH" in env
    assert "PYBIND11_SYSPATH" in env
    assert "JSON_SYSPATH" not in env
    assert "TRITON_OFFLINE_BUILD" not in env
    assert "Triton's nlohmann JSON (include.zip)" in out
    assert "rocm-build fetch --what llvm" in out


def test_a_changed_archive_is_refused_against_its_first_download(
    setup: Setup, run_cli: CliRunner
) -> None:
    """Trust on first use: Triton publishes no hash, so the sha256 of the first download is
    recorded; an archive changed since (fetched again after the cache lost it) keeps nothing."""
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    shutil.rmtree(_json_folder(setup))
    setup.server.files[JSON_PATH] = json_zip({**JSON_MEMBERS, "include/evil.h": b"x"})
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == 5, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "first downloaded" in ln]
    assert len(lines) == 1, res.stderr
    assert prefetch.FIRST_SEEN in lines[0]
    assert "nothing was kept" in lines[0]
    assert "Traceback" not in res.stderr
    assert not _json_folder(setup).exists()
    env, _ = _triton_env(setup, run_cli)
    assert "JSON_SYSPATH" not in env
    assert "TRITON_OFFLINE_BUILD" not in env


def test_a_cached_folder_of_another_sha256_is_not_used(setup: Setup, run_cli: CliRunner) -> None:
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    stamp = _json_folder(setup) / "done.json"
    data = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**data, "sha256": "f" * 64}))
    env, _ = _triton_env(setup, run_cli)
    assert "JSON_SYSPATH" not in env
    assert "TRITON_OFFLINE_BUILD" not in env


def test_a_partial_package_download_keeps_nothing(setup: Setup, run_cli: CliRunner) -> None:
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    shutil.rmtree(_json_folder(setup))
    setup.server.cut_after = 100
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == 5, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    assert "nothing was kept" in errors[0], res.stderr
    assert not _json_folder(setup).exists()


@pytest.mark.parametrize(
    ("members", "code", "says"),
    [
        ({"single_include/nlohmann/json.hpp": b"//\n"}, 5, "holds no include/nlohmann/json.hpp"),
        ({"include/../../escape.hpp": b"//\n"}, 15, "is unsafe"),
    ],
)
def test_a_package_of_the_wrong_layout_keeps_nothing(
    setup: Setup, run_cli: CliRunner, members: dict[str, bytes], code: int, says: str
) -> None:
    setup.server.files[JSON_PATH] = json_zip(members)
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == code, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    assert says in errors[0], res.stderr
    assert not _json_folder(setup).exists()
    first = json.loads((setup.cache() / "llvm" / prefetch.FIRST_SEEN).read_text())
    assert setup.server.url(JSON_PATH) not in first
    assert not (setup.root.parent / "escape.hpp").exists()


def test_a_damaged_record_of_first_downloads_is_one_line(setup: Setup, run_cli: CliRunner) -> None:
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    record = setup.cache() / "llvm" / prefetch.FIRST_SEEN
    record.write_text('{"http://x/": 5}')
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == 5, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    assert f"{record} is damaged; delete it" in errors[0]
    assert record.read_text() == '{"http://x/": 5}'


def _zeros_tar_gz(name: str, size: int) -> bytes:
    """A gzip'd tarball with one member of ``size`` zero bytes (about size/1000 compressed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, _Zeros(size))
    return buf.getvalue()


def _zeros_zip(name: str, size: int) -> bytes:
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf,
        zf.open(name, "w", force_zip64=True) as out,
    ):
        chunk = bytes(1 << 20)
        for _ in range(size >> 20):
            out.write(chunk)
    return buf.getvalue()


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


@pytest.mark.parametrize("package", ["json", "pybind11"])
def test_a_decompression_bomb_is_refused_before_it_is_written(
    setup: Setup, run_cli: CliRunner, package: str
) -> None:
    """A package of about 1 MB that unpacks to 1.1 GiB (over 100 times its size and 1 GiB) is
    refused from its members' declared sizes: one line, exit 15, nothing kept or recorded."""
    size = (1 << 30) + (100 << 20)
    if package == "json":
        path = JSON_PATH
        setup.server.files[path] = _zeros_zip("include/nlohmann/json.hpp", size)
    else:
        path = PYBIND11_PATH
        top = f"pybind11-{PYBIND11}"
        setup.server.files[path] = _zeros_tar_gz(f"{top}/include/pybind11/pybind11.h", size)
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    assert res.returncode == 15, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    assert "decompression bomb" in errors[0], res.stderr
    first = json.loads((setup.cache() / "llvm" / prefetch.FIRST_SEEN).read_text())
    assert setup.server.url(path) not in first
    left = [
        p for p in (setup.cache() / "llvm").rglob("*") if p.is_file() and p.stat().st_size > 1 << 29
    ]
    assert left == []


@pytest.mark.parametrize("attack", hostile.STATE_FILE_ATTACKS)
def test_the_record_of_first_downloads_under_attack(
    setup: Setup, run_cli: CliRunner, tmp_path: Path, attack: str
) -> None:
    """The record is read before the JSON package is fetched again and rewritten after. A name
    that holds no regular file of this user's alone is refused (exit 14) and left as it is; a
    stale record (another sha256 for the URL: the archive changed since) keeps nothing (exit 5);
    a damaged one is one line (exit 5) and left for the user to delete."""
    assert setup.cli(run_cli, "fetch", "--what", "llvm").returncode == 0
    record = setup.cache() / "llvm" / prefetch.FIRST_SEEN
    real = json.loads(record.read_text())
    key = setup.server.url(JSON_PATH)
    content = {
        "stale": json.dumps({**real, key: "0" * 64}).encode(),
        "crafted": b"",
        "wrong-json": b"",
    }.get(attack, record.read_bytes())
    record.unlink()
    shutil.rmtree(_json_folder(setup))
    planted = hostile.plant(
        record, attack, elsewhere=tmp_path / "elsewhere", folder=False, content=content
    )
    res = setup.cli(run_cli, "fetch", "--what", "llvm")
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr
    assert not _json_folder(setup).exists()  # nothing fetched is kept
    if attack in hostile.UNTRUSTED:
        assert res.returncode == 14, res.stderr
        assert str(record) in errors[0]
        planted.assert_left_alone()
        return
    assert res.returncode == 5, res.stderr
    said = "not the archive first downloaded" if attack == "stale" else "is damaged"
    assert said in errors[0], errors[0]
    planted.assert_left_alone()


def test_a_full_disk_keeps_nothing_and_records_nothing(setup: Setup, run_cli: CliRunner) -> None:
    """The download cache on a full disk: one line, and no half-written package or record."""
    llvm = setup.cache() / "llvm"
    with hostile.full_disk(llvm):
        res = setup.cli(run_cli, "fetch", "--what", "llvm")
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
        assert res.returncode == 14, res.stderr
        assert len(errors) == 1, res.stderr
        assert "no space left in" in errors[0], errors[0]
        assert "nothing was kept" in errors[0], errors[0]
        assert "Traceback" not in res.stderr
        left = sorted(p.name for p in llvm.iterdir() if p.name != ".filler")
    assert not (llvm / prefetch.FIRST_SEEN).exists()
    assert left == [], left


def test_rocm_fetch_on_a_full_disk_keeps_its_part_and_resumes(
    setup: Setup, run_cli: CliRunner
) -> None:
    """``rocm fetch`` (a resumable download) into a full cache: one line (exit 14) that says what
    was kept; with room again, the same command finishes."""
    setup.server.files["/rocm.tar.gz"] = small_tree_tarball()
    url = setup.server.url("/rocm.tar.gz")
    cache = setup.cache() / "rocm"
    with hostile.full_disk(cache):
        res = run_cli(["rocm", "fetch", url], cwd=setup.root, env=setup.env)
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
        assert res.returncode == 14, res.stderr
        assert len(errors) == 1, res.stderr
        assert "no space left in" in errors[0], errors[0]
        assert "run again" in errors[0], errors[0]
        assert "Traceback" not in res.stderr
    again = run_cli(["rocm", "fetch", url], cwd=setup.root, env=setup.env)
    assert again.returncode == 0, again.stderr
    assert (Path(again.stdout.strip().splitlines()[-1]) / "lib").is_dir()
