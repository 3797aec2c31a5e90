"""A patch file that git cannot even parse stops the checkout like a conflict does (exit 7),
and the message quotes git instead of an empty list of conflicting paths."""

from __future__ import annotations

from pathlib import Path

from .conftest import Runner

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
