"""A wheel's file opened as a zip: a regular file (a link to one is followed) or nothing.

A FIFO named like a wheel made zipfile wait for a writer forever, and a link to a device such as
``/dev/zero`` made it read until memory ran out; both are refused here, unread (exit 15)."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

from rocm_build.common.errors import BundleError, FileAccessError, UnsafeInput
from rocm_build.common.statefile import file_kind


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; a FIFO is opened without waiting
    for a writer and, like a device or a folder, refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeInput(
                f"{path}: {file_kind(mode)}, not a wheel file; pass the .whl file itself"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_zip(path: Path) -> zipfile.ZipFile:
    """The zip at ``path``, read through a file this opened (the caller closes ``.fp`` after
    the zip: a zip given a file object leaves it open)."""
    try:
        fh = _open_regular(path)
    except PermissionError as err:
        msg = f"{path}: permission denied reading the wheel; make it readable by this user"
        raise FileAccessError(msg) from err
    except OSError as err:
        raise BundleError(f"{path}: not a readable wheel ({err})") from err
    try:
        return zipfile.ZipFile(fh)
    except zipfile.BadZipFile as err:
        fh.close()
        raise UnsafeInput(
            f"{path}: not a wheel ({err}): a wheel is a zip file; rebuild it (or download it again)"
        ) from err
    except OSError as err:
        fh.close()
        raise BundleError(f"{path}: not a readable wheel ({err})") from err
    except BaseException:
        fh.close()
        raise
