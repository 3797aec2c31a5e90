"""hipcc's route to the compiler cache: HIP_CLANG_LAUNCHER where the tree's hipcc reads it,
else a folder of clang wrappers as HIP_CLANG_PATH; nothing without a cache or a hipcc."""

from __future__ import annotations

from pathlib import Path

from rocm_build.building import compilercache, hiplauncher
from rocm_build.rocm import dist
from tests.support.buildplans import build_plan, project_sources


def _tree(root: Path, hipcc_text: str | None) -> dist.RocmTree:
    (root / "bin").mkdir(parents=True)
    clang_dir = root / "lib" / "llvm" / "bin"
    clang_dir.mkdir(parents=True)
    hipcc = None
    if hipcc_text is not None:
        (root / "bin" / "hipcc").write_text("#!/usr/bin/perl\nexec hipcc.pl\n")
        (root / "bin" / "hipcc.pl").write_text(hipcc_text)
        hipcc = root / "bin" / "hipcc"
    return dist.RocmTree(root, "therock", "5.2.3", "test", clang_dir, hipcc, None, None, ())


def _ccache() -> compilercache.CompilerCache:
    return compilercache.plan_cache("ccache", Path("/x/ccache"), compilercache.ToolInfo((4, 7)))


def test_a_hipcc_that_reads_the_launcher_gets_only_the_variable(tmp_path: Path) -> None:
    tree = _tree(tmp_path, 'my $l = $ENV{"HIP_CLANG_LAUNCHER"};\n')
    launcher = hiplauncher.plan_launcher(_ccache(), tree, tmp_path / "work")
    assert launcher is not None
    assert launcher.route == "HIP_CLANG_LAUNCHER"
    assert launcher.env == {}
    assert _ccache().env["HIP_CLANG_LAUNCHER"] == "/x/ccache"


def test_an_older_hipcc_runs_clang_from_the_wrappers_folder(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '$HIPCC = "$HIP_CLANG_PATH/clang-15";\n')
    launcher = hiplauncher.plan_launcher(_ccache(), tree, tmp_path / "work")
    assert launcher is not None
    assert launcher.route == "HIP_CLANG_PATH"
    assert launcher.env == {"HIP_CLANG_PATH": str(tmp_path / "work/hip-clang/ccache/bin")}


def test_no_route_without_a_cache_or_a_hipcc(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "a", "")
    assert hiplauncher.plan_launcher(compilercache.CompilerCache("none"), tree, tmp_path) is None
    assert hiplauncher.plan_launcher(_ccache(), _tree(tmp_path / "b", None), tmp_path) is None


def test_wrappers_run_the_real_clang_through_the_cache(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "rocm", "")
    assert tree.clang_dir is not None
    for name in ("clang", "clang++", "clang-15", "lld"):
        (tree.clang_dir / name).write_text("")
    launcher = hiplauncher.plan_launcher(_ccache(), tree, tmp_path / "work")
    assert launcher is not None
    assert launcher.folder is not None
    hiplauncher.write(launcher)
    hiplauncher.write(launcher)  # again: made anew
    script = (launcher.folder / "clang-15").read_text()
    assert script.endswith(f'exec /x/ccache {tree.clang_dir / "clang-15"} "$@"\n')
    assert (launcher.folder / "lld").resolve() == tree.clang_dir / "lld"
    assert (launcher.folder.parent / "lib").resolve() == tree.clang_dir.parent / "lib"


def test_the_users_launcher_and_hip_compiler_are_kept(tmp_path: Path) -> None:
    """dist clears HIP_* and HIPCXX (another setup's); these two are the user's choices."""
    cfg, src = project_sources(tmp_path)
    env = {"PATH": "/usr/bin", "HIP_CLANG_LAUNCHER": "/u/sccache", "HIPCXX": "/u/clang++"}
    env["HIP_PATH"] = "/opt/other-rocm"
    ours = _ccache().env
    torch, _ = build_plan(cfg, src, tmp_path, env=env, cache="ccache", cache_env=ours).steps
    assert torch.env["HIP_CLANG_LAUNCHER"] == "/u/sccache"
    assert torch.env["HIPCXX"] == "/u/clang++"
    assert "HIP_CLANG_LAUNCHER" not in torch.changed
    assert torch.removed == ("HIP_PATH",)
    assert torch.env["CMAKE_CXX_COMPILER_LAUNCHER"] == "/x/ccache"
    none, _ = build_plan(cfg, src, tmp_path / "2", cache="ccache", cache_env=ours).steps
    assert none.env["HIP_CLANG_LAUNCHER"] == "/x/ccache"
