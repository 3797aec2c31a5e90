"""A token in a git origin or a ``--rocm`` URL is never printed or stored by rocm-build.

The origin is served over real HTTP on loopback (git's "dumb" protocol: static files that
``git update-server-info`` prepares), so a checkout with ``http://user:TOKEN@...`` succeeds and
every output can be searched for the token. Nor does it reach a command line anyone may read
(``ps``) or git's remote config of the checkout: git is given the URL without it, and the
credential as an ``Authorization`` header through its environment, which a server that demands
it checks.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from tests.support.httpserver import Server, small_tree_tarball

from .conftest import Runner, Upstream, git

TOKEN = "s3cr3t-T0ken-4711"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_root(upstream: Upstream) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` serving the upstream folder (proj's repo at /proj/.git)."""
    git(upstream.proj, "update-server-info")
    handler = functools.partial(_Quiet, directory=str(upstream.root))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


def _files_with(root: Path, needle: str) -> list[str]:
    data = needle.encode()
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and data in p.read_bytes()
    )


def _outputs(*results: object) -> str:
    return "\n".join(f"{r.stdout}\n{r.stderr}" for r in results)  # type: ignore[attr-defined]


def test_checkout_with_a_token_in_the_origin_prints_and_stores_no_token(
    rb: Runner, work: Path, http_root: str
) -> None:
    origin = f"http://builder:{TOKEN}@{http_root}/proj/.git"
    first = rb("checkout", "proj", "--origin", f"proj={origin}")
    assert "proj: checked out v1.1" in first.stdout
    # The echo of the remote commands is shown without -v: git is given no credential.
    assert f"git ls-remote -- http://{http_root}/proj/.git" in first.stderr, first.stderr
    verbose = rb("-v", "checkout", "proj", "--origin", f"proj={origin}", "--force")
    as_json = rb("--json", "checkout", "proj", "--origin", f"proj={origin}")
    data = json.loads(as_json.stdout)
    assert data["projects"][0]["origin"] == f"http://builder:***@{http_root}/proj/.git"
    assert TOKEN not in _outputs(first, verbose, as_json)
    manifest = json.loads((work / "src/rocm-build-sources.json").read_text())
    assert manifest["projects"]["proj"]["origin"] == f"http://builder:***@{http_root}/proj/.git"
    # Logs, manifest, journal, git's own remote config: nothing holds the token.
    assert _files_with(work, TOKEN) == []
    # A second run with the same origin is up to date (the masked origin is what is compared).
    again = rb("checkout", "proj", "--origin", f"proj={origin}")
    assert "up to date" in again.stdout
    # Another token for the same origin is the same source: still up to date.
    rotated = rb(
        "checkout", "proj", "--origin", f"proj=http://builder:new-{TOKEN}@{http_root}/proj/.git"
    )
    assert "up to date" in rotated.stdout


class _Guarded(_Quiet):
    """Serves only requests with the expected ``Authorization`` header (401 else); records the
    headers that came."""

    expected: ClassVar[str] = ""
    seen: ClassVar[list[str]] = []

    def _allowed(self) -> bool:
        got = self.headers.get("Authorization", "")
        self.seen.append(got)
        if got == self.expected:
            return True
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="rb"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_GET(self) -> None:
        if self._allowed():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._allowed():
            super().do_HEAD()


def _watch_command_lines(needle: bytes, stop: threading.Event, found: list[str]) -> None:
    """Read every process's command line (what ``ps`` shows anyone) until ``stop``."""
    while not stop.is_set():
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if needle in cmdline:
                found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
        time.sleep(0.005)


def test_a_token_reaches_git_through_its_environment_not_its_command_line(
    rb: Runner, work: Path, upstream: Upstream, tmp_path: Path
) -> None:
    git(upstream.proj, "update-server-info")
    basic = base64.b64encode(f"builder:{TOKEN}".encode()).decode()
    handler = type("Handler", (_Guarded,), {"expected": f"Basic {basic}", "seen": []})
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(upstream.root))
    )
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    # A git on PATH that records its arguments and the credential settings it was given.
    real = shutil.which("git")
    assert real is not None
    wrapper, log = tmp_path / "bin", tmp_path / "git.log"
    wrapper.mkdir()
    (wrapper / "git").write_text(
        "#!/bin/sh\n"
        f'{{ echo ARGV "$*"; env | grep "^GIT_CONFIG_"; }} >> "{log}"\n'
        f'exec "{real}" "$@"\n'
    )
    (wrapper / "git").chmod(0o755)
    env = {"PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}"}
    # The origin from the config file: on rocm-build's own command line anyone would see it.
    origin = f"http://builder:{TOKEN}@127.0.0.1:{httpd.server_address[1]}/proj/.git"
    config = work / "rocm-build.toml"
    config.write_text(config.read_text().replace(upstream.proj_url, origin))
    stop, seen_in_ps = threading.Event(), list[str]()
    watch = (TOKEN.encode(), stop, seen_in_ps)
    watcher = threading.Thread(target=_watch_command_lines, args=watch)
    watcher.start()
    try:
        done = rb("checkout", "proj", "--no-hipify", env=env)
    finally:
        stop.set()
        watcher.join()
        httpd.shutdown()
        httpd.server_close()
    assert "proj: checked out" in done.stdout, done.stderr
    assert seen_in_ps == []
    recorded = log.read_text()
    argv = [ln for ln in recorded.splitlines() if ln.startswith("ARGV")]
    assert any(" ls-remote " in a for a in argv)
    assert any(" fetch " in a for a in argv)
    assert TOKEN not in recorded  # no argument of any git, and not in clear in its environment
    assert f"=Authorization: Basic {basic}" in recorded  # git got it through the environment
    assert f"Basic {basic}" in handler.seen  # and sent it: the server demands it
    assert TOKEN not in git(work / "src/proj", "config", "--get", "remote.origin.url")
    assert _files_with(work, TOKEN) == ["rocm-build.toml"]  # where the user wrote it
    assert not _files_with(work, basic)


