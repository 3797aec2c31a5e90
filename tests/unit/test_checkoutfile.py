"""Files read out of a checkout (``repo/checkoutfile``): regular files inside it, of a sane size;
a committed link out of it, a FIFO, a device or a huge file is refused in one line, unread."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocm_build.common.errors import UnsafeInput
from rocm_build.repo import checkoutfile, tritonpin
from rocm_build.sources.execute import _related

SECRET = "ROCM_BUILD_TEST_SECRET=do-not-print"


def _checkout(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src" / "torch"
    (src / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text(SECRET + "\n")
    return src, outside


def _plant(src: Path, outside: Path, kind: str) -> None:
    path = src / "version.txt"
    if kind == "link-out":
        path.symlink_to(outside / "secret")
    elif kind == "relative-link-out":
        path.symlink_to(Path("..", "..", "outside", "secret"))
    elif kind == "parent-link-out":
        (src / "ci").symlink_to(outside, target_is_directory=True)
        (outside / "version.txt").write_text(SECRET + "\n")
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        path.write_bytes(b"2.9.0\n" + b"x" * checkoutfile.LIMIT)
    else:
        raise ValueError(kind)


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("link-out", "leads out of the checkout"),
        ("relative-link-out", "leads out of the checkout"),
        ("parent-link-out", "leads out of the checkout"),
        ("dev-zero", "leads out of the checkout"),
        ("fifo", "is a FIFO"),
        ("folder", "is a folder"),
        ("huge", "is larger than 1024 KiB"),
    ],
)
def test_unsafe_checkout_files_are_refused_unread(tmp_path: Path, kind: str, words: str) -> None:
    src, outside = _checkout(tmp_path)
    _plant(src, outside, kind)
    rel = "ci/version.txt" if kind == "parent-link-out" else "version.txt"
    with pytest.raises(UnsafeInput, match=words) as err:
        checkoutfile.read_text(src, rel, "torch's version file")
    message = str(err.value)
    assert "\n" not in message
    assert "do-not-print" not in message
    assert "torch's version file" in message
    assert "regular file" in message


def test_regular_files_and_links_inside_are_read(tmp_path: Path) -> None:
    src, _outside = _checkout(tmp_path)
    (src / "sub" / "real.txt").write_text("2.9.0a0\n")
    (src / "version.txt").symlink_to(Path("sub", "real.txt"))
    assert checkoutfile.read_text(src, "version.txt", "v") == "2.9.0a0\n"
    assert checkoutfile.read_text(src, "missing.txt", "v") is None
    (src / "dangling").symlink_to("nowhere")
    assert checkoutfile.read_text(src, "dangling", "v") is None


def test_a_checkout_reached_through_a_link_is_read(tmp_path: Path) -> None:
    src, _outside = _checkout(tmp_path)
    (src / "version.txt").write_text("2.9.0a0\n")
    link = tmp_path / "linked-src"
    link.symlink_to(src, target_is_directory=True)
    assert checkoutfile.read_text(link, "version.txt", "v") == "2.9.0a0\n"


def test_triton_pin_and_related_commits_are_read_as_checkout_files(tmp_path: Path) -> None:
    src, outside = _checkout(tmp_path)
    (src / ".git").mkdir()
    (src / tritonpin.VERSION_FILE).parent.mkdir(parents=True)
    (src / tritonpin.VERSION_FILE).symlink_to(outside / "secret")
    with pytest.raises(UnsafeInput, match="leads out of the checkout") as err:
        tritonpin.read_pin(src, release=True)
    assert "do-not-print" not in str(err.value)
    (src / "related_commits").symlink_to("/dev/zero")
    with pytest.raises(UnsafeInput, match="related_commits"):
        _related(src)
