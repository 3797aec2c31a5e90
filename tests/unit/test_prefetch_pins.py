"""The readers of what torch's and Triton's builds download: aotriton.cmake's shape (the fixture
shaped like PyTorch's) and Triton's LLVM pin and host names (as its setup.py makes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.common.errors import ConfigError, RocmTreeError
from rocm_build.repo import aotritoncmake, llvmpin

TEMPLATE = Path(__file__).parents[1] / "integration/building/projects/aotriton/aotriton.cmake.in"


def _text(base: str = "https://example.invalid/aotriton/releases/download/") -> str:
    text = TEMPLATE.read_text().replace("@BASE_URL@", base)
    for n, key in enumerate(("RUNTIME", "OTHER", "GFX90A", "GFX942", "GFX110X")):
        text = text.replace(f"@{key}_SHA256@", f"{n:x}" * 64)
    return text


def test_the_runtime_and_the_images_of_the_targets() -> None:
    pins = aotritoncmake.parse(_text(), "aotriton.cmake", {})
    runtime = pins.runtime("6.4.1", "x86_64")
    assert runtime.name == "aotriton-0.99fx-manylinux_2_28_x86_64-rocm6.4-shared.tar.gz"
    assert runtime.url == (
        "https://example.invalid/aotriton/releases/download/0.99fx/" + runtime.name
    )
    assert runtime.sha256 == "1" * 64
    images = pins.images_for(["gfx942", "gfx1101"])  # CMake MATCHES: 942, 110.
    assert [i.name for i in images] == [
        "aotriton-0.99fx-images-amd-gfx942.tar.gz",
        "aotriton-0.99fx-images-amd-gfx110x.tar.gz",
    ]
    assert pins.images_for(["gfx1030"]) == ()


def test_the_environments_base_url_wins_as_in_cmake() -> None:
    env = {"PYTORCH_AOTRITON_BASE_URL": "http://mirror.invalid/a/"}
    pins = aotritoncmake.parse(_text(), "aotriton.cmake", env)
    assert pins.runtime("5.2.3", "x86_64").url.startswith("http://mirror.invalid/a/0.99fx/")


def test_a_rocm_without_a_runtime_is_one_line() -> None:
    pins = aotritoncmake.parse(_text(), "aotriton.cmake", {})
    with pytest.raises(RocmTreeError, match=r"no aotriton runtime for ROCm 7\.1 "):
        pins.runtime("7.1.0", "x86_64")


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace("__AOTRITON_IMAGE_SHA256_LIST", "__X"), "no set(__AOTRITON_IMAGE"),
        (lambda t: t.replace('"' + "3" * 64 + '"', '""'), "is not a sha256"),
        (lambda t: t.replace('"rocm6.4"\n', ""), "lists of different lengths"),
        (lambda t: t.replace("${image}.tar", "${other}.tar"), "no single runtime and image"),
    ],
)
def test_a_shape_not_understood_is_one_line(edit: object, why: str) -> None:
    with pytest.raises(ConfigError, match=r"not the aotriton\.cmake shape") as err:
        aotritoncmake.parse(edit(_text()), "aotriton.cmake", {})  # type: ignore[operator]
    assert why in str(err.value)
    assert "\n" not in str(err.value)


def test_llvm_pin_and_host(tmp_path: Path) -> None:
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "llvm-hash.txt").write_text("adba14acea99cc6a17d837763a3248c9d4a2fadf\n")
    rev = llvmpin.read_pin(tmp_path)
    assert rev == "adba14acea99cc6a17d837763a3248c9d4a2fadf"
    assert llvmpin.host_suffix("x86_64", "2.39") == "ubuntu-x64"
    assert llvmpin.host_suffix("x86_64", "2.28") == "almalinux-x64"
    assert llvmpin.host_suffix("x86_64", "2.17") == "centos-x64"
    assert llvmpin.host_suffix("aarch64", "2.39") == "ubuntu-arm64"
    got = llvmpin.llvm_download(rev, "ubuntu-x64")
    assert got.url == (
        "https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-adba14ac-ubuntu-x64.tar.gz"
    )
    (tmp_path / "cmake" / "llvm-hash.txt").write_text("not a hash\n")
    with pytest.raises(ConfigError, match="not an LLVM commit hash"):
        llvmpin.read_pin(tmp_path)
    assert llvmpin.read_pin(tmp_path / "cmake") is None


_PIP_PYBIND11 = """\
def get_json_package_info():
    url = "https://github.com/nlohmann/json/releases/download/v3.11.3/include.zip"
    return Package("json", "", url, "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")

def get_pybind11_cmake_args(self):
    pybind11_sys_path = get_env_with_keys(["PYBIND11_SYSPATH"])
    return pybind11.get_include()
"""
_JSON_VERSION_FILE = """\
def get_json_package_info():
    json_version_path = os.path.join(get_base_dir(), "cmake", "json-version.txt")
    with open(json_version_path, "r") as json_version_file:
        version = json_version_file.read().strip()
    url = f"https://github.com/nlohmann/json/releases/download/{version}/include.zip"
    return Package("json", "", url, "JSON_INCLUDE_DIR", "", "JSON_SYSPATH")
"""
_CMAKE_DOWNLOADS = 'passthrough_args = ["TRITON_OFFLINE_BUILD", "LLVM_SYSPATH", "JSON_SYSPATH"]\n'


def test_setup_packages_as_each_setup_py_shape_names_them(tmp_path: Path) -> None:
    """pybind11 from the venv's package is no download; a fork's json-version.txt names the
    tag; a setup.py that passes JSON_SYSPATH on to CMake (which downloads it) is a variable
    rocm-build cannot fill."""
    (tmp_path / "python").mkdir()
    (tmp_path / "python" / "setup.py").write_text(_PIP_PYBIND11)
    packages, unknown = llvmpin.setup_packages(tmp_path)
    assert [p.syspath for p in packages] == ["JSON_SYSPATH"]
    assert packages[0].download.url == llvmpin.JSON_DEFAULT_URL
    assert unknown == ()

    (tmp_path / "setup.py").write_text(_JSON_VERSION_FILE)
    (tmp_path / "cmake").mkdir()
    (tmp_path / "cmake" / "json-version.txt").write_text("v3.12.0\n")
    (p,), _ = llvmpin.setup_packages(tmp_path)
    assert p.download.url.endswith("/download/v3.12.0/include.zip")
    (tmp_path / "cmake" / "json-version.txt").write_text("$(evil)\n")
    with pytest.raises(ConfigError, match=r"json-version.txt holds '\$\(evil\)', not a version"):
        llvmpin.setup_packages(tmp_path)

    (tmp_path / "setup.py").write_text(_CMAKE_DOWNLOADS)
    assert llvmpin.setup_packages(tmp_path) == ((), ("JSON_SYSPATH",))
    (tmp_path / "setup.py").write_text("def broken(:\n")
    with pytest.raises(ConfigError, match="not Python rocm-build can read"):
        llvmpin.setup_packages(tmp_path)