def test_manifest_with_a_masked_origin_replays_with_the_configured_one(
    rb: Runner, work: Path, http_root: str
) -> None:
    origin = f"http://builder:{TOKEN}@{http_root}/proj/.git"
    rb("checkout", "proj", "--origin", f"proj={origin}", "--no-hipify")
    recorded = work / "recorded.json"
    recorded.write_text((work / "src/rocm-build-sources.json").read_text())
    # Replay in another folder: the manifest's origin is masked; --origin supplies the token.
    res = rb(
        "checkout", "--manifest", str(recorded), "--src-dir", "replay",
        "--origin", f"proj={origin}",
    )  # fmt: skip
    assert "proj: checked out" in res.stdout, res.stderr
    assert git(work / "replay/proj", "rev-parse", "HEAD") == git(
        work / "src/proj", "rev-parse", "HEAD"
    )
    assert TOKEN not in _outputs(res)


@pytest.mark.parametrize("userinfo", [f"builder:{TOKEN}", f"ghp_{TOKEN}"])
def test_unreachable_origin_with_a_token_fails_without_showing_it(
    rb: Runner, work: Path, userinfo: str
) -> None:
    origin = f"https://{userinfo}@127.0.0.1:1/repo.git"
    results = [
        rb(*flags, "checkout", "proj", "--origin", f"proj={origin}", ok=False)
        for flags in ((), ("-v",), ("--json",), ("--debug-traceback",))
    ]
    for res in results:
        assert res.returncode == 5, res.stderr
        assert "Traceback" not in res.stderr or "--debug-traceback" in res.args
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
        assert len(errors) == 1, res.stderr
        assert "127.0.0.1:1/repo.git" in errors[0]
    assert "git ls-remote -- https://" in results[1].stderr  # the echo is there, masked
    assert TOKEN not in _outputs(*results)
    assert not _files_with(work, TOKEN)


def test_rocm_url_with_a_token_is_masked_everywhere(
    run_cli: Runner, server: Server, tmp_path: Path
) -> None:
    data = small_tree_tarball()
    server.files["/rocm.tar.gz"] = data
    url = server.url("/rocm.tar.gz").replace("http://", f"http://builder:{TOKEN}@")
    cache = tmp_path / "cache"
    env = {"ROCM_BUILD_BUILD_ROCM_CACHE": str(cache)}
    fetched = run_cli(["-v", "rocm", "fetch", url], cwd=tmp_path, env=env, check=True)
    again = run_cli(["--json", "rocm", "fetch", url], cwd=tmp_path, env=env, check=True)
    missing = url.replace("rocm.tar.gz", "missing.tar.gz")
    failed = run_cli(["rocm", "fetch", missing], cwd=tmp_path, env=env)
    assert failed.returncode == 5
    assert "missing.tar.gz" in failed.stderr
    assert TOKEN not in _outputs(fetched, again, failed)
    assert not _files_with(tmp_path, TOKEN)
    # The cache key does not depend on the token either: a rotated token reuses the tree.
    rotated = url.replace(TOKEN, "other")
    assert run_cli(["rocm", "fetch", rotated], cwd=tmp_path, env=env, check=True).stdout == (
        fetched.stdout
    )
    assert len(server.requests) == 2  # the first download and the missing file


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def test_lock_files_hold_no_token_and_go_when_the_run_ends(
    rb: Runner, work: Path, http_root: str, tmp_path: Path
) -> None:
    origin = f"http://builder:{TOKEN}@{http_root}/proj/.git"
    run = tmp_path / "run"
    run.mkdir()
    env = {"XDG_RUNTIME_DIR": str(run)}
    # Killed while it holds its locks: their files stay (the kernel drops the locks only).
    killed = rb("checkout", f"--origin=proj={origin}", "proj", ok=False,
                env={**env, "RB_FAULT_POINT": "checkout.locked"})  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    held = sorted((run / "rocm-build-locks").iterdir())
    assert len(held) == 2  # the checkout and the patch folder
    for lock in held:
        assert f"http://builder:***@{http_root}" in lock.read_text()
        assert lock.stat().st_mode & 0o077 == 0
    assert not _files_with(run, TOKEN)
    done = rb("checkout", "proj", f"--origin=proj={origin}", env=env)
    assert "proj: checked out" in done.stdout
    assert list((run / "rocm-build-locks").iterdir()) == []  # a finished run removes its own
