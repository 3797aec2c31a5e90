"""The manylinux policies (auditwheel's data): what a wheel may take from the system, and the
best platform tag a set of ELF files satisfies."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from rocm_build.binary import elf
from rocm_build.bundle.libraries import MACHINE_ARCH
from rocm_build.common.errors import BundleError, ConfigError

__all__ = [
    "is_loader",
    "platform_tag",
    "policy_priority",
    "policy_whitelist",
    "requested_tag",
    "tag_for_policy",
]


@cache
def _policies() -> tuple[dict[str, Any], ...]:
    """auditwheel's manylinux policy data (a file it ships; its Python API is not public)."""
    text = resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text()
    data = json.loads(text)
    return tuple(sorted(data, key=lambda p: -int(p["priority"])))


def policy_whitelist(name: str = "auto") -> frozenset[str]:
    """Libraries a manylinux wheel may take from the system (the newest policy's list if auto)."""
    policies = [p for p in _policies() if p["name"] != "linux"]
    base, _ = split_arch(name)
    if name in ("auto", "") or _past_newest(base):
        chosen = policies[-1]
    else:
        matches = [p for p in policies if base in (p["name"], *p["aliases"])]
        if not matches:
            known = ", ".join(p["name"] for p in policies)
            raise ConfigError(f"unknown manylinux policy '{name}'; known: {known}")
        chosen = matches[0]
    return frozenset(chosen["lib_whitelist"])


def is_loader(name: str) -> bool:
    return name.startswith("ld-linux") or name in ("ld64.so.1", "ld64.so.2")


def is_path(name: str) -> bool:
    """Whether a NEEDED entry is a path (``/abs/libx.so``, ``../libx.so``, ``dir/libx.so``), which
    the loader opens as it is, relative to the working directory or the root, never through a
    search path: no bundle can satisfy it, and it reaches outside the wheel."""
    return "/" in name or name in (".", "..")


def platform_tag(
    infos: Iterable[elf.ElfInfo], external: Iterable[str], machine: str = "EM_X86_64"
) -> str:
    """The best manylinux tag (with aliases, '.'-joined) the ELF files satisfy, else linux_<arch>.

    Same rules as ``auditwheel show``: every external library in the policy's whitelist, every
    required symbol version (GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*, ...) in its allowed set.
    """
    arch = MACHINE_ARCH.get(machine, "x86_64")
    required: dict[str, set[str]] = {}
    for info in infos:
        for lib, versions in info.versions_by_library:
            if is_loader(lib):
                continue
            for v in versions:
                required.setdefault(v.partition("_")[0], set()).add(v)
    ext = {n for n in external if not is_loader(n)}
    for policy in _policies():
        if policy["name"] == "linux":
            continue
        if not ext <= set(policy["lib_whitelist"]):
            continue
        allowed = {
            prefix: {f"{prefix}_{v}" for v in versions}
            for prefix, versions in policy["symbol_versions"].get(arch, {}).items()
        }
        if all(required[p] <= allowed[p] for p in set(required) & set(allowed)):
            names = [policy["name"], *policy["aliases"]]
            return ".".join(f"{n}_{arch}" for n in names)
    return _past_newest_policy(required, ext, arch) or f"linux_{arch}"


_GLIBC_SYMBOL_VERSION = re.compile(r"GLIBC_2\.(\d+)")


def _past_newest_policy(required: Mapping[str, set[str]], ext: set[str], arch: str) -> str | None:
    """``manylinux_2_N`` for files built against a glibc newer than auditwheel's newest policy.

    PEP 600 defines the tag by the glibc version alone, but auditwheel lists only the policies it
    was released with (a Debian sid root's glibc 2.42 is past its newest). When the newest policy
    accepts everything but newer ``GLIBC_2.N`` versions, the tag is that policy moved up to the
    highest N: the same libraries from the system and the same C++ runtime, a newer glibc.
    """
    newest = next(p for p in reversed(_policies()) if p["name"] != "linux")
    if not ext <= set(newest["lib_whitelist"]):
        return None
    allowed = {
        prefix: {f"{prefix}_{v}" for v in versions}
        for prefix, versions in newest["symbol_versions"].get(arch, {}).items()
    }
    if "GLIBC" not in allowed:
        return None
    for prefix in set(required) & set(allowed) - {"GLIBC"}:
        if not required[prefix] <= allowed[prefix]:
            return None
    known = int(str(newest["name"]).rsplit("_", 1)[-1])
    minors = []
    for version in required.get("GLIBC", set()) - allowed["GLIBC"]:
        match = _GLIBC_SYMBOL_VERSION.fullmatch(version)
        if match is None or int(match.group(1)) <= known:
            return None  # GLIBC_PRIVATE and the like: no manylinux tag allows them
        minors.append(int(match.group(1)))
    return f"manylinux_2_{max(minors)}_{arch}" if minors else None


