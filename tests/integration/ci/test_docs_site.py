"""The documentation site (mkdocs.yml, docs/): it builds with ``--strict`` and no warning, a
broken link or anchor fails that build, the CLI reference lists every command, and the built
site renders in a real headless browser (Chromium, driven by Playwright) without a console error.
"""

from __future__ import annotations

import functools
import os
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import pytest

from tests.conftest import REPO

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PNG = b"\x89PNG\r\n\x1a\n"
VIEWPORT = {"width": 1280, "height": 900}


def mkdocs_build(root: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the site whose mkdocs.yml is in ``root``, into ``dest``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
         "-d", str(dest)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("site")
    result = mkdocs_build(REPO, dest)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    return dest


def command_paths() -> list[str]:
    """Every command of the CLI, as ``rocm-build rocm fetch``."""
    from rocm_build.cli import cli

    def walk(cmd: click.Command, path: str, ctx: click.Context) -> Iterator[str]:
        yield path
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, f"{path} {name}", click.Context(sub, parent=ctx))

    return list(walk(cli, "rocm-build", click.Context(cli, info_name="rocm-build")))


@pytest.mark.slow
def test_the_site_builds_strict_with_every_command_in_the_reference(site: Path) -> None:
    assert (site / "index.html").is_file()
    for page in ("install", "quickstart", "building", "bundle", "exit-codes", "development"):
        assert (site / page / "index.html").is_file(), page
    reference = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    paths = command_paths()
    assert len(paths) > 15, paths
    for path in paths:
        assert f'id="{path.replace(" ", "-")}"' in reference, path
    assert "Usage: rocm-build rocm fetch [OPTIONS] URL" in reference


@pytest.mark.slow
@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ("[gone](no-such-page.md)", "'no-such-page.md', but the target is not found"),
        ("[gone](building.md#no-such-anchor)", "does not contain an anchor '#no-such-anchor'"),
        ("[cli](reference/cli.md#rocm-build-no-such-command)", "'#rocm-build-no-such-command'"),
    ],
)
def test_a_broken_link_or_anchor_fails_the_build(
    tmp_path: Path, planted: str, expected: str
) -> None:
    """The check can fail: the same site with one broken link planted does not build."""
    root = tmp_path / "copy"
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "mkdocs.yml", root / "mkdocs.yml")
    with (root / "docs" / "ci.md").open("a", encoding="utf-8") as page:
        page.write(f"\nSee {planted}.\n")
    result = mkdocs_build(root, tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert expected in output, output


# -- the headless browser ---------------------------------------------------------------------


def browser_executable() -> str:
    """A Chromium to drive: the system's (dev/setup installs Debian's `chromium`), else
    Playwright's own download."""
    pytest.importorskip("playwright", reason="playwright is in the [test] extras: bash dev/setup")
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        own = p.chromium.executable_path
    if Path(own).is_file():
        return own
    pytest.fail(
        "no Chromium for the site's browser check: apt-get install chromium (bash dev/setup "
        "does), or python -m playwright install chromium"
    )


@pytest.fixture(scope="module")
def serve() -> Iterator[Any]:
    """``serve(folder)``: the folder over HTTP on a free local port; returns its base URL."""
    servers: list[ThreadingHTTPServer] = []

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    def start(folder: Path) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=folder))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = browser_executable()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: CI runs the suite as root, where Chromium's sandbox refuses to start
        launched = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


def visit(browser: Any, url: str, shot: Path) -> tuple[list[str], Any]:
    """Load ``url``, save a screenshot to ``shot``; the console errors, uncaught exceptions,
    failed requests and HTTP errors seen, and the page (still open)."""
    page = browser.new_page(viewport=VIEWPORT)
    problems: list[str] = []
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
    page.goto(url, wait_until="networkidle")
    page.screenshot(path=str(shot))
    return problems, page


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG, path
    assert data[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.slow
def test_the_site_renders_in_a_headless_browser_without_errors(
    site: Path, serve: Any, browser: Any, tmp_path: Path
) -> None:
    base = serve(site)
    for name, url, visible in [
        ("index", base, "text=These pages are the manual"),
        ("cli", f"{base}reference/cli/#rocm-build-build", "#rocm-build-build"),
    ]:
        shot = tmp_path / f"{name}.png"
        problems, page = visit(browser, url, shot)
        assert problems == [], (name, problems)
        assert page.locator(visible).first.is_visible(), name
        page.close()
        assert png_size(shot) == (VIEWPORT["width"], VIEWPORT["height"]), name
        # a blank or unstyled page compresses to a few kB; the themed page does not
        assert shot.stat().st_size > 20_000, (name, shot.stat().st_size)


@pytest.mark.slow
def test_the_browser_check_can_fail(serve: Any, browser: Any, tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "index.html").write_text(
        "<html><body><p>broken</p><img src='missing.png'>"
        "<script>console.error('planted'); no_such_function();</script></body></html>"
    )
    problems, page = visit(browser, serve(folder), tmp_path / "broken.png")
    page.close()
    assert any(p == "console: planted" for p in problems), problems
    assert any(p.startswith("uncaught:") and "no_such_function" in p for p in problems), problems
    assert any(p.startswith("404:") and p.endswith("/missing.png") for p in problems), problems
