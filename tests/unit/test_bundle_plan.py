"""The pure planning part of bundle: closure, search paths, torch reuse, data placement, tags."""

from __future__ import annotations

import pytest

from rocm_build.bundle import policy as bundle_policy
from rocm_build.bundle.closure import inside
from rocm_build.bundle.data import data_destination, gfx_tokens
from rocm_build.bundle.model import TorchWheel
from rocm_build.common.errors import BundleError, ConfigError
from rocm_build.wheel.wheelfile import WheelName
from tests.support.closures import ROCM, TreeIndex, lib, plan


def test_closure_rpaths_and_dlopen() -> None:
    p = plan(
        {"ext/sub/_k.so": lib("k", "libamdhip64.so.5", "libc.so.6", runpath=("/opt/rocm/lib",))}
    )
    names = {x.name: x for x in p.libraries}
    assert set(names) == {"libamdhip64.so.5", "libhsa-runtime64.so.1", "libnuma.so.1",
                          "libamd_comgr.so.2"}  # fmt: skip
    assert names["libamd_comgr.so.2"].reason == "dlopen"
    assert names["libnuma.so.1"].needed_by == ("ext/lib/libhsa-runtime64.so.1",)
    assert names["libamdhip64.so.5"].arcname == "ext/lib/libamdhip64.so.5"
    (change,) = p.rpaths
    assert change.arcname == "ext/sub/_k.so"
    assert change.new == "$ORIGIN/../lib"  # /opt/rocm/lib dropped: it escapes the wheel
    assert "libstdc++.so.6" in p.system_libs
    assert p.platform_tag.startswith("manylinux_2_17_x86_64")


def test_missing_library_names_who_needs_it() -> None:
    with pytest.raises(BundleError, match=r"libfoo\.so\.3 \(needed by ext/_k\.so\)"):
        plan({"ext/_k.so": lib("k", "libfoo.so.3")})


def test_system_library_grafted_when_policy_disallows() -> None:
    p = plan({"ext/_k.so": lib("k", "libtinfo.so.6")}, dlopen_patterns=())
    (only,) = p.libraries
    assert (only.name, only.origin) == ("libtinfo.so.6", "system")


def test_no_dlopen_extras_without_rocm() -> None:
    p = plan({"ext/_k.so": lib("k", "libtinfo.so.6")})
    assert "libamd_comgr.so.2" not in {x.name for x in p.libraries}


def test_already_bundled_is_unchanged() -> None:
    elves = {
        "ext/_k.so": lib("k", "libamdhip64.so.5", rpath=("$ORIGIN/lib",)),
        "ext/lib/libamdhip64.so.5": lib("h", "libhsa-runtime64.so.1", soname="libamdhip64.so.5",
                                        rpath=("$ORIGIN",)),
        "ext/lib/libhsa-runtime64.so.1": lib("s", "libnuma.so.1", rpath=("$ORIGIN",)),
        "ext/lib/libnuma.so.1": lib("n", "libc.so.6", rpath=("$ORIGIN",)),
        "ext/lib/libamd_comgr.so.2": lib("c", "libc.so.6", rpath=("$ORIGIN",)),
    }  # fmt: skip
    p = plan(elves)
    assert not p.changes_content


def test_runpath_becomes_rpath() -> None:
    p = plan({"ext/_k.so": lib("k", "libc.so.6", runpath=("$ORIGIN/lib",))}, dlopen_patterns=())
    (change,) = p.rpaths
    assert change.new == "$ORIGIN/lib"


def test_torch_libraries_are_reused() -> None:
    torch = TorchWheel(
        path="torch.whl",
        version="2.9.0+rocm5.2.3",
        lib_dir="torch/lib",
        libs={"libamdhip64.so.5": "torch/lib/libamdhip64.so.5",
              "libtorch_hip.so": "torch/lib/libtorch_hip.so",
              "libamd_comgr.so.2": "torch/lib/libamd_comgr.so.2"},
    )  # fmt: skip
    tv: dict[str, object] = {
        "lib_dir": "torchvision",
        "torch": torch,
        "wheel_name": WheelName.parse("torchvision-0.24.0-cp311-cp311-linux_x86_64.whl"),
    }
    p = plan({"torchvision/_C.so": lib("c", "libtorch_hip.so", "libamdhip64.so.5")}, **tv)
    assert p.libraries == ()
    assert p.requires == ("torch==2.9.0+rocm5.2.3",)
    (change,) = p.rpaths
    assert change.new == "$ORIGIN:$ORIGIN/../torch/lib"
    pinned = "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.24.0\n"
    pinned += "Requires-Dist: torch==2.9.0+rocm5.2.3\n"
    again = plan({"torchvision/_C.so": lib("c", "libtorch_hip.so")}, **tv, metadata=pinned)
    assert again.requires == ()  # pinned already
    # The description may name the pin (an install example): the headers are what count.
    told = "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.24.0\nRequires-Dist: torch\n\n"
    told += "pip install torch==2.9.0+rocm5.2.3\n"
    p = plan({"torchvision/_C.so": lib("c", "libtorch_hip.so")}, **tv, metadata=told)
    assert p.requires == ("torch==2.9.0+rocm5.2.3",)


