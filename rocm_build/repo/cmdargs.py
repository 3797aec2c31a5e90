"""Values that reach a git or pip command line as arguments: URLs, refs, names, paths.

A value that starts with ``-`` is an option to git (``--upload-pack=COMMAND`` runs COMMAND), so
each such value is passed after ``--`` where the command has one, and refused here where it has
not (a ref, a revision). An origin must be something git fetches from on purpose: a URL with a
scheme, an scp-like ``[user@]host:path``, or a path that exists; git's ``TRANSPORT::ADDRESS``
helpers (``ext::`` runs a command) and anything else are refused before git sees them.

A credential in an ``http(s)://user:TOKEN@host`` origin never reaches a command line (any user
may read a process's arguments in ``ps``): ``credentials`` splits it off, git is given the URL
without it, and the credential as an ``Authorization`` header for that host through git's
``GIT_CONFIG_COUNT`` environment (a process's environment only its own user can read).
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from rocm_build.common.errors import ConfigError
from rocm_build.common.masking import mask_url

__all__ = ["check_origin", "check_ref", "credentials", "positional"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# git's own rule: "host:path" is scp-like when no '/' comes before the first ':'.
_SCP = re.compile(r"^(?:[^@/:\s]+@)?([^@/:\s]+):(?!//)(.+)$")
# What git check-ref-format refuses anywhere in a name (besides control characters).
_BAD_REF = re.compile(r"[\s~^:?*\[\\]|\.\.|@\{|//|\.lock(?:/|$)|/\.|^/|/$|\.$")


def positional(value: str, what: str) -> str:
    """``value`` if no command can take it as an option; else a one-line ``ConfigError``."""
    if value.startswith("-") or _CONTROL.search(value):
        shown = mask_url(value)[:120]
        msg = (
            f"{what} {shown!r} starts with '-' or holds a control character: a command would take "
            f"it as an option; give a plain {what}"
        )
        raise ConfigError(msg)
    return value


def check_ref(ref: str, where: str) -> str:
    """A branch, tag or commit name as the user gave it (``--ref``, a train, a manifest)."""
    if ref.startswith("-") or _CONTROL.search(ref) or _BAD_REF.search(ref):
        msg = (
            f"{where}: ref {ref[:120]!r} is not a valid git branch, tag or commit name (it starts "
            "with '-' or holds a space, control character, '..', '~^:?*[\\'); check --ref"
        )
        raise ConfigError(msg)
    return ref


def check_origin(origin: str, where: str, cwd: Path) -> str:
    """``origin`` as git should be given it: a URL (``https://``, ``ssh://``, ``file://``...),
    an scp-like ``[user@]host:path``, or an existing folder (made absolute against ``cwd``, since
    git reads a relative one against the checkout). Anything else is a ``ConfigError``."""
    shown = mask_url(origin)[:160]
    if not origin or origin.startswith("-") or _CONTROL.search(origin):
        pass
    elif _SCHEME.match(origin):
        parts = urlsplit(origin)
        host = parts.hostname or ""
        if not host.startswith("-") and (parts.netloc or parts.scheme == "file") and parts.path:
            return origin
    elif "::" not in origin and (scp := _SCP.match(origin)) and not scp.group(1).startswith("-"):
        return origin
    elif "::" not in origin:
        path = Path(origin).expanduser()
        path = path if path.is_absolute() else cwd / path
        if path.exists():
            return str(path.absolute())
        msg = (
            f"{where}: origin {shown!r} is neither a URL nor an existing path; give a git URL "
            "(https://..., ssh://..., file:///...), user@host:path, or the path of a repository"
        )
        raise ConfigError(msg)
    msg = (
        f"{where}: origin {shown!r} is not a git URL rocm-build fetches from (it starts with '-', "
        "holds a control character, names a TRANSPORT:: helper, or has no host or path); give "
        "https://..., ssh://..., file:///..., user@host:path, or the path of a repository"
    )
    raise ConfigError(msg)


def credentials(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without the credential in its user part, and the environment that gives git that
    credential instead: ``http.<scheme>://<host>/.extraHeader`` (so the project's submodules on
    the same host get it too, as they did through relative URLs) set through ``GIT_CONFIG_*``,
    after any such settings the caller's environment already holds. A URL without one (or not
    ``http(s)``) comes back as it is, with no environment."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or "@" not in parts.netloc:
        return url, {}
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, password = userinfo.partition(":")
    secret = f"{unquote(user)}:{unquote(password) if sep else ''}"
    bare = urlunsplit(parts._replace(netloc=hostport))
    first = os.environ.get("GIT_CONFIG_COUNT", "0")
    index = int(first) if first.isdigit() else 0
    token = base64.b64encode(secret.encode()).decode()
    return bare, {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": f"http.{parts.scheme.lower()}://{hostport}/.extraHeader",
        f"GIT_CONFIG_VALUE_{index}": f"Authorization: Basic {token}",
    }
