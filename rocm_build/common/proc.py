"""The one place that starts processes (GitPython inside ``repo/git.py`` aside), and the one
that says how many CPUs they may use (:func:`cpus_available`, at the end).

Every command is an argument list, echoed through logging as ``+ cmd`` (the CLI decides whether
that is shown), optionally teed to a log file, and timed. A non-zero exit raises
``CommandFailed`` whose one-line message names the log and whose ``tail`` keeps the last lines.

Children die with rocm-build. Each child (``run`` here, and GitPython's git processes, which get
``popen_options()``) starts in its own session, so a Ctrl-C on the terminal reaches rocm-build
alone and rocm-build stops the children itself: ``kill_children()`` sends SIGTERM to each child's
whole process group, and SIGKILL to what is left after a short grace time. ``handle_signals()``
turns SIGTERM and SIGHUP into the same ``KeyboardInterrupt`` as Ctrl-C. A SIGKILL of rocm-build
(an OOM kill) runs no code at all: for that, on Linux, each child also gets a parent-death
signal (``PR_SET_PDEATHSIG``, SIGKILL), set between fork and exec.

Two facts about that signal shape the code. It fires when the *thread* that started the child
ends, not the process: ``run`` always waits for its child in the thread that started it, so a
child never outlives that thread (worker threads of a pool included). And it reaches the direct
child only; grandchildren (a compiler under ninja) are reached by the group kill, which needs a
living rocm-build. Setting it needs a ``preexec_fn``, which makes Python fork instead of vfork
and runs Python code in the child: that is safe here although rocm-build uses threads, because
CPython re-initialises its runtime in the child before calling it and the function does nothing
but one libc call through a ctypes function looked up in advance (no import, no lock, no
logging), and glibc's fork keeps malloc usable in the child.

Size: the one place that starts processes (the call, the log tee, timing, the children's sessions
and their death with rocm-build, the CPUs they may use); split, a second module would start
processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import math
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from rocm_build.common import statefile
from rocm_build.common.errors import CommandFailed, FileAccessError, ToolMissing
from rocm_build.common.masking import mask_url

__all__ = [
    "Result",
    "cgroup_quota",
    "cpus_available",
    "handle_signals",
    "ignore_signals",
    "interrupted_by",
    "kill_children",
    "open_log",
    "parse_cfs",
    "parse_cpu_max",
    "popen_options",
    "run",
    "which",
]

log = logging.getLogger(__name__)

TAIL_LINES = 40
#: Seconds children get between SIGTERM and SIGKILL when rocm-build stops them.
GRACE = 2.0

_PR_SET_PDEATHSIG = 1
_lock = threading.Lock()
_running: dict[int, subprocess.Popen[Any]] = {}  # pid (= its process group) -> child
_started_others = False  # popen_options() was handed out: scan /proc for children too
_signal_name = ""


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()


def _die_with_parent(parent: int) -> None:
    """In the child, between fork and exec: SIGKILL me when my parent's thread ends."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        os.kill(os.getpid(), signal.SIGKILL)


def popen_options() -> dict[str, Any]:
    """``Popen`` keyword arguments that make a child die with rocm-build (see the module doc).

    For process starters other than ``run`` (GitPython); ``kill_children`` finds those
    children through ``/proc``."""
    global _started_others
    _started_others = True
    return _options()


def _options() -> dict[str, Any]:
    options: dict[str, Any] = {"start_new_session": True}
    if _prctl is not None:
        options["preexec_fn"] = functools.partial(_die_with_parent, os.getpid())
    return options


