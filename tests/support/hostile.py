"""Plant the usual attacks on a piece of state that rocm-build reads back, reuses or deletes.

Every file or folder the tool keeps between runs (locks, caches, journals, stamps, temporary
outputs) may be stale, crafted, of the wrong type, a link to somewhere else, another user's, open
to other users, or on a full disk. A test of a new mechanism gets all of them from here::

    @pytest.mark.parametrize("attack", hostile.FOLDER_ATTACKS)
    def test_state_folder(attack, tmp_path):
        planted = hostile.plant(state_folder, attack, elsewhere=tmp_path / "elsewhere")
        ... run the mechanism: it refuses in one line (or copes) ...
        planted.assert_untouched()  # nothing elsewhere was written, truncated or deleted

``elsewhere`` is a folder outside the state holding bait files (``bait``: name -> bytes) that a
link points at; ``assert_untouched`` compares it with its snapshot, ``assert_left_alone`` also
the planted thing itself (what a run that refuses it must leave). Attacks that need root (a
foreign owner, a mount) skip the test without it.

A JSON state file (a journal, a stamp, a report) gets ``STATE_FILE_ATTACKS``: after those in
``UNTRUSTED`` nothing at its name may be read, written through or replaced (the run stops, exit
14); after the others (stale, no JSON, JSON of the wrong types) the run copes or stops in one
line. ``tests/integration/faults/test_hostile_state_files.py`` runs them through the real CLI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

#: What can be planted where a folder is expected (``open-parent``: the user's own folder, in
#: a folder any user may write to without the sticky bit, where another could swap it).
FOLDER_ATTACKS = (
    "wrong-type",
    "symlink",
    "foreign-owner",
    "group-writable",
    "world-writable",
    "open-parent",
)
#: What can be planted where a file is expected.
FILE_ATTACKS = (
    "stale",
    "crafted",
    "wrong-type",
    "fifo",
    "symlink",
    "foreign-owner",
    "world-writable",
)
#: What can be planted where a JSON state file is expected (a journal, a stamp, a report): the
#: file attacks, with two kinds of content: bytes that are no JSON (``crafted``: escape sequences
#: and a long line) and JSON of the wrong types (``wrong-json``).
STATE_FILE_ATTACKS = ("stale", "crafted", "wrong-json", *FILE_ATTACKS[2:])
#: The attacks after which nothing at the name is a file this user alone wrote: no run may read
#: it, write through it or replace it.
UNTRUSTED = ("wrong-type", "fifo", "symlink", "foreign-owner", "world-writable")
#: JSON of the wrong types, where an object is expected.
WRONG_JSON = b'["not", "an", {"object": 1}]\n'
NOBODY = 65534  # the uid and gid of 'nobody': "another user"
BAIT: Mapping[str, bytes] = {"victim": b"precious: not the tool's\n"}
#: Escape sequences and a long line: what a crafted state file may try on a terminal.
CRAFTED = b"\x1b[2J\x1b]0;owned\x07 rocm-build pid 1 \r\x1b[31m" + b"A" * 5000 + b"\n"


@dataclass
class Planted:
    """One planted attack: ``path`` is the state; ``elsewhere`` the folder of bait files."""

    attack: str
    path: Path
    elsewhere: Path
    before: dict[str, bytes] = field(default_factory=dict)
    planted: tuple[int, int, bytes] = (0, 0, b"")  # file type, owner, content (a file's)

    def snapshot(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for p in sorted(self.elsewhere.rglob("*")):
            rel = str(p.relative_to(self.elsewhere))
            out[rel] = p.read_bytes() if p.is_file() and not p.is_symlink() else b"<not a file>"
        return out

    def assert_untouched(self) -> None:
        """Nothing under ``elsewhere`` was made, written, truncated, deleted or re-owned."""
        assert self.snapshot() == self.before, f"{self.attack}: {self.elsewhere} was changed"
        for p in [self.elsewhere, *self.elsewhere.rglob("*")]:
            assert p.lstat().st_uid == os.geteuid(), f"{self.attack}: {p} was re-owned"

    def _planted_now(self) -> tuple[int, int, bytes]:
        st = self.path.lstat()
        if stat.S_ISREG(st.st_mode):
            data = self.path.read_bytes()
        elif stat.S_ISDIR(st.st_mode):
            data = "\n".join(sorted(os.listdir(self.path))).encode()
        else:
            data = b""
        return stat.S_IFMT(st.st_mode), st.st_uid, data

    def assert_left_alone(self) -> None:
        """The planted thing itself is still there as it was planted (type, owner, bytes), and
        nothing elsewhere changed: what a run that refuses it must leave."""
        assert os.path.lexists(self.path), f"{self.attack}: {self.path} was removed"
        assert self._planted_now() == self.planted, f"{self.attack}: {self.path} was changed"
        self.assert_untouched()


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")


def _bait(elsewhere: Path, bait: Mapping[str, bytes]) -> None:
    elsewhere.mkdir(parents=True, exist_ok=True)
    for name, data in bait.items():
        (elsewhere / name).parent.mkdir(parents=True, exist_ok=True)
        (elsewhere / name).write_bytes(data)


def _foreign_link(link: Path, target: Path) -> None:
    """A link as another account would plant it (owned by it), when this test may do so."""
    link.symlink_to(target, target_is_directory=target.is_dir())
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)


def plant(
    path: Path,
    attack: str,
    *,
    elsewhere: Path,
    folder: bool,
    content: bytes = b"",
    bait: Mapping[str, bytes] = BAIT,
) -> Planted:
    """Put ``attack`` at ``path``, where the tool expects a folder (``folder``) or a file.

    ``content``: the bytes of a planted file (a stale or crafted state file; ``crafted``
    defaults to :data:`CRAFTED`, ``wrong-json`` to :data:`WRONG_JSON`). A link points at
    ``elsewhere`` (a folder) or at the first bait file in it (a file)."""
    _bait(elsewhere, bait)
    path.parent.mkdir(parents=True, exist_ok=True)
    name = attack
    if attack == "crafted" and not content:
        content = CRAFTED
    if attack == "wrong-json":
        attack, content = "crafted", content or WRONG_JSON
    if attack == "wrong-type":
        if folder:
            path.write_bytes(b"a file where a folder belongs\n")
        else:
            path.mkdir()
            (path / "inside").write_bytes(b"a folder where a file belongs\n")
    elif attack == "fifo":
        os.mkfifo(path)
    elif attack == "symlink":
        _foreign_link(path, elsewhere if folder else elsewhere / next(iter(bait)))
    elif attack in ("stale", "crafted"):
        if folder:
            path.mkdir(mode=0o700)
        else:
            path.write_bytes(content)
    elif attack == "foreign-owner":
        need_root("giving a file to another user")
        _make(path, folder, content)
        os.chown(path, NOBODY, NOBODY)
    elif attack == "open-parent":
        _make(path, folder, content)
        path.parent.chmod(0o777)
    elif attack in ("group-writable", "world-writable"):
        _make(path, folder, content)
        bits = 0o020 if attack == "group-writable" else 0o002
        path.chmod((0o700 if folder else 0o600) | bits | (0o050 if folder else 0o040))
    else:
        raise ValueError(f"unknown attack {attack}")
    planted = Planted(name, path, elsewhere)
    planted.before = planted.snapshot()
    planted.planted = planted._planted_now()
    return planted


def _make(path: Path, folder: bool, content: bytes) -> None:
    if folder:
        path.mkdir(mode=0o700)
    else:
        path.write_bytes(content)
        path.chmod(0o600)


@contextlib.contextmanager
def full_disk(folder: Path, *, left: int = 0) -> Iterator[Path]:
    """``folder`` as a small tmpfs with ``left`` bytes free (about: whole pages), unmounted on
    the way out; skips the test where mounting is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(folder)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here (needs root and mount rights): {exc}")
    try:
        filler = folder / ".filler"
        with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
            fh.write(b"\0" * max(shutil.disk_usage(folder).free - left, 0))
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
