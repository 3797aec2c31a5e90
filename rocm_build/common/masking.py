"""Credentials in URLs never reach anything rocm-build prints or stores.

One helper for every URL the tool shows or records (git origins, ``--rocm`` tarball URLs,
compiler-cache URLs), wherever it sits inside a text: the password of
``scheme://user:password@host`` becomes ``***`` (the user name stays, it helps to tell
accounts apart), and a user-only token such as ``https://ghp_xxx@github.com`` is masked whole.
SSH user names (``ssh://git@host``) are account names, not secrets, and stay.

A leaf module (standard library only), so ``errors`` and every stage can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "is_masked", "mask_data", "mask_url", "mask_values", "strip_masked"]

MASK = "***"

# scheme://userinfo@ where userinfo stops at the first '/', whitespace or quote; the password is
# everything after the first ':' of it (passwords may hold ':' but not an unescaped '@' or '/').
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)"
    r"(?P<user>[^/@:\s'\"<>]*)"
    r"(?::(?P<password>[^/@\s'\"<>]*))?"
    r"@"
)
# Schemes whose user name is an account name (the secret is a key), not a token.
_ACCOUNT_SCHEMES = ("ssh://", "git+ssh://", "ssh+git://", "sftp://")


def _one(match: re.Match[str]) -> str:
    scheme, user, password = match["scheme"], match["user"], match["password"]
    if password is not None:
        return f"{scheme}{user}:{MASK}@"
    if not user or scheme.lower() in _ACCOUNT_SCHEMES:
        return match[0]
    return f"{scheme}{MASK}@"


def mask_url(text: str) -> str:
    """``text`` with every credential in a ``scheme://...@`` URL inside it masked."""
    if "@" not in text:
        return text
    return _USERINFO.sub(_one, text)


def mask_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (settings, an environment, a result's JSON) with ``mask_url`` applied to
    every string in it, at any depth: for anything printed or written."""
    return {k: mask_data(v) for k, v in values.items()}


def mask_data(value: Any) -> Any:
    """``mask_values`` for any JSON-like value: strings, mappings, lists; the rest as is."""
    if isinstance(value, str):
        return mask_url(value)
    if isinstance(value, Mapping):
        return {k: mask_data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_data(v) for v in value]
    return value


def is_masked(url: str) -> bool:
    """Whether ``url`` holds a credential that was masked (it cannot be used as it is)."""
    return f"{MASK}@" in url and mask_url(url) == url


def strip_masked(url: str) -> str:
    """``url`` without a masked credential: ``https://user:***@host`` -> ``https://user@host``,
    ``https://***@host`` -> ``https://host``, so git asks its credential helper instead."""
    return url.replace(f":{MASK}@", "@").replace(f"://{MASK}@", "://")