# --- planning -------------------------------------------------------------------------------------


_ARCH_SUFFIX = re.compile(r"_(x86_64|aarch64|ppc64le|s390x|armv7l|i686)$")


def split_arch(name: str) -> tuple[str, str]:
    """``manylinux_2_28_x86_64`` -> (``manylinux_2_28``, ``x86_64``); no suffix: (name, "")."""
    found = _ARCH_SUFFIX.search(name)
    return (name[: found.start()], found.group(1)) if found else (name, "")


def glibc_minor(name: str) -> int | None:
    """The glibc 2.N a manylinux policy (name or alias, no architecture) stands for."""
    for p in _policies():
        if name in (p["name"], *p["aliases"]) and p["name"] != "linux":
            return int(str(p["name"]).rsplit("_", 1)[-1])
    found = re.fullmatch(r"manylinux_2_(\d+)", name)
    return int(found.group(1)) if found else None


def _past_newest(base: str) -> bool:
    """A PEP 600 tag newer than auditwheel's newest policy (it has no table of its own)."""
    newest = next(p for p in reversed(_policies()) if p["name"] != "linux")
    minor = glibc_minor(base)
    return minor is not None and minor > int(str(newest["name"]).rsplit("_", 1)[-1])


def requested_tag(best: str, plat: str, machine: str, flag: str = "--plat") -> str:
    """The tag for ``--plat PLAT`` (``bundle.policy``), given ``best``, the tag the files
    satisfy: PLAT's own (with its aliases) when its glibc is at least the one ``best`` needs;
    a lower one is refused (``BundleError``, exit 10), as auditwheel repair --plat does."""
    arch = MACHINE_ARCH.get(machine, "x86_64")
    base, suffix = split_arch(plat)
    want = glibc_minor(base)
    if want is None:
        known = ", ".join(p["name"] for p in _policies() if p["name"] != "linux")
        raise ConfigError(f"{flag} {plat}: not a manylinux tag; use auto or one of {known}")
    if suffix and suffix != arch:
        raise ConfigError(
            f"{flag} {plat} is for {suffix}, the wheel's files are {arch}: "
            f"pass --plat {base}_{arch}"
        )
    first = best.split(".")[0]
    need = None if first.startswith("linux_") else glibc_minor(split_arch(first)[0])
    if need is None:
        raise BundleError(
            f"{flag} {plat}: the wheel's files satisfy no manylinux tag ({first}: a library "
            "outside the policy, or symbol versions no policy allows); run rocm-build inspect "
            "on the output to see them, or leave --plat at auto"
        )
    if need > want:
        raise BundleError(
            f"{flag} {plat}: the wheel's files need glibc 2.{need} ({first}), newer than "
            f"{base} allows; build against an older glibc, or pass --plat {first} (or newer)"
        )
    if _past_newest(base):
        return f"{base}_{arch}"
    return tag_for_policy(base, machine)


def policy_priority(name: str) -> int:
    base = re.sub(r"_(x86_64|aarch64|ppc64le|s390x|armv7l|i686)$", "", name)
    for p in _policies():
        if base in (p["name"], *p["aliases"]):
            return int(p["priority"])
    raise ConfigError(f"unknown manylinux policy '{name}'")


def tag_for_policy(name: str, machine: str) -> str:
    arch = MACHINE_ARCH.get(machine, "x86_64")
    base = re.sub(r"_(x86_64|aarch64|ppc64le)$", "", name)
    for p in _policies():
        if base in (p["name"], *p["aliases"]):
            return ".".join(f"{n}_{arch}" for n in (p["name"], *p["aliases"]))
    raise ConfigError(f"unknown manylinux policy '{name}'")