def test_newer_glibc_lowers_the_tag() -> None:
    new = (("libc.so.6", ("GLIBC_2.34",)),)
    p = plan({"ext/_k.so": lib("k", "libc.so.6", versions=new)}, dlopen_patterns=())
    assert p.platform_tag == "manylinux_2_34_x86_64"
    with pytest.raises(BundleError, match="manylinux_2_34"):
        plan({"ext/_k.so": lib("k", "libc.so.6", versions=new)}, policy="manylinux_2_28")
    private = (("libc.so.6", ("GLIBC_PRIVATE",)),)
    assert plan({"ext/_k.so": lib("k", "libc.so.6", versions=private)}).platform_tag == (
        "linux_x86_64"
    )


@pytest.mark.parametrize(
    ("lib_dir", "tree", "dest"),
    [
        ("torch/lib", "lib/rocblas/library", "torch/lib/rocblas/library"),
        ("torch/lib", "share/miopen/db", "torch/share/miopen/db"),
        ("torchvision", "share/libdrm/amdgpu.ids", "torchvision/share/libdrm/amdgpu.ids"),
    ],
)
def test_data_destination(lib_dir: str, tree: str, dest: str) -> None:
    assert data_destination(lib_dir, tree) == dest


def test_gfx_tokens_and_inside() -> None:
    assert gfx_tokens("Kernels.so-000-gfx90a-xnack-.hsaco") == {"gfx90a"}
    assert gfx_tokens("TensileLibrary_lazy_gfx1030.dat") == {"gfx1030"}
    assert gfx_tokens("TensileManifest.txt") == set()
    assert inside("torch/lib", "$ORIGIN/../share")
    assert not inside("torch", "$ORIGIN/../..")
    assert not inside("torch", "/opt/rocm/lib")


def test_dlopen_by_another_name_adds_a_copy_under_it() -> None:
    """comgr is asked for by its unversioned name: an alias goes in under it; a name nobody
    holds as a string (the real file name) and one the wheel already has do not."""
    index = TreeIndex(
        rocm=ROCM.rocm,
        links={
            "libamd_comgr.so.2": ("libamd_comgr.so", "libamd_comgr.so.2", "libamd_comgr.so.2.4")
        },
        strings={"hip": frozenset({"libamd_comgr.so", "libc.so.6"})},
    )
    ext = {"ext/_k.so": lib("k", "libamdhip64.so.5")}
    (comgr,) = [x for x in plan(ext, index=index).libraries if x.name == "libamd_comgr.so.2"]
    assert comgr.aliases == ("libamd_comgr.so",)
    assert plan(ext, index=index).as_json()["libraries"][0]["aliases"] == ["libamd_comgr.so"]
    # the wheel already carries a file by that name: no copy
    ext2 = {**ext, "ext/lib/libamd_comgr.so": lib("own", soname="libamd_comgr.so")}
    (comgr2,) = [x for x in plan(ext2, index=index).libraries if x.name == "libamd_comgr.so.2"]
    assert comgr2.aliases == ()
    # a NEEDED library asked for by its bare name too (rocSHMEM's dlopen("libnuma.so"))
    index.links["libnuma.so.1"] = ("libnuma.so", "libnuma.so.1")
    index.strings["k"] = frozenset({"libnuma.so"})
    (numa,) = [x for x in plan(ext, index=index).libraries if x.name == "libnuma.so.1"]
    assert (numa.reason, numa.aliases) == ("needed", ("libnuma.so",))
    # without a soname the stub would have nothing to NEED: no alias
    index.rocm["libnuma.so.1"] = lib("numa", "libc.so.6")
    (numa,) = [x for x in plan(ext, index=index).libraries if x.name == "libnuma.so.1"]
    assert numa.aliases == ()


