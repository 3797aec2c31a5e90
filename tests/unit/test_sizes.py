"""A byte count reads the same wherever it is shown (inspect, bundle, run report)."""

from __future__ import annotations

import re
from typing import Any

from rocm_build.bundle import report
from rocm_build.commands import runreport
from rocm_build.common.sizes import human_size
from tests.support.runreports import run_report_data

SIZE = 86_100_000  # 82.1 MiB: the binary reading would differ from the decimal one


def inspect_size_text(size: int) -> str:
    data: dict[str, Any] = {"wheel": "torch-2.9.1-cp311-cp311-linux_x86_64.whl", "size": size}
    first = next(report.render(data))
    found = re.fullmatch(r"\S+  \((.+)\)", first)
    assert found, first
    return found[1]


def run_report_size_text(size: int) -> str:
    data = run_report_data(ok=True)
    wheel = data["wheels"]["bundled"][0]  # type: ignore[index]
    wheel["size"] = size
    found = re.search(r"^\| \S+\.whl \| (.+?) \| `", runreport.render_markdown(data), re.M)
    assert found
    return found[1]


def test_inspect_and_the_run_report_show_a_size_alike() -> None:
    assert inspect_size_text(SIZE) == run_report_size_text(SIZE) == human_size(SIZE) == "86.1 MB"


def test_sizes_are_decimal() -> None:
    assert human_size(999) == "999 bytes"
    assert human_size(12_300) == "12.3 kB"
    assert human_size(4_700_000_000) == "4.7 GB"
    assert human_size(report.PYPI_LIMIT) == "100.0 MB"
