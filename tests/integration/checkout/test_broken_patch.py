"""A patch file that git cannot even parse stops the checkout like a conflict does (exit 7),
and the message names that file and why: empty, no diff in it, or git's own reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Runner, Upstream, git, make_patch

BROKEN = """\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: Dev <dev@example.invalid>
Date: Mon, 1 Jan 2024 00:00:00 +0000
Subject: [PATCH] Edit main

---
@@ -1,3 +1,3 @@
 int main(void) {
-  return 1;
+  return 2;
 }
--
"""


def test_unparsable_patch_is_exit_7_with_gits_reason(rb: Runner, work: Path) -> None:
    series = work / "patches" / "mine" / "proj" / "base"
    series.mkdir(parents=True)
    (series / "0001-Edit-main.patch").write_text(BROKEN)
    result = rb("checkout", "proj", "--patchset", "mine", "--no-hipify", ok=False)
    assert result.returncode == 7, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert "0001-Edit-main.patch does not apply to proj: git says: " in line, line
    assert "conflicts in (" not in line
    assert not (work / "src" / "proj" / ".git" / "rebase-apply").exists()


def _series_with(work: Path, upstream: Upstream, name: str, text: str) -> Path:
    """A real series 0001, 0003 with ``text`` as 0002 between them."""
    root = work / "patches" / "mine" / "proj" / "base"
    make_patch(
        upstream.proj_url,
        upstream.commits["v1.1"],
        root / "0001-readme.patch",
        {"README.md": "proj, patched\n"},
        "readme",
    )
    (root / name).write_text(text)
    make_patch(
        upstream.proj_url,
        upstream.commits["v1.1"],
        root / "0003-news.patch",
        {"NOTES": "notes\n"},
        "notes",
    )
    return root / name


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("rocm-build: error:")]
    return line


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "is empty"),
        ("\n  \n", "is empty"),
        ("this is not a patch at all\njust words\n", "is not a patch: it holds no diff"),
    ],
)
def test_empty_or_garbage_patch_names_that_file_and_why(
    rb: Runner, work: Path, upstream: Upstream, text: str, why: str
) -> None:
    bad = _series_with(work, upstream, "0002-bad.patch", text)
    res = rb("checkout", "proj", "--patchset", "mine", "--no-hipify", ok=False)
    assert res.returncode == 7, res.stderr
    line = _error_line(res.stderr)
    assert f"patch {bad} {why}" in line, line
    assert "0001-readme.patch" not in line
    assert "0003-news.patch" not in line
    src = work / "src" / "proj"
    # Nothing of the series stays: the repository is as before the series.
    assert git(src, "rev-parse", "HEAD") == upstream.commits["v1.1"]
    assert git(src, "status", "--porcelain") == ""
    assert not (src / ".git" / "rebase-apply").exists()
    # Removing the file lets the next run finish without --force.
    bad.unlink()
    rb("checkout", "proj", "--patchset", "mine", "--no-hipify")
    assert (src / "NOTES").read_text() == "notes\n"


def test_two_patches_in_one_file_name_the_right_file(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    """git am counts mails, not files: a file holding two patches must not shift the blame."""
    root = work / "patches" / "mine" / "proj" / "base"
    first = make_patch(
        upstream.proj_url,
        upstream.commits["v1.1"],
        root / "0001-two.patch",
        {"README.md": "proj, patched\n"},
        "readme",
    )
    second = make_patch(
        upstream.proj_url,
        upstream.commits["v1.1"],
        root / "0001b.tmp",
        {"NOTES": "notes\n"},
        "notes",
    )
    first.write_text(first.read_text() + second.read_text())
    second.unlink()
    (root / "0002-broken.patch").write_text(BROKEN)
    res = rb("checkout", "proj", "--patchset", "mine", "--no-hipify", ok=False)
    assert res.returncode == 7, res.stderr
    line = _error_line(res.stderr)
    assert "0002-broken.patch does not apply to proj: git says: " in line, line
    assert "git says: ;" not in line, line
