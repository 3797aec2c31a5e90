"""The run report never holds the password of a compiler cache URL."""

from __future__ import annotations

import json
from pathlib import Path

from rocm_build import config
from rocm_build.building.compilercache import mask_values
from rocm_build.commands import runreport
from rocm_build.run import context

URL = "redis://builder:s3cret-Pw0rd@cache.example:6379"


def test_run_report_masks_the_cache_password(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_BUILD_CACHE_URL": URL})
    assert cfg.build.cache_url == URL
    data = runreport.collect(context.resolve(cfg), {}, [], ok=True)
    assert data["settings"]["build.cache_url"] == "redis://builder:***@cache.example:6379"
    assert "s3cret-Pw0rd" not in json.dumps(data)


def test_mask_values_reaches_nested_strings() -> None:
    masked = mask_values({"a": URL, "b": [URL, 3], "c": {"d": URL}, "e": None})
    assert "s3cret" not in json.dumps(masked)
    assert masked["b"][1] == 3
    assert masked["e"] is None


TOKEN = "ghp_Zx81tokenValue"


def test_mask_url_forms() -> None:
    from rocm_build.common.masking import mask_url

    cases = {
        "https://user:pw@host/r.git": "https://user:***@host/r.git",
        f"https://{TOKEN}@github.com/o/r.git": "https://***@github.com/o/r.git",
        f"https://x-access-token:{TOKEN}@github.com/o/r": "https://x-access-token:***@github.com/o/r",
        f"+ git ls-remote 'https://oauth2:{TOKEN}@gitlab.example/r.git' refs/tags/v1": (
            "+ git ls-remote 'https://oauth2:***@gitlab.example/r.git' refs/tags/v1"
        ),
        "fetching from http://u:p:with:colons@127.0.0.1:8080/x": (
            "fetching from http://u:***@127.0.0.1:8080/x"
        ),
        # Account names of SSH and plain addresses are not secrets; no credential, no change.
        "ssh://git@github.com/o/r.git": "ssh://git@github.com/o/r.git",
        "git@github.com:o/r.git": "git@github.com:o/r.git",
        "mail dev@example.com about http://127.0.0.1:1/x@y": (
            "mail dev@example.com about http://127.0.0.1:1/x@y"
        ),
        "https://host/path": "https://host/path",
    }
    for text, want in cases.items():
        assert mask_url(text) == want, text
        assert mask_url(want) == want  # idempotent


def test_masked_origins_replay_with_the_configured_one() -> None:
    from rocm_build.common.masking import is_masked, strip_masked
    from rocm_build.sources.plan import _replay_origin

    recorded = "https://user:***@host/r.git"
    assert is_masked(recorded)
    assert not is_masked("https://host/r.git")
    assert _replay_origin(recorded, "https://user:pw@host/r.git") == "https://user:pw@host/r.git"
    assert _replay_origin(recorded, "https://other/r.git") == "https://user@host/r.git"
    assert strip_masked("https://***@host/r.git") == "https://host/r.git"
    assert _replay_origin("file:///srv/r.git", "https://x") == "file:///srv/r.git"


def test_run_report_masks_every_url_and_message(tmp_path: Path) -> None:
    from rocm_build.commands.pipeline import StageOutcome
    from rocm_build.common.errors import FetchError
    from rocm_build.repo.manifest import MANIFEST_NAME

    origin = f"https://{TOKEN}@github.com/o/proj.git"
    src = tmp_path / "src"
    src.mkdir()
    (src / MANIFEST_NAME).write_text(
        json.dumps({"format": 1, "projects": {"proj": {"origin": origin, "ref": "v1"}}})
    )
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_ROCM": f"https://u:{TOKEN}@h/rocm.tgz"})
    err = FetchError(f"download of https://u:{TOKEN}@h/rocm.tgz failed")
    facts = {"projects": ["proj"], "rocm": {"root": f"https://u:{TOKEN}@h/rocm.tgz"}}
    outcomes = [StageOutcome("build", "failed", 1.0, str(err))]
    data = runreport.collect(context.resolve(cfg), facts, outcomes, ok=False)
    assert TOKEN not in json.dumps(data)
    assert TOKEN not in runreport.render_markdown(data)
    assert data["sources"][0]["origin"] == "https://***@github.com/o/proj.git"
    assert "https://u:***@h/rocm.tgz" in data["stages"][0]["reason"]