def _popen(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    child: subprocess.Popen[Any] = subprocess.Popen(argv, **kwargs, **_options())
    with _lock:
        _running[child.pid] = child
    return child


def _finish(child: subprocess.Popen[Any]) -> None:
    """After ``child`` was waited for, or on the way out of an exception: stop its group."""
    if child.returncode is None:
        _stop_groups([child.pid])
    with _lock:
        _running.pop(child.pid, None)


def _proc_children() -> list[int]:
    """Direct children of this process (Linux ``/proc``), for those GitPython started."""
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[1]) == me and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    child = _running.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _signal_group(pid: int, sig: int) -> None:
    # Each child leads its own group (its own session); one started otherwise gets the signal
    # alone rather than rocm-build's whole group.
    with contextlib.suppress(OSError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _stop_groups(pids: Sequence[int], grace: float = GRACE) -> None:
    for pid in pids:
        _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        # Also the group's other members (a compiler under make) that outlived their leader.
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def kill_children(grace: float = GRACE) -> None:
    """Stop every child still running, with its process group: SIGTERM, then SIGKILL."""
    with _lock:
        pids = set(_running)
    if _started_others:
        pids.update(_proc_children())
    if pids:
        log.debug("stopping %d child process(es)", len(pids))
        _stop_groups(sorted(pids), grace)


#: set by Ctrl-C, SIGTERM or SIGHUP (once ``handle_signals`` runs): long work on another thread,
#: which the ``KeyboardInterrupt`` does not reach (a decompression), stops at its next step
STOPPING = threading.Event()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    global _signal_name
    _signal_name = signal.Signals(signum).name
    STOPPING.set()
    raise KeyboardInterrupt


def handle_signals() -> None:
    """SIGTERM and SIGHUP stop a run the way Ctrl-C does (``KeyboardInterrupt``), and all three
    set :data:`STOPPING`.

    A signal the caller ignores stays ignored: ``nohup rocm-build all &`` keeps running when
    its terminal closes."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_signal)


def ignore_signals() -> None:
    """While rocm-build stops its children after an interrupt, a second Ctrl-C changes nothing."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def interrupted_by() -> str:
    """The signal that interrupted the run: 'SIGTERM', 'SIGHUP', or 'SIGINT' (Ctrl-C)."""
    return _signal_name or "SIGINT"


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    seconds: float
    tail: tuple[str, ...] = ()


def which(program: str, env: Mapping[str, str] | None = None, *, hint: str = "") -> str:
    """Absolute path of ``program`` on ``env['PATH']``, or ``ToolMissing`` with ``hint``."""
    path = (env if env is not None else os.environ).get("PATH")
    found = shutil.which(program, path=path)
    if found is None:
        msg = f"'{program}' was not found on PATH" + (f": {hint}" if hint else "")
        raise ToolMissing(msg)
    return found


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = False,
    log_file: Path | None = None,
    check: bool = True,
    what: str = "",
    on_line: Callable[[str], None] | None = None,
) -> Result:
    """Run ``cmd``; capture its stdout (``capture``) or stream it to ``log_file``.

    With ``log_file`` the command's stdout and stderr go to the file (appended), and the last
    ``TAIL_LINES`` lines are kept for the error message; ``on_line`` is called with each line
    as it is written (a liveness signal for progress). Without either, output is inherited.
    The command's stdin is ``/dev/null``.
    """
    args = tuple(os.fspath(a) for a in cmd)
    if not args:
        msg = "empty command"
        raise ValueError(msg)
    program = args[0]
    if os.sep not in program:
        program = which(program, env)
    argv = (program, *args[1:])
    shown = mask_url(shlex.join(args))  # echoed, logged and quoted in errors: no credentials
    log.debug("+ %s%s", shown, f"  (in {cwd})" if cwd else "")
    start = time.monotonic()
    full_env = dict(env) if env is not None else None
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    try:
        if log_file is not None:
            returncode, stdout = _run_logged(
                argv,
                shown,
                log_file,
                tail,
                cwd=cwd,
                env=full_env,
                capture=capture,
                on_line=on_line,
            )
        else:
            returncode, stdout = _run_plain(argv, tail, cwd=cwd, env=full_env, capture=capture)
    except KeyboardInterrupt:
        raise
    except OSError as exc:
        msg = f"could not start {shown}: {exc.strerror}"
        raise ToolMissing(msg) from exc
    seconds = time.monotonic() - start
    result = Result(args, returncode, stdout, seconds, tuple(tail))
    log.debug("exit %d after %.1fs: %s", returncode, seconds, shown)
    if check and returncode != 0:
        where = f"; log: {log_file}" if log_file else ""
        last = f" ({tail[-1].strip()})" if tail and not log_file else ""
        label = what or Path(args[0]).name
        msg = f"{label} failed with exit code {returncode}{last}{where}"
        raise CommandFailed(msg, returncode=returncode, tail=tuple(tail))
    return result


_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_log(path: Path, *, empty: bool = False) -> TextIO:
    """The log file ``path`` open for appending (emptied first with ``empty``), in a log
    folder that is this user's (made when missing). A folder at the log folder's name that is a
    link, a file, another user's or writable by anyone, and anything at the file's name but
    a regular file of this user's alone (a link, a FIFO, a folder, a hard link to another file)
    is refused in one line (``FileAccessError``, exit 14): never written through, truncated or
    waited on."""
    what = "log file"
    statefile.own_folder(path.parent, "log folder")
    statefile.check(path, what)
    try:
        fd = os.open(path, _LOG_FLAGS, 0o644)
    except OSError as exc:
        statefile.check(path, what)  # put there since: the one-line refusal
        msg = f"cannot open the {what} {path} ({exc.strerror}): fix the permissions of its folder"
        raise FileAccessError(msg) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            statefile.check(path, what)
            msg = (
                f"the {what} {path} is a hard link to another file or was swapped while it was "
                "opened, not a file rocm-build wrote; nothing was written to it: move it away "
                "and run again"
            )
            raise FileAccessError(msg)
        if empty:
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "a", encoding="utf-8", errors="replace")
    except BaseException:
        os.close(fd)
        raise


