"""The README is the front door and docs/ the manual: the README stays short and keeps the quick
start, and every section the old one-page README had still has a home (a heading in the README or
in a page of docs/). The site's own build (links, anchors, the browser) is checked in
tests/integration/ci/test_docs_site.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"

#: The sections of the manual, as the README had them before it was split into docs/.
KEY_HEADINGS = [
    "Installing",
    "Quick start",
    "Modern ROCm (6.4 from Debian sid)",
    "Configuration",
    "Sources: checkout and save-patches",
    "Building wheels",
    "Downloads before the build",
    "Triton",
    "Fat wheels: bundle and inspect",
    "As cibuildwheel's repair command",
    "The deflater: speed against size",
    "Device code for the requested targets only",
    "kpack-split trees (TheRock since 2026)",
    "Split per target",
    "Thin wheels",
    "Fat, split or thin",
    "Smoke tests and the whole pipeline",
    "CI and scaling out",
    "Guarantees",
    "What enters a wheel",
    "What is never written outside its folder",
    "What is never printed or stored",
    "Bad input",
    "Kill, Ctrl-C and the disk",
    "Build outputs in a checkout",
    "Kill and resume",
    "Two runs at once",
    "State files",
    "Exit codes",
    "Development",
]


def headings(text: str) -> set[str]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {h.strip() for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", prose, re.MULTILINE)}


def homeless(key_headings: list[str], files: list[Path]) -> list[str]:
    found: set[str] = set()
    for path in files:
        found |= headings(path.read_text(encoding="utf-8"))
    return [h for h in key_headings if h not in found]


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_every_section_of_the_manual_has_a_home() -> None:
    assert homeless(KEY_HEADINGS, _pages()) == []


def test_the_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Installing\n\n```sh\n# Triton\n```\n")
    assert homeless(["Installing", "Triton"], [page]) == ["Triton"]  # a comment in code is no home


def test_the_readme_is_a_front_door() -> None:
    """Short enough to read in ten minutes; the quick start's two commands stay in it as they
    are; every part of the manual is linked from it."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert len(text.split()) <= 2500  # about ten minutes at 250 words a minute
    assert re.search(r"^bash dev/quickstart +#", text, flags=re.MULTILINE)
    assert re.search(r"^bash dev/test +#", text, flags=re.MULTILINE)
    linked = set(re.findall(r"\]\(docs/([\w./-]+?\.md)(?:#[\w-]+)?\)", text))
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= linked


@pytest.mark.parametrize(
    "section",
    ["## Do I need it?", "## What it costs", "## Getting a ROCm tree", "## Exit codes"],
)
def test_the_readme_answers_the_first_questions(section: str) -> None:
    assert section in README.read_text(encoding="utf-8").splitlines()


def test_the_gpu_table_names_families_rocm_build_accepts() -> None:
    """Every TheRock family the README's GPU table gives is one `--arch` takes."""
    import tomllib

    defaults = tomllib.loads((REPO / "rocm_build/config/defaults.toml").read_text("utf-8"))
    families = set(defaults["targets"]["families"])
    text = README.read_text(encoding="utf-8")
    table = text.split("| GPU | gfx target | TheRock family |", 1)[1].split("\n\n", 1)[0]
    rows = [r.split("|") for r in table.splitlines()[2:]]
    assert len(rows) >= 10
    for row in rows:
        target = row[2].strip().strip("`")
        for name in re.findall(r"`([\w-]+)`", row[3]):
            assert name in families or name == target, name
            if name in families:
                assert target in defaults["targets"]["families"][name], (name, target)
