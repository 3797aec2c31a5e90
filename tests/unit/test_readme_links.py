"""The README links only inside the repository: every link is a file of the repository (or a
heading in one), so a clone has everything its README points to."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
AUTOLINK = re.compile(r"<((?:https?|ftp|file|mailto):[^>\s]+)>")
UP_AND_OUT = re.compile(r"(?<![\w./-])\.\./[\w./-]+")  # ../shared/DESIGN.md, as text or code


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def links(text: str) -> list[str]:
    prose = _without_code_blocks(text)
    return [*INLINE.findall(prose), *REFERENCE.findall(prose), *AUTOLINK.findall(prose)]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _without_code_blocks(path.read_text(encoding="utf-8"))
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.MULTILINE)}


def problems(readme: Path, repo: Path) -> list[str]:
    text = readme.read_text(encoding="utf-8")
    found = [f"{m}: a path outside the repository" for m in UP_AND_OUT.findall(text)]
    for target in links(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            found.append(f"{target}: a link outside the repository")
            continue
        file_part, _, anchor = target.partition("#")
        path = (readme.parent / file_part).resolve() if file_part else readme
        if not path.is_relative_to(repo.resolve()):
            found.append(f"{target}: outside the repository")
        elif not path.exists():
            found.append(f"{target}: no such file in the repository")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            found.append(f"{target}: no heading #{anchor} in {path.name}")
    return found


def test_the_readme_links_only_inside_the_repository() -> None:
    assert problems(README, REPO) == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("See [the design](../shared/DESIGN.md).", "outside the repository"),
        ("`../shared/DESIGN.md` gives the architecture.", "a path outside the repository"),
        ("See [PyTorch](https://pytorch.org).", "a link outside the repository"),
        ("<https://example.com/x>", "a link outside the repository"),
        ("[ref]: http://example.com", "a link outside the repository"),
        ("[gone](docs/nothing-here.md)", "no such file"),
        ("[bad anchor](#no-such-heading)", "no heading #no-such-heading"),
    ],
)
def test_the_check_can_fail(tmp_path: Path, line: str, expected: str) -> None:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "design.md").write_text("# Design\n")
    readme = repo / "README.md"
    good = "# Title\n\n## A heading\n\n[ok](docs/design.md#design) [a](#a-heading)\n"
    readme.write_text(good)
    assert problems(readme, repo) == []
    readme.write_text(f"{good}{line}\n")
    found = problems(readme, repo)
    assert any(expected in f for f in found), found
