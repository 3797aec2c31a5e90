"""`rocm-build checkout` and `save-patches` against real repositories served over file://."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    FILLER,
    KERNEL,
    Runner,
    Upstream,
    commit_files,
    git,
    make_patch,
    run_without_identity,
    write_config,
)

FILLER_HIP = "// kernel\n" + FILLER
REPOS = (".", "libs/sub1", "libs/sub1/third_party/nested", "libs/sub2")


def manifest(work: Path, src: str = "src") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((work / src / "rocm-build-sources.json").read_text())
    return data


def tag(repo: Path, name: str) -> str:
    return git(repo, "rev-parse", f"refs/tags/{name}^{{commit}}")


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD")


def trees(src: Path) -> dict[str, str]:
    return {r: git(src / r, "rev-parse", "HEAD^{tree}") for r in REPOS}


# --- refs ---------------------------------------------------------------------------------------


def test_tag_checkout_tags_hipifies_and_writes_manifest(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    res = rb("checkout", "proj")
    assert "proj: checked out v1.1" in res.stdout
    src = work / "src" / "proj"
    assert tag(src, "ROCM_BUILD_UPSTREAM") == upstream.commits["v1.1"]
    # Every submodule, nested included, is checked out at the recorded commit and tagged.
    assert tag(src / "libs/sub1", "ROCM_BUILD_UPSTREAM") == upstream.commits["sub1_2"]
    assert (
        tag(src / "libs/sub1/third_party/nested", "ROCM_BUILD_UPSTREAM")
        == (upstream.commits["nested1"])
    )
    assert tag(src / "libs/sub2", "ROCM_BUILD_UPSTREAM") == upstream.commits["sub2_1"]
    # hipify really ran and its result is one commit in each repository it changed.
    assert "USE_HIP" in (src / "src/config.h").read_text()
    assert "hipLaunch" in (src / "src/kernel.hip").read_text()
    assert (src / "libs/sub1/sub1.hip").is_file()
    for repo in (src, src / "libs/sub1"):
        assert tag(repo, "ROCM_BUILD_HIPIFY") == head(repo)
        assert git(repo, "rev-parse", "HEAD~1") == tag(repo, "ROCM_BUILD_UPSTREAM")
    sub2 = src / "libs/sub2"
    assert tag(sub2, "ROCM_BUILD_HIPIFY") == tag(sub2, "ROCM_BUILD_UPSTREAM") == head(sub2)
    assert git(src, "status", "--porcelain") == ""
    assert (work / ".rocm-build/logs/checkout-proj-hipify.log").read_text().count("hipified 2")
    # Only the ref was fetched: no other tags or branches.
    assert git(src, "tag", "--list", "v1.0") == ""
    entry = manifest(work)["projects"]["proj"]
    assert entry["origin"] == upstream.proj_url
    assert entry["ref"] == "v1.1"
    assert entry["commit"] == upstream.commits["v1.1"]
    assert entry["hipify"] is True
    assert [s["path"] for s in entry["submodules"]] == [
        "libs/sub1",
        "libs/sub1/third_party/nested",
        "libs/sub2",
    ]


def test_branch_ref_follows_a_moving_branch(rb: Runner, work: Path, upstream: Upstream) -> None:
    rb("checkout", "proj", "--ref", "proj=release/1", "--no-hipify")
    src = work / "src/proj"
    assert head(src) == upstream.commits["v1.1"]
    again = rb("checkout", "proj", "--ref", "proj=release/1", "--no-hipify")
    assert "up to date" in again.stdout
    git(upstream.proj, "checkout", "-q", "release/1")
    moved = commit_files(upstream.proj, {"fix.txt": "fix\n"}, "proj: fix on release/1")
    git(upstream.proj, "checkout", "-q", "main")
    res = rb("checkout", "proj", "--ref", "proj=release/1", "--no-hipify")
    assert "updated" in res.stdout
    assert head(src) == moved == tag(src, "ROCM_BUILD_UPSTREAM")


def test_full_sha_ref(rb: Runner, work: Path, upstream: Upstream) -> None:
    sha = upstream.commits["v1.0"]
    rb("checkout", "proj", "--ref", f"proj={sha}", "--no-hipify")
    src = work / "src/proj"
    assert head(src) == sha
    assert not (src / "libs/sub1/.git").exists()  # v1.0 has no submodules yet
    assert manifest(work)["projects"]["proj"]["ref_kind"] == "commit"


def test_unknown_ref_is_a_config_error(rb: Runner, work: Path) -> None:
    res = rb("checkout", "proj", "--ref", "proj=v9.9", ok=False)
    assert res.returncode == 2
    assert "ref 'v9.9' is not a branch, tag or full commit SHA" in res.stderr
    assert not (work / "src/proj").exists()


def test_depth_one_with_submodules(rb: Runner, work: Path, upstream: Upstream) -> None:
    rb("checkout", "proj", "--depth", "1", "--jobs", "2")
    src = work / "src/proj"
    assert git(src, "rev-parse", "--is-shallow-repository") == "true"
    assert git(src, "rev-list", "--count", "ROCM_BUILD_UPSTREAM") == "1"
    assert head(src / "libs/sub1/third_party/nested") == upstream.commits["nested1"]
    assert tag(src / "libs/sub1", "ROCM_BUILD_UPSTREAM") == upstream.commits["sub1_2"]
    assert git(src / "libs/sub1", "rev-parse", "--is-shallow-repository") == "true"


def test_fetch_failure_is_one_line_with_the_url(rb: Runner, work: Path, tmp_path: Path) -> None:
    missing = (tmp_path / "nowhere").as_uri()
    res = rb("checkout", "proj", "--origin", f"proj={missing}", ok=False)
    assert res.returncode == 5
    error = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(error) == 1
    assert missing in error[0]
    assert "after 2 attempt(s)" in error[0]
    assert not (work / "src/proj").exists()


# --- patches ------------------------------------------------------------------------------------


def _series(work: Path, up: Upstream) -> Path:
    """A base and a hipified series for the root and for the sub1 submodule."""
    root = work / "patches/test/proj"
    make_patch(
        up.proj_url,
        up.commits["v1.1"],
        root / "base/0001-main-returns-2.patch",
        {"src/main.c": "int main(void) {\n  return 2;\n}\n"},
        "main returns 2",
    )
    make_patch(
        up.proj_url,
        up.commits["v1.1"],
        root / "base/0002-kernel-comment.patch",
        {"src/kernel.cu": KERNEL.replace("// kernel\n", "// kernel, patched\n")},
        "kernel comment",
    )
    make_patch(
        up.proj_url,
        up.commits["v1.1"],
        root / "hipified/0001-tune-hip-kernel.patch",
        {"src/kernel.hip": FILLER_HIP + "void launch() { hipLaunch(); /* tuned */ }\n"},
        "tune hip kernel",
        hipify=True,
    )
    sub1 = (up.sub1).as_uri()
    make_patch(
        sub1,
        up.commits["sub1_2"],
        root / "libs/sub1/base/0001-sub1-returns-2.patch",
        {"sub1.cu": "// sub1 kernel using cuda\nint sub1_cuda() { return 2; }\n"},
        "sub1 returns 2",
    )
    return root


def test_base_and_hipified_series_in_root_and_submodule(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    root = _series(work, upstream)
    res = rb("checkout", "proj", "--patchset", "test")
    assert "patches: 2 ./base, 1 ./hipified, 1 libs/sub1/base" in res.stdout
    src = work / "src/proj"
    subjects = git(src, "log", "--format=%s", "ROCM_BUILD_UPSTREAM..HEAD").splitlines()
    assert subjects == [
        "tune hip kernel",
        "rocm-build: hipify result (generated; do not submit)",
        "kernel comment",
        "main returns 2",
    ]
    assert "/* tuned */" in (src / "src/kernel.hip").read_text()
    assert "return 2" in (src / "src/main.c").read_text()
    sub1 = src / "libs/sub1"
    assert git(sub1, "log", "--format=%s", "-3").splitlines() == [
        "rocm-build: hipify result (generated; do not submit)",
        "sub1 returns 2",
        "sub1: add nested",
    ]
    # base ran before hipify: the hipified copy carries the patched source.
    assert "return 2" in (sub1 / "sub1.hip").read_text()
    entry = manifest(work)["projects"]["proj"]
    files = {p["file"]: p["sha256"] for p in entry["patches"]}
    assert set(files) == {
        "base/0001-main-returns-2.patch",
        "base/0002-kernel-comment.patch",
        "hipified/0001-tune-hip-kernel.patch",
        "libs/sub1/base/0001-sub1-returns-2.patch",
    }
    import hashlib

    data = (root / "base/0001-main-returns-2.patch").read_bytes()
    assert files["base/0001-main-returns-2.patch"] == hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_conflicting_patch_restores_the_repo(rb: Runner, work: Path, upstream: Upstream) -> None:
    root = work / "patches/test/proj"
    make_patch(
        upstream.sub1.as_uri(),
        upstream.commits["sub1_2"],
        root / "libs/sub1/base/0001-fine.patch",
        {"extra.txt": "fine\n"},
        "a patch that applies",
    )
    # Made against a different sub1 line: conflicts with the pinned content.
    make_patch(
        upstream.sub1.as_uri(),
        upstream.commits["sub1_2"],
        root / "libs/sub1/base/0002-conflict.patch",
        {"sub1.cu": "// sub1 kernel using cuda\nint sub1_cuda() { return 3; }\n"},
        "will conflict",
    )
    patch = root / "libs/sub1/base/0002-conflict.patch"
    patch.write_text(patch.read_text().replace("return 1;", "return 7;"))
    res = rb("checkout", "proj", "--patchset", "test", ok=False)
    assert res.returncode == 7, res.stderr
    message = " ".join(res.stderr.split())
    assert "0002-conflict.patch" in message
    assert "submodule libs/sub1 of proj" in message
    assert "sub1.cu" in message
    sub1 = work / "src/proj/libs/sub1"
    assert head(sub1) == tag(sub1, "ROCM_BUILD_UPSTREAM")  # 0001 was rolled back too
    assert git(sub1, "status", "--porcelain") == ""
    gitdir = Path(git(sub1, "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "rebase-apply").exists()
    assert not (work / "src/proj/.git/rebase-apply").exists()
    # Fixing the series lets the next run redo the project without --force.
    patch.unlink()
    rb("checkout", "proj", "--patchset", "test")
    assert (sub1 / "extra.txt").read_text() == "fine\n"


@pytest.mark.slow
def test_save_patches_round_trip(rb: Runner, work: Path, upstream: Upstream) -> None:
    _series(work, upstream)
    rb("checkout", "proj", "--patchset", "test")
    src = work / "src/proj"
    # The developer loop: commit in the root and in a submodule, then save.
    commit_files(src, {"src/new.c": "int added;\n"}, "add new.c")
    commit_files(src / "libs/sub2", {"sub2.txt": "sub2 line 1\nchanged\n"}, "change sub2")
    commit_files(src / "libs/sub1/third_party/nested", {"nested.txt": "patched\n"}, "patch nested")
    res = rb("save-patches", "proj", "--patchset", "mine")
    assert "proj: saved" in res.stdout
    saved = work / "patches/mine/proj"
    names = sorted(p.relative_to(saved).as_posix() for p in saved.rglob("*.patch"))
    assert names == [
        "base/0001-main-returns-2.patch",
        "base/0002-kernel-comment.patch",
        "hipified/0001-tune-hip-kernel.patch",
        "hipified/0002-add-new.c.patch",
        "libs/sub1/base/0001-sub1-returns-2.patch",
        "libs/sub1/third_party/nested/hipified/0001-patch-nested.patch",
        "libs/sub2/hipified/0001-change-sub2.patch",
    ]
    text = (saved / "hipified/0002-add-new.c.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "rocm-build: hipify" not in "".join(p.read_text() for p in saved.rglob("*.patch"))
    # Nothing new: byte-identical, timestamps untouched.
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in saved.rglob("*.patch")}
    again = rb("save-patches", "proj", "--patchset", "mine")
    assert "unchanged" in again.stdout
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in saved.rglob("*.patch")} == before
    # A fresh checkout of the saved patchset gives the same trees everywhere.
    rb("checkout", "proj", "--patchset", "mine", "--src-dir", "fresh")
    assert trees(work / "fresh/proj") == trees(src)
    # The checkout now equals upstream + the saved series: a re-run is up to date.
    assert "up to date" in rb("checkout", "proj", "--patchset", "mine").stdout
    # Dropping the only commit of a repository removes its series.
    git(src / "libs/sub2", "reset", "-q", "--hard", "ROCM_BUILD_HIPIFY")
    rb("save-patches", "proj", "--patchset", "mine")
    assert not (saved / "libs/sub2").exists()
    assert (saved / "libs/sub1/base/0001-sub1-returns-2.patch").read_bytes() == (
        before[saved / "libs/sub1/base/0001-sub1-returns-2.patch"][0]
    )


def test_save_patches_without_hipify_puts_everything_in_base(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    rb("checkout", "proj", "--no-hipify")
    src = work / "src/proj"
    commit_files(src, {"a.txt": "a\n"}, "first change")
    commit_files(src, {"b.txt": "b\n"}, "second change")
    rb("save-patches", "proj", "--patchset", "plain")
    saved = work / "patches/plain/proj"
    assert sorted(p.name for p in saved.rglob("*.patch")) == [
        "0001-first-change.patch",
        "0002-second-change.patch",
    ]
    assert all(p.parent.name == "base" for p in saved.rglob("*.patch"))
    # Removing every commit removes the project's series folder.
    git(src, "reset", "-q", "--hard", "ROCM_BUILD_UPSTREAM")
    res = rb("save-patches", "proj", "--patchset", "plain")
    assert "series removed" in res.stdout
    assert not saved.exists()


# --- re-runs and refusals -----------------------------------------------------------------------


@pytest.mark.slow
def test_rerun_on_unchanged_inputs_is_a_no_op(rb: Runner, work: Path, upstream: Upstream) -> None:
    _series(work, upstream)
    rb("checkout", "proj", "--patchset", "test")
    src = work / "src/proj"
    files = [work / "src/rocm-build-sources.json", src / "src/kernel.hip", src / ".git/index"]
    before = {f: f.stat().st_mtime_ns for f in files}
    heads = {r: head(src / r) for r in REPOS}
    # With the origin gone, a re-run of a tag still works: it fetches nothing.
    upstream.root.rename(upstream.root.with_name("upstream-away"))
    res = rb("--json", "checkout", "proj", "--patchset", "test")
    out = json.loads(res.stdout)
    assert out["up_to_date"] is True
    assert out["projects"][0]["action"] == "up to date"
    assert {r: head(src / r) for r in REPOS} == heads
    assert {f: f.stat().st_mtime_ns for f in files} == before
    human = rb("checkout", "proj", "--patchset", "test")
    assert "sources are up to date" in human.stdout


@pytest.mark.slow
def test_changed_patch_series_redoes_the_project(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    root = _series(work, upstream)
    rb("checkout", "proj", "--patchset", "test")
    (root / "hipified/0001-tune-hip-kernel.patch").unlink()
    res = rb("checkout", "proj", "--patchset", "test")
    assert "updated" in res.stdout
    src = work / "src/proj"
    assert "/* tuned */" not in (src / "src/kernel.hip").read_text()
    assert head(src) == tag(src, "ROCM_BUILD_HIPIFY")


def test_dirty_tree_is_refused(rb: Runner, work: Path) -> None:
    rb("checkout", "proj", "--no-hipify")
    src = work / "src/proj"
    (src / "libs/sub2/sub2.txt").write_text("my work\n")
    res = rb("checkout", "proj", "--no-hipify", "--ref", "proj=v1.0", ok=False)
    assert res.returncode == 6
    message = " ".join(res.stderr.split())
    assert "uncommitted changes (libs/sub2/sub2.txt)" in message
    assert "save-patches proj" in message
    assert "--force" in message
    assert (src / "libs/sub2/sub2.txt").read_text() == "my work\n"
    rb("checkout", "proj", "--no-hipify", "--ref", "proj=v1.0", "--force")
    assert git(src, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (src / "libs").exists()


@pytest.mark.slow
def test_foreign_commits_are_refused_until_saved(rb: Runner, work: Path) -> None:
    rb("checkout", "proj")
    src = work / "src/proj"
    commit_files(src / "libs/sub1", {"mine.txt": "mine\n"}, "my commit")
    res = rb("checkout", "proj", "--patchset", "other", ok=False)
    assert res.returncode == 6
    assert "not from the patch series (in libs/sub1)" in " ".join(res.stderr.split())
    rb("save-patches", "proj", "--patchset", "other")
    rb("checkout", "proj", "--patchset", "other")
    assert (src / "libs/sub1/mine.txt").read_text() == "mine\n"


# --- manifest replay, related_commits, config errors ---------------------------------------------


@pytest.mark.slow
def test_manifest_replay_reproduces_commits_and_patches(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    _series(work, upstream)
    rb("checkout", "proj", "--ref", "proj=release/1", "--patchset", "test")
    saved = work / "pinned.json"
    shutil.copy(work / "src/rocm-build-sources.json", saved)
    git(upstream.proj, "checkout", "-q", "release/1")
    commit_files(upstream.proj, {"later.txt": "later\n"}, "proj: later")
    git(upstream.proj, "checkout", "-q", "main")
    rb("checkout", "--manifest", str(saved), "--src-dir", "replay")
    assert trees(work / "replay/proj") == trees(work / "src/proj")
    entry = manifest(work, "replay")["projects"]["proj"]
    assert entry["commit"] == upstream.commits["v1.1"]
    # A patch that changed since the manifest was written is refused.
    patch = work / "patches/test/proj/base/0001-main-returns-2.patch"
    patch.write_text(patch.read_text() + "\n")
    res = rb("checkout", "--manifest", str(saved), "--src-dir", "replay2", ok=False)
    assert res.returncode == 2
    assert "differs from the manifest" in res.stderr


def test_related_commits_pin_companion_projects(rb: Runner, work: Path, upstream: Upstream) -> None:
    pinned = upstream.commits["companion1"]
    related = (
        f"ubuntu|pytorch|companion|main|{pinned}|{upstream.companion_url}\n"
        f"centos|pytorch|companion|main|{pinned}|{upstream.companion_url}\n"
    )
    v12 = commit_files(upstream.proj, {"related_commits": related}, "pin companion")
    git(upstream.proj, "tag", "v1.2")
    rb("checkout", "proj", "companion", "--ref", "proj=v1.2", "--no-hipify")
    assert head(work / "src/companion") == pinned
    assert head(work / "src/proj") == v12
    # The user's own --ref wins over the pin.
    rb("checkout", "proj", "companion", "--ref", "proj=v1.2", "--ref", "companion=main")
    assert head(work / "src/companion") == upstream.commits["companion2"]


def test_related_commits_pin_torchvision_for_torch(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    """The built-in torch/torchvision pair, with their origins moved to the fixtures."""
    pinned = upstream.commits["companion1"]
    related = f"ubuntu|pytorch|torchvision|release/0.1|{pinned}|{upstream.companion_url}\n"
    commit_files(upstream.proj, {"related_commits": related}, "pin vision")
    git(upstream.proj, "tag", "v1.2")
    res = rb(
        "checkout",
        "torch",
        "torchvision",
        "--origin",
        f"torch={upstream.proj_url}",
        "--ref",
        "torch=v1.2",
        "--no-hipify",
    )
    assert "torchvision: checked out" in res.stdout
    assert head(work / "src/torchvision") == pinned
    assert manifest(work)["projects"]["torchvision"]["origin"] == upstream.companion_url


def test_unknown_config_key(rb: Runner, work: Path, upstream: Upstream) -> None:
    write_config(work, upstream, extra="")
    config = work / "rocm-build.toml"
    config.write_text(config.read_text().replace("retries = 2", "retires = 2"))
    res = rb("checkout", "proj", ok=False)
    assert res.returncode == 2
    assert "unknown key 'retires'" in res.stderr
    assert "did you mean 'retries'" in res.stderr


def test_misspelled_project_name(rb: Runner, work: Path) -> None:
    res = rb("checkout", "torchvison", ok=False)
    assert res.returncode == 2
    assert "unknown project 'torchvison'" in res.stderr
    assert "did you mean 'torchvision'" in res.stderr
    res = rb("save-patches", "prj", ok=False)
    assert res.returncode == 2
    assert "did you mean 'proj'" in res.stderr


def test_works_without_a_git_identity(work: Path, upstream: Upstream, tmp_path: Path) -> None:
    _series(work, upstream)
    home = tmp_path / "empty-home"
    home.mkdir()
    res = run_without_identity(["checkout", "proj", "--patchset", "test"], cwd=work, home=home)
    assert res.returncode == 0, res.stderr
    src = work / "src/proj"
    assert git(src, "log", "-1", "--format=%cn <%ce>", "ROCM_BUILD_HIPIFY").startswith(
        "rocm-build <"
    )
    assert git(src, "log", "-1", "--format=%s") == "tune hip kernel"
    commit_files(src, {"z.txt": "z\n"}, "by the test")
    res = run_without_identity(["save-patches", "proj"], cwd=work, home=home)
    assert res.returncode == 0, res.stderr


def test_failing_hipify_leaves_no_partial_output(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    script = "import pathlib, sys; pathlib.Path('src/partial.hip').write_text('x'); sys.exit(3)"
    extra = (
        f'\n[projects.broken]\norigin = "{upstream.proj_url}"\nref = "v1.1"\n'
        f'hipify = ["{{python}}", "-c", "{script}"]\n'
    )
    write_config(work, upstream, extra=extra)
    res = rb("checkout", "broken", ok=False)
    assert res.returncode == 4
    assert "hipify of broken failed with exit code 3" in res.stderr
    assert "checkout-broken-hipify.log" in res.stderr
    src = work / "src/broken"
    assert not (src / "src/partial.hip").exists()
    assert git(src, "status", "--porcelain", "--untracked-files=all") == ""
    # The next run may redo it without --force (here without hipify).
    rb("checkout", "broken", "--no-hipify")
    assert head(src) == upstream.commits["v1.1"]


def test_a_folder_that_is_not_a_checkout_is_never_overwritten(rb: Runner, work: Path) -> None:
    mine = work / "src/proj/notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine\n")
    for extra in ((), ("--force",)):
        res = rb("checkout", "proj", *extra, ok=False)
        assert res.returncode == 6
        assert "is not a git checkout" in res.stderr
    assert mine.read_text() == "mine\n"
    assert sorted(p.name for p in mine.parent.iterdir()) == ["notes.txt"]


def test_series_for_a_missing_submodule_is_refused_before_any_patch(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    root = _series(work, upstream)
    stray = root / "libs/gone/base/0001-x.patch"
    stray.parent.mkdir(parents=True)
    shutil.copy(root / "libs/sub1/base/0001-sub1-returns-2.patch", stray)
    res = rb("checkout", "proj", "--patchset", "test", ok=False)
    assert res.returncode == 2
    assert "has patches for libs/gone" in res.stderr
    src = work / "src/proj"
    assert head(src) == upstream.commits["v1.1"]  # nothing applied
    assert head(src / "libs/sub1") == upstream.commits["sub1_2"]
    # Once the folder is fixed, the next run redoes the project without --force.
    shutil.rmtree(root / "libs/gone")
    rb("checkout", "proj", "--patchset", "test")
