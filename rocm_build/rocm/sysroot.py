"""A Debian root of another release (sid) to build and test in, and running commands inside it.

ROCm from Debian sid needs glibc 2.38+, newer than a Debian 12 host has. ``make_root`` makes a
lean root with mmdebstrap (python3, venv, compilers, cmake, git), once: a second call finds it
ready. ``run`` runs one command in the root, in a private mount namespace (``unshare``) where
/proc, /dev, /sys, the current folder and any extra folders (the ROCm tree) are bound at the same
paths, so nothing is left mounted when the command ends. Run by root it runs as root; run by
another user it runs in a user namespace that maps that user to root inside (no privilege is
gained: files the root's owner made stay read-only to the command).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocm_build.common import proc, tempfiles
from rocm_build.common.errors import RocmBuildError
from rocm_build.rocm import debtree

__all__ = ["host_ca_bundle", "make_root", "run"]

log = logging.getLogger(__name__)

_STAMP = ".rocm-build-sysroot.json"
_HOST_CA = "usr/local/share/ca-certificates/rocm-build-host.crt"
_STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SysrootError(RocmBuildError):
    """The root cannot be made or entered."""


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        msg = f"{what} needs root (mmdebstrap makes a root-owned tree): run it as root or with sudo"
        raise SysrootError(msg)


def host_ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The CA bundle this machine trusts (what its pip and Python use)."""
    for candidate in (env.get("PIP_CERT"), env.get("SSL_CERT_FILE"), env.get("REQUESTS_CA_BUNDLE")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def _copy_host_settings(root: Path, env: Mapping[str, str]) -> None:
    """The host's CA bundle (a proxy's certificate lives only there), its pip settings and DNS."""
    bundle = host_ca_bundle(env)
    if bundle is not None:
        for dest in (root / _HOST_CA, root / "etc/ssl/certs/ca-certificates.crt"):
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.is_symlink():
                dest.unlink()
            shutil.copyfile(bundle, dest)
    for name in ("etc/pip.conf", "etc/resolv.conf"):
        src = Path("/") / name
        if src.is_file():
            dest = root / name
            if dest.is_symlink():
                dest.unlink()
            shutil.copyfile(src, dest)


def _stamp(release: debtree.Release) -> str:
    text = "\n".join([release.suite, *sorted(release.root_packages)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_root(
    dest: Path, *, release: str = "", mirror: str = "", env: Mapping[str, str] | None = None
) -> tuple[Path, bool]:
    """Make (or find ready) a root of ``release`` at ``dest``; returns (root, made_now)."""
    env = env if env is not None else os.environ
    rel = debtree.load_release(release)
    dest = dest.resolve()
    stamp = _stamp(rel)
    stamp_file = dest / _STAMP
    if stamp_file.is_file() and json.loads(stamp_file.read_text()).get("stamp") == stamp:
        if os.access(dest, os.W_OK):
            _copy_host_settings(dest, env)
        return dest, False
    if dest.exists() and any(dest.iterdir()):
        msg = (
            f"{dest} exists and is not a root made by rocm-build; remove it or pick another folder"
        )
        raise SysrootError(msg)
    _need_root("rocm sysroot")
    proc.which("mmdebstrap", hint="apt-get install mmdebstrap (dev/setup installs it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tempfiles.sweep(dest.parent)  # what a killed run left
    with tempfiles.folder(dest.parent, dest.name) as staging:
        tmp = staging / "root"
        args = ["mmdebstrap", "--variant=apt", "--quiet"]
        for option in rel.apt_options:
            key, _, value = option.partition("=")
            args.append(f'--aptopt={key.strip()} "{value.strip()}"')
        args += [f"--include={','.join(rel.root_packages)}", rel.suite, str(tmp)]
        args.append(mirror or debtree.host_mirror())
        log.info("making a Debian %s root in %s (mmdebstrap)", rel.suite, dest)
        proc.run(args, capture=True, what="mmdebstrap")
        _copy_host_settings(tmp, env)
        (tmp / _STAMP).write_text(json.dumps({"stamp": stamp, "release": rel.name}) + "\n")
        if dest.exists():
            dest.rmdir()
        tmp.replace(dest)
    return dest, True


def run(
    root: Path,
    cmd: Sequence[str],
    *,
    binds: Sequence[Path] = (),
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    user_namespace: bool | None = None,
) -> int:
    """Run ``cmd`` inside ``root`` with ``cwd`` and ``binds`` at their own paths; returns its
    exit code. ``user_namespace`` (default: when not run by root) enters a user namespace in
    which the caller is root, so mounting and chroot need no privilege."""
    if user_namespace is None:
        user_namespace = os.geteuid() != 0
    root = root.resolve()
    if not (root / _STAMP).is_file() and not (root / "usr/bin").is_dir():
        msg = f"{root} is not a root; make one with: rocm-build rocm sysroot {root}"
        raise SysrootError(msg)
    proc.which("unshare", hint="unshare is part of util-linux")
    cwd = (cwd or Path.cwd()).resolve()
    env = dict(env if env is not None else os.environ)
    env["PATH"] = ":".join(
        dict.fromkeys([*env.get("PATH", "").split(":"), *_STANDARD_PATH.split(":")])
    )
    folders = [str(p.resolve()) for p in (cwd, *binds)]
    userns = ["--user", "--map-root-user"] if user_namespace else []
    # Every run holds the root's folder shared; the empty folders a run made to mount on go
    # again only when it then gets it alone (no other run may have its binds on them), so a
    # later run does not find a folder once bound (a ROCm tree) standing empty in the root.
    lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        made = _mount_points(root, folders)
        try:
            return _unshare(root, cwd, folders, cmd, userns, env)
        finally:
            _remove_mount_points(lock, made)
    finally:
        os.close(lock)


def _mount_points(root: Path, folders: Sequence[str]) -> list[Path]:
    """Make the folders in ``root`` that the bound ``folders`` mount on; returns those this call
    made, parents first."""
    made: list[Path] = []
    for folder in dict.fromkeys(folders):
        point = root
        for part in Path(folder).parts[1:]:
            point = point / part
            if not point.exists():
                point.mkdir()
                made.append(point)
    return made


def _remove_mount_points(lock: int, made: Sequence[Path]) -> None:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.debug("another run uses %d mount point(s) this run made; left", len(made))
        return
    for point in reversed(made):
        try:
            point.rmdir()
        except OSError:
            log.debug("mount point %s left in the root (not empty)", point)


def _unshare(
    root: Path,
    cwd: Path,
    folders: Sequence[str],
    cmd: Sequence[str],
    userns: Sequence[str],
    env: Mapping[str, str],
) -> int:
    result = proc.run(
        [
            "unshare",
            *userns,
            "--mount",
            "--propagation",
            "private",
            sys.executable,
            "-m",
            "rocm_build.rocm.sysroot",
            str(root),
            str(cwd),
            *folders,
            "--",
            *cmd,
        ],
        env=dict(env),
        check=False,
    )
    return result.returncode


def _enter(root: Path, cwd: str, folders: Sequence[str], cmd: Sequence[str]) -> int:
    """In the private mount namespace: bind what the command needs, then chroot and run it."""
    # /proc is bound, not mounted anew: a user namespace without its own PID namespace may
    # not mount a new proc, and the host's shows the same processes.
    mounts: list[list[str]] = [
        ["mount", "--rbind", "/proc", str(root / "proc")],
        ["mount", "--rbind", "/dev", str(root / "dev")],
        ["mount", "--rbind", "/sys", str(root / "sys")],
    ]
    for folder in dict.fromkeys(folders):
        if folder == "/":
            continue
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)  # made by run already
        mounts.append(["mount", "--rbind", folder, str(root / folder.lstrip("/"))])
    for args in mounts:
        proc.run(args, capture=True, what="mount")
    result = proc.run(["chroot", str(root), "env", f"--chdir={cwd}", *cmd], check=False)
    return result.returncode


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    sys.exit(_enter(Path(argv[0]), argv[1], argv[2:split], argv[split + 1 :]))
