"""The run report never holds the password of a compiler cache URL."""

from __future__ import annotations

import json
from pathlib import Path

from rocm_build import config, runreport
from rocm_build.cache import mask_values

URL = "redis://builder:s3cret-Pw0rd@cache.example:6379"


def test_run_report_masks_the_cache_password(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_BUILD_CACHE_URL": URL})
    assert cfg["build.cache_url"] == URL
    data = runreport.collect(cfg, {}, [], ok=True)
    assert data["settings"]["build.cache_url"] == "redis://builder:***@cache.example:6379"
    assert "s3cret-Pw0rd" not in json.dumps(data)


def test_mask_values_reaches_nested_strings() -> None:
    masked = mask_values({"a": URL, "b": [URL, 3], "c": {"d": URL}, "e": None})
    assert "s3cret" not in json.dumps(masked)
    assert masked["b"][1] == 3
    assert masked["e"] is None