def test_glibc_past_auditwheels_newest_policy_is_still_manylinux() -> None:
    # PEP 600: manylinux_2_N means glibc 2.N. A root with a newer glibc than auditwheel's newest
    # policy (Debian sid: 2.42) gets that tag, not linux_x86_64 (the name of the wheel it was
    # built as, which the fat wheel would then overwrite).
    newest = max(
        int(p["name"].rsplit("_", 1)[-1])
        for p in bundle_policy._policies()
        if p["name"].startswith("manylinux_2_")
    )
    past = f"GLIBC_2.{newest + 1}"
    new = (("libc.so.6", ("GLIBC_2.4", past)), ("libstdc++.so.6", ("GLIBCXX_3.4.30",)))
    p = plan({"ext/_k.so": lib("k", "libc.so.6", "libstdc++.so.6", versions=new)})
    assert p.platform_tag == f"manylinux_2_{newest + 1}_x86_64"
    # Still linux_x86_64: a newer C++ runtime than the newest policy allows, or a private glibc
    # symbol.
    cxx = (("libc.so.6", (past,)), ("libstdc++.so.6", ("GLIBCXX_3.4.99",)))
    assert plan({"ext/_k.so": lib("k", "libc.so.6", versions=cxx)}).platform_tag == ("linux_x86_64")
    private = (("libc.so.6", (past, "GLIBC_PRIVATE")),)
    assert plan({"ext/_k.so": lib("k", "libc.so.6", versions=private)}).platform_tag == (
        "linux_x86_64"
    )


def test_excluded_library_stays_needed_and_brings_nothing_in() -> None:
    """--exclude: the library is not bundled, nor what only it needs (HSA, numa), nor the
    libraries ROCm dlopens (nothing of ROCm is in the wheel); it is recorded with who needs it."""
    ext = {"ext/_k.so": lib("k", "libamdhip64.so.5", "libc.so.6")}
    p = plan(ext, exclude=("libamdhip64.so.*",))
    assert p.libraries == ()
    assert p.excluded == (("libamdhip64.so.5", ("ext/_k.so",)),)
    assert p.as_json()["excluded"] == [{"name": "libamdhip64.so.5", "needed_by": ["ext/_k.so"]}]
    assert p.platform_tag.startswith("manylinux_")  # as auditwheel: not counted against it
    # a dependency something else needs still comes
    both = {**ext, "ext/_n.so": lib("n", "libnuma.so.1")}
    p = plan(both, exclude=("libamdhip64.so.5",))
    names = {x.name for x in p.libraries}
    assert "libnuma.so.1" in names
    assert not names & {"libamdhip64.so.5", "libhsa-runtime64.so.1"}
    # excluding a dependency leaves the rest of the closure
    p = plan(ext, exclude=("libhsa-runtime64.so.1",))
    assert {x.name for x in p.libraries} == {"libamdhip64.so.5", "libamd_comgr.so.2"}
    assert p.excluded == (("libhsa-runtime64.so.1", ("ext/lib/libamdhip64.so.5",)),)
    # a dlopened library can be excluded too
    p = plan(ext, exclude=("libamd_comgr.so*",))
    assert "libamd_comgr.so.2" not in {x.name for x in p.libraries}


def test_requested_plat() -> None:
    old = (("libc.so.6", ("GLIBC_2.2.5",)),)
    ext = {"ext/_k.so": lib("k", "libc.so.6", versions=old)}
    # a newer tag than needed is allowed; with or without the architecture; aliases kept
    assert plan(ext, policy="manylinux_2_28_x86_64").platform_tag == "manylinux_2_28_x86_64"
    assert plan(ext, policy="manylinux2014").platform_tag == (
        "manylinux_2_17_x86_64.manylinux2014_x86_64"
    )
    # past auditwheel's newest policy: PEP 600's tag
    assert plan(ext, policy="manylinux_2_99").platform_tag == "manylinux_2_99_x86_64"
    new = (("libc.so.6", ("GLIBC_2.34",)),)
    with pytest.raises(BundleError, match=r"need glibc 2\.34 .*pass --plat manylinux_2_34_x86_64"):
        plan({"ext/_k.so": lib("k", "libc.so.6", versions=new)}, policy="manylinux_2_28_x86_64")
    with pytest.raises(ConfigError, match="is for aarch64"):
        plan(ext, policy="manylinux_2_28_aarch64")
