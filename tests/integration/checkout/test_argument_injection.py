"""A string never runs a command: origins, refs and manifest entries that git would take as
options (``--upload-pack=COMMAND`` runs COMMAND) or as a command-running transport (``ext::``)
are refused with one line (exit 2) before git sees them; a relative path to a real repository
is an origin like any other."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from .conftest import Runner, Upstream


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("rocm-build: error:")]
    return line


def _no_git_ran(stderr: str) -> None:
    assert "+ git" not in stderr, stderr


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "INJECTED"


def test_an_origin_that_is_a_git_option_runs_nothing(rb: Runner, work: Path, marker: Path) -> None:
    origin = f"--upload-pack=touch {shlex.quote(str(marker))}"
    res = rb("-v", "checkout", "proj", "--origin", f"proj={origin}", ok=False)
    assert not marker.exists(), "the origin's command ran"
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert "origin '--upload-pack=touch" in line, line
    assert "it starts with '-'" in line, line
    _no_git_ran(res.stderr)
    assert not (work / "src/proj").exists()


def test_an_ext_transport_origin_in_the_config_file_is_refused(
    rb: Runner, work: Path, marker: Path
) -> None:
    config = work / "rocm-build.toml"
    text = config.read_text()
    start = text.index('origin = "', text.index("[projects.proj]"))
    end = text.index("\n", start)
    ext = f"ext::sh -c touch% {marker}"
    config.write_text(text[:start] + f"origin = {json.dumps(ext)}" + text[end:])
    res = rb("-v", "checkout", "proj", ok=False)
    assert not marker.exists()
    assert res.returncode == 2, res.stderr
    assert "TRANSPORT:: helper" in _error_line(res.stderr)
    _no_git_ran(res.stderr)


@pytest.mark.parametrize("ref", ["--upload-pack=touch INJECTED", "v1.1 --all", "a..b"])
def test_a_ref_that_is_no_ref_name_is_refused(rb: Runner, work: Path, ref: str) -> None:
    res = rb("-v", "checkout", "proj", "--ref", f"proj={ref}", ok=False)
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert "is not a valid git branch, tag or commit name" in line, line
    _no_git_ran(res.stderr)
    assert not (work / "INJECTED").exists()


def test_an_origin_that_is_neither_url_nor_path_is_refused(rb: Runner, work: Path) -> None:
    res = rb("checkout", "proj", "--origin", "proj=no/such/mirror", ok=False)
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert "'no/such/mirror' is neither a URL nor an existing path" in line, line


def test_a_crafted_manifest_origin_runs_nothing(
    rb: Runner, work: Path, upstream: Upstream, marker: Path
) -> None:
    rb("checkout", "proj")
    manifest = work / "src/rocm-build-sources.json"
    data = json.loads(manifest.read_text())
    data["projects"]["proj"]["origin"] = f"--upload-pack=touch {marker}"
    crafted = work / "crafted.json"
    crafted.write_text(json.dumps(data))
    res = rb("-v", "checkout", "proj", "--manifest", str(crafted), "--src-dir", "src2", ok=False)
    assert not marker.exists()
    assert res.returncode == 2, res.stderr
    assert "the manifest's project proj" in _error_line(res.stderr)
    _no_git_ran(res.stderr)


def test_a_relative_path_origin_is_read_from_where_it_was_given(
    rb: Runner, work: Path, upstream: Upstream
) -> None:
    relative = Path("..") / upstream.proj.relative_to(work.parent)
    res = rb("checkout", "proj", "--origin", f"proj={relative}")
    assert "proj: checked out v1.1" in res.stdout, res.stdout + res.stderr
    again = rb("checkout", "proj", "--origin", f"proj={relative}")
    assert "up to date" in again.stdout


def test_the_git_layer_passes_urls_after_double_dash(upstream: Upstream, marker: Path) -> None:
    """Defence in depth: even a caller that skipped the plan's checks cannot make git take a
    URL as an option (git then calls it a strange path and refuses it)."""
    from rocm_build.common.errors import FetchError
    from rocm_build.repo import git as git_mod
    from rocm_build.sources import remote

    repo = upstream.root / "scratch"
    git_mod.init(repo, f"--upload-pack=touch {marker}")
    with pytest.raises(FetchError):
        remote.resolve_ref(repo, f"--upload-pack=touch {marker}", "v1.1", delay=0)
    assert not marker.exists()
    assert git_mod.run(repo, "remote", "get-url", "origin").stdout.strip().startswith("--upload")
