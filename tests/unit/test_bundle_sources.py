"""Where a bundle's files may come from: tree paths that stay inside the tree, libraries from the
build machine, one copy per file (pure planning, and symlinks in a temporary folder)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocm_build.binary.elf import ElfInfo
from rocm_build.bundle.data import select_data
from rocm_build.bundle.libraries import Candidate, LibraryIndex, system_lib_dirs
from rocm_build.bundle.model import BundleResult
from rocm_build.bundle.platforms import plan_lines
from rocm_build.common.errors import BundleError
from rocm_build.common.treepath import TreeGuard, walk_files
from tests.support.closures import ROCM, TreeIndex, lib, plan


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "rocm"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "libfoo.so.1.2").write_bytes(b"real")
    (root / "lib" / "libfoo.so.1").symlink_to("libfoo.so.1.2")
    (root / "share" / "db").mkdir(parents=True)
    (root / "share" / "db" / "a.txt").write_text("a")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.key").write_text("key")
    return root


def test_guard_allows_links_inside_the_tree(tree: Path) -> None:
    guard = TreeGuard.of(tree)
    assert guard.check(tree / "lib" / "libfoo.so.1") == (tree / "lib" / "libfoo.so.1.2").resolve()


def test_guard_names_the_link_that_leads_out(tree: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.key"
    (tree / "lib" / "libbar.so.1.0").symlink_to(secret)
    (tree / "lib" / "libbar.so.1").symlink_to("libbar.so.1.0")  # inside, then out
    with pytest.raises(BundleError) as err:
        TreeGuard.of(tree).check(tree / "lib" / "libbar.so.1")
    assert str(err.value).startswith(
        f"lib/libbar.so.1.0 in the ROCm tree is a symlink to {secret.resolve()}, outside the tree"
    )
    assert "--allow-outside DIR" in str(err.value)
    assert TreeGuard.of(tree, [tmp_path / "outside"]).check(tree / "lib" / "libbar.so.1")


def test_walk_follows_folder_links_inside_and_refuses_those_out(tree: Path, tmp_path: Path) -> None:
    db = tree / "share" / "db"
    (db / "same").symlink_to(".")  # a loop: walked once
    (tree / "share" / "more").mkdir()
    (tree / "share" / "more" / "b.txt").write_text("b")
    (db / "more").symlink_to("../more")
    guard = TreeGuard.of(tree)
    names = [p.relative_to(db).as_posix() for p in walk_files(db, guard, "data")]
    assert names == ["a.txt", "more/b.txt"]
    (db / "keys").symlink_to(tmp_path / "outside")
    with pytest.raises(BundleError, match=r"share/db/keys in the ROCm tree is a symlink to"):
        walk_files(db, guard, "data")


def test_select_data_refuses_a_data_file_that_leads_out(tree: Path, tmp_path: Path) -> None:
    ids = tree / "share" / "libdrm" / "amdgpu.ids"
    ids.parent.mkdir(parents=True)
    ids.symlink_to(tmp_path / "outside" / "secret.key")
    args = (tree, ["share/libdrm/amdgpu.ids"], "ext/lib", ["libdrm.so.2"], ())
    with pytest.raises(BundleError, match=r"share/libdrm/amdgpu\.ids in the ROCm tree"):
        select_data(*args)
    files, _ = select_data(*args, guard=TreeGuard.of(tree, [tmp_path / "outside"]))
    assert [f.arcname for f in files] == ["ext/share/libdrm/amdgpu.ids"]


def test_system_lib_dirs_honour_ld_library_path_and_ld_so_conf(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"# comment\n{second}\n")
    dirs = system_lib_dirs(env={"LD_LIBRARY_PATH": f"{first}::"}, ld_so_conf=conf)
    assert dirs[:2] == [first, second]


def test_tree_library_names_without_versions(tree: Path) -> None:
    (tree / "lib" / "libnuma.so.1").write_bytes(b"")
    (tree / "lib" / "cmake").mkdir()
    index = LibraryIndex([tree / "lib"], [])
    assert index.stems() == {"libfoo", "libnuma"}


# --- libraries from the system ---------------------------------------------------------------


SYSTEM = TreeIndex(
    rocm={k: v for k, v in ROCM.rocm.items() if k != "libhsa-runtime64.so.1"},
    system={
        "libhsa-runtime64.so.1": lib("hsa", "libc.so.6", soname="libhsa-runtime64.so.1"),
        "libtinfo.so.6": lib("tinfo", "libc.so.6", soname="libtinfo.so.6"),
    },
)


def test_rocm_library_from_the_system_stops_the_bundle() -> None:
    with pytest.raises(BundleError) as err:
        plan({"ext/_k.so": lib("k", "libamdhip64.so.5")}, index=SYSTEM,
             rocm_only=["libhsa*.so*"], tree="/t/rocm")  # fmt: skip
    text = str(err.value)
    assert text.startswith(
        "libhsa-runtime64.so.1 (needed by ext/lib/libamdhip64.so.5) is a ROCm library missing "
        "from the ROCm tree /t/rocm; the build machine's /usr/lib/libhsa-runtime64.so.1"
    )
    # listing it does not help: a ROCm library always comes from the tree
    with pytest.raises(BundleError):
        plan({"ext/_k.so": lib("k", "libamdhip64.so.5")}, index=SYSTEM,
             rocm_only=["libhsa*.so*"], system_allowed=["libhsa*"])  # fmt: skip


def test_other_system_libraries_are_listed_and_can_be_limited() -> None:
    p = plan({"ext/_k.so": lib("k", "libtinfo.so.6")}, index=SYSTEM, rocm_only=["libhsa*"])
    assert p.as_json()["from_system"] == [
        {"name": "libtinfo.so.6", "source": str(Path("/usr/lib/libtinfo.so.6").resolve())}
    ]
    lines = list(plan_lines(BundleResult("in.whl", "out", "planned", 0, p)))
    assert any("from the build machine, not the ROCm tree: libtinfo.so.6" in x for x in lines)
    with pytest.raises(BundleError, match=r"bundle\.system_libs does not list it"):
        plan({"ext/_k.so": lib("k", "libtinfo.so.6")}, index=SYSTEM, system_allowed=["libz*"])


# --- one copy per file -----------------------------------------------------------------------


@dataclass
class LinkedIndex(TreeIndex):
    """Some names are symlinks: ``find`` answers with the path of that name, which resolves to
    the real file (as ``LibraryIndex`` does on a real tree)."""

    root: Path = Path()
    link_to: dict[str, str] = field(default_factory=dict)

    def find(self, name: str, like: ElfInfo) -> Candidate | None:
        real = self.link_to.get(name, name)
        if real not in self.rocm:
            return None
        return Candidate(self.root / name, "rocm", self.rocm[real])

    def dlopen_candidates(self, patterns: object, like: ElfInfo) -> list[Candidate]:
        return [
            Candidate(self.root / n, "rocm", info)
            for n, info in self.rocm.items()
            if n.startswith("libamd_comgr")
        ]


def test_a_file_needed_and_dlopened_by_two_names_is_bundled_once(tmp_path: Path) -> None:
    (tmp_path / "libamd_comgr.so.2").write_bytes(b"comgr")
    (tmp_path / "libamd_comgr.so").symlink_to("libamd_comgr.so.2")
    (tmp_path / "libamdhip64.so.5").write_bytes(b"hip")
    index = LinkedIndex(
        rocm={
            "libamdhip64.so.5": lib("hip", "libc.so.6", soname="libamdhip64.so.5"),
            "libamd_comgr.so.2": lib("comgr", "libc.so.6", soname="libamd_comgr.so.2"),
        },
        root=tmp_path,
        link_to={"libamd_comgr.so": "libamd_comgr.so.2"},
    )
    p = plan(
        {"ext/_k.so": lib("k", "libamd_comgr.so", "libamdhip64.so.5")},
        index=index,
        dlopen_patterns=["libamd_comgr.so*"],
    )
    libs = {x.name: x for x in p.libraries}
    assert sorted(libs) == ["libamd_comgr.so.2", "libamdhip64.so.5"]
    comgr = libs["libamd_comgr.so.2"]
    assert comgr.arcname == "ext/lib/libamd_comgr.so.2"
    assert comgr.aliases == ("libamd_comgr.so",)
    assert comgr.needed_by == ("ext/_k.so",)
    assert comgr.reason == "needed"
    assert p.rpaths[0].new == "$ORIGIN/lib"