def _run_logged(
    argv: Sequence[str],
    shown: str,
    log_file: Path,
    tail: deque[str],
    *,
    cwd: Path | None,
    env: dict[str, str] | None,
    capture: bool,
    on_line: Callable[[str], None] | None,
) -> tuple[int, str]:
    """``run`` with stdout and stderr appended to ``log_file`` (masked), line by line."""
    with open_log(log_file) as fh:
        fh.write(f"+ {shown}\n")
        fh.flush()
        child = _popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        try:
            assert child.stdout is not None
            chunks: list[str] = []
            for line in child.stdout:
                shown_line = mask_url(line)  # a child may print a URL with its credential
                fh.write(shown_line)
                tail.append(shown_line.rstrip("\n"))
                if on_line is not None:
                    on_line(line)
                if capture:
                    chunks.append(line)
            returncode = child.wait()
            child.stdout.close()
        finally:
            _finish(child)
        return returncode, "".join(chunks)


def _run_plain(
    argv: Sequence[str],
    tail: deque[str],
    *,
    cwd: Path | None,
    env: dict[str, str] | None,
    capture: bool,
) -> tuple[int, str]:
    """``run`` with the output captured (``capture``) or inherited."""
    child = _popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        text=True,
        errors="replace",
    )
    try:
        out, err = child.communicate()
    finally:
        _finish(child)
    if capture:
        tail.extend(mask_url(ln) for ln in (err or "").splitlines()[-TAIL_LINES:])
    return child.returncode, out or ""


# --- the CPUs this process may use --------------------------------------------------------------
#
# How many CPUs this process may use: the CPUs it may run on (its affinity, as ``taskset`` and
# cpusets set it) and the CPU time its cgroup may spend (a container's ``--cpus``, a systemd unit's
# ``CPUQuota``), whichever is less. ``os.cpu_count()`` counts the machine's CPUs and knows neither,
# so pools sized by it start 16 workers on 2 CPUs. Every worker count comes from
# :func:`cpus_available`.
#
# A quota of 1.5 CPUs counts as 2: the second worker uses the half CPU the first leaves.

PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")


def cpus_available(proc_cgroup: Path = PROC_CGROUP, mountinfo: Path = PROC_MOUNTINFO) -> int:
    """The CPUs this process may use (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(proc_cgroup, mountinfo)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(cpus, 1)


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``QUOTA PERIOD``, QUOTA ``max`` for none) as CPUs, or None."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def parse_cfs(quota: str, period: str) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` as CPUs (quota -1: none)."""
    return _ratio(quota.strip(), period.strip())


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_quota(proc_cgroup: Path = PROC_CGROUP, mountinfo: Path = PROC_MOUNTINFO) -> float | None:
    """The smallest CPU quota on the way from this process's cgroup up to its hierarchy's root
    (a parent's limit binds its children), in CPUs; None when there is none or it is unknown."""
    try:
        memberships = proc_cgroup.read_text(encoding="utf-8").splitlines()
        mounts = mountinfo.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    quotas = []
    for mount, sub, version in _cpu_cgroups(memberships, mounts):
        for level in (sub, *sub.parents):  # sub is relative: its last parent is the mount's root
            quota = _read_quota(mount / level, version)
            if quota is not None:
                quotas.append(quota)
    return min(quotas, default=None)


def _cpu_cgroups(memberships: list[str], mounts: list[str]) -> list[tuple[Path, Path, int]]:
    """This process's cgroups that have the cpu controller: (mount point, the cgroup's folder
    relative to it, 2 for cgroup v2 or 1 for v1) per hierarchy."""
    paths: dict[str, str] = {}  # "" for v2, else the v1 hierarchy's controllers
    for line in memberships:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" or "cpu" in controllers.split(","):
            paths[controllers] = path
    found = []
    for line in mounts:
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point, fstype, options = fields[3], fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup2" and "" in paths:
            version, path = 2, paths[""]
        elif fstype == "cgroup" and "cpu" in options:
            key = next((k for k in paths if k and set(k.split(",")) <= set(options)), None)
            if key is None:
                continue
            version, path = 1, paths[key]
        else:
            continue
        # In a cgroup namespace the path is relative to the mount's root already; outside one,
        # a mount of a sub-tree (a container's view) starts at ``root``.
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root) :]
        found.append((Path(point), Path(path.lstrip("/")), version))
    return found


def _read_quota(folder: Path, version: int) -> float | None:
    try:
        if version == 2:
            return parse_cpu_max(folder.joinpath("cpu.max").read_text(encoding="ascii"))
        quota = folder.joinpath("cpu.cfs_quota_us").read_text(encoding="ascii")
        return parse_cfs(quota, folder.joinpath("cpu.cfs_period_us").read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError):
        return None
