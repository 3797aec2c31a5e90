"""The one place that starts processes (GitPython inside ``git.py`` aside).

Every command is an argument list, echoed through logging as ``+ cmd`` (the CLI decides whether
that is shown), optionally teed to a log file, and timed. A non-zero exit raises
``CommandFailed`` whose one-line message names the log and whose ``tail`` keeps the last lines.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import CommandFailed, ToolMissing
from .masking import mask_url

__all__ = ["Result", "run", "which"]

log = logging.getLogger(__name__)

TAIL_LINES = 40


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
    input_text: str | None = None,
    what: str = "",
    on_line: Callable[[str], None] | None = None,
) -> Result:
    """Run ``cmd``; capture its stdout (``capture``) or stream it to ``log_file``.

    With ``log_file`` the command's stdout and stderr go to the file (appended), and the last
    ``TAIL_LINES`` lines are kept for the error message; ``on_line`` is called with each line
    as it is written (a liveness signal for progress). Without either, output is inherited.
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
    stdout = ""
    try:
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            with log_file.open("a", encoding="utf-8", errors="replace") as fh:
                fh.write(f"+ {shown}\n")
                fh.flush()
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
                if input_text is not None and proc.stdin is not None:
                    proc.stdin.write(input_text)
                    proc.stdin.close()
                assert proc.stdout is not None
                chunks: list[str] = []
                for line in proc.stdout:
                    shown_line = mask_url(line)  # a child may print a URL with its credential
                    fh.write(shown_line)
                    tail.append(shown_line.rstrip("\n"))
                    if on_line is not None:
                        on_line(line)
                    if capture:
                        chunks.append(line)
                returncode = proc.wait()
                proc.stdout.close()
                stdout = "".join(chunks)
        else:
            completed = subprocess.run(
                argv,
                cwd=cwd,
                env=full_env,
                input=input_text,
                stdin=None if input_text is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE if capture else None,
                stderr=subprocess.PIPE if capture else None,
                text=True,
                errors="replace",
                check=False,
            )
            returncode = completed.returncode
            stdout = completed.stdout or ""
            if capture:
                tail.extend(
                    mask_url(ln) for ln in (completed.stderr or "").splitlines()[-TAIL_LINES:]
                )
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
