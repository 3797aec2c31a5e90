"""gfx target names: parsing, family expansion, validation and detection of this machine's GPUs.

A target is a base name (``gfx90a``) with optional target features (``gfx90a:xnack-``). Features
are passed to the compiler verbatim; everything that compares targets (the ROCm tree's support
list, the code objects found in a wheel) compares base names, because offload bundles name the
same ISA with or without features.

LLVM's generic processors (``gfx9-4-generic`` and the like) name code that runs on each of a list
of processors; :data:`GENERIC` holds those lists, and :func:`serves` / :func:`overlaps` are the
one place that decides whether code or data for one name is of use on another.

AMD's target hierarchy comes from the ``rocm-bootstrap`` package (a dependency): the targets it
knows, its groups (``gfx110x``, ``gfx12_5``, ``gfx11``) as families, the decoding of a GPU's KFD
``gfx_target_version`` and its two detection variables, and the package name of a target's device
wheel. What rocm-build keeps of its own, and why:

- TheRock's family strings (``gfx110X-dgpu``, ``dcgpu-all``, ...; ``[targets.families]`` in
  defaults.toml): rocm-bootstrap's groups are LLVM's major/minor split, not TheRock's product
  classes, and rocm-bootstrap 0.3.0 carries none of TheRock's names.
- :data:`GENERIC`: rocm-bootstrap names a group's LLVM generic processor but lists the group's
  members, not the processors the generic's code runs on (``gfx9-4-generic`` also runs on
  gfx950, ``gfx9-generic`` not on gfx908/gfx90a; LLVM's AMDGPUUsage is the reference).
- ``HSA_OVERRIDE_GFX_VERSION``, the topology folder as an argument and the settings' own
  environment: rocm-bootstrap's ``detect_gfx_targets`` reads ``os.environ`` and the fixed sysfs
  path, and knows nothing of the override the ROCm runtime obeys.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import rocm_bootstrap
from rocm_bootstrap import PackagingLevel

from rocm_build.common.errors import ConfigError

__all__ = [
    "BOOTSTRAP_TARGETS",
    "FEATURES",
    "GENERIC",
    "KFD_TOPOLOGY",
    "Targets",
    "base_name",
    "covered",
    "detect_gpus",
    "expand",
    "gfx_tokens",
    "is_known",
    "keeps",
    "members",
    "overlaps",
    "package_key",
    "parse_topology_properties",
    "resolve_targets",
    "serves",
    "serves_id",
    "split_arch",
    "suggest",
    "target_from_version",
]

log = logging.getLogger(__name__)

KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")
#: Target features clang accepts after the ISA name, each with + or -.
FEATURES = ("xnack", "sramecc")
_NAME = re.compile(r"^gfx[0-9a-f]{3,4}$")
#: rocm-bootstrap's targets that a target list can name (gfx + hex digits; its gfx1250-strict is
#: a TheRock build variant that shares gfx1250's package and ISA version).
BOOTSTRAP_TARGETS: tuple[str, ...] = tuple(
    t.name for t in rocm_bootstrap.ALL_TARGETS if _NAME.match(t.name)
)
_GROUP_LEVELS = (PackagingLevel.SUB_FAMILY, PackagingLevel.FAMILY)
#: rocm-bootstrap's groups (key -> members): ``gfx110x``, ``gfx9_4``, ``gfx12``, ...
BOOTSTRAP_GROUPS: Mapping[str, tuple[str, ...]] = {
    b.key: tuple(t.name for t in b.members if _NAME.match(t.name))
    for b in rocm_bootstrap.all_bundles()
    if b.level in _GROUP_LEVELS
}

#: LLVM's generic processors and the processors each one's code runs on (LLVM's AMDGPUUsage,
#: "AMDGPU Generic Processors"; code objects name them since LLVM 19, e.g. ROCm 6.4's rocSOLVER).
GENERIC: Mapping[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset(f"gfx103{i}" for i in range(7)),
    "gfx11-generic": frozenset(
        {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
    ),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
}
# A gfx name in a file or folder name: a generic processor, or gfx + 2-4 digits and a letter.
_TOKEN = re.compile(r"(?<![0-9a-z])gfx(?:\d{1,2}(?:-\d)?-generic|\d{2,4}[a-z]?)(?![0-9a-z])")


def members(target: str) -> frozenset[str]:
    """The processors code for ``target`` runs on: a generic processor's list, else itself."""
    name = base_name(target).lower()
    return GENERIC.get(name, frozenset({name}))


def serves(code: str, target: str) -> bool:
    """Does code (or a data file) built for ``code`` run on every processor ``target`` names?
    ``gfx9-4-generic`` serves ``gfx942``; ``gfx942`` does not serve ``gfx9-4-generic``."""
    return members(target) <= members(code)


def features(target: str) -> dict[str, str]:
    """``gfx90a:sramecc+:xnack-`` -> ``{"sramecc": "+", "xnack": "-"}``."""
    return {f[:-1]: f[-1] for f in target.split(":")[1:] if f[-1:] in ("+", "-")}


def serves_id(code: str, target: str) -> bool:
    """Does a code object for the target id ``code`` (``gfx90a:xnack+``, as an offload bundle
    names it) load on a GPU asked for as ``target``? Its processor :func:`serves` the target's,
    and no feature both name has another sign: ``gfx90a`` and ``gfx90a:xnack+`` serve
    ``gfx90a:xnack+``, ``gfx90a:xnack-`` does not; a target without features (the GPU's mode
    unknown) is served by every variant."""
    if not serves(code, target):
        return False
    wanted = features(target)
    return all(wanted.get(name, sign) == sign for name, sign in features(code).items())


def overlaps(a: str, b: str) -> bool:
    """Do ``a`` and ``b`` share a processor (a data file for ``a`` is of use for ``b``)?"""
    return not members(a).isdisjoint(members(b))


def covered(target: str, found: Iterable[str]) -> bool:
    """Is ``target`` served by code (or data) for one of the names ``found``?"""
    return any(serves(code, target) for code in found)


def keeps(tokens: Iterable[str], targets: Iterable[str]) -> bool:
    """Is a file whose name carries the gfx names ``tokens`` wanted for ``targets``? Yes when
    either is empty (no filter; no target in the name) or one name shares a processor with one
    target (the rule of ``bundle --arch`` for data files)."""
    tokens, targets = list(tokens), list(targets)
    return not tokens or not targets or any(overlaps(k, t) for k in tokens for t in targets)


def gfx_tokens(text: str) -> set[str]:
    """The gfx names in a path or file name, lower case (``TensileLibrary_gfx942.dat``)."""
    return set(_TOKEN.findall(text.lower()))


def split_arch(text: str | Sequence[str]) -> list[str]:
    """``"gfx90a;gfx1030"`` or ``"gfx90a, gfx1030"`` (or a list of such) -> names, in order."""
    parts = [text] if isinstance(text, str) else list(text)
    out: list[str] = []
    for part in parts:
        out.extend(p.strip() for p in re.split(r"[;,\s]+", part) if p.strip())
    return out


def base_name(target: str) -> str:
    """``gfx90a:xnack-`` -> ``gfx90a``."""
    return target.split(":", 1)[0]


def _family(name: str, families: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    """The members of a family named exactly so (any case): the configuration's (TheRock's
    strings, rocm-build's short names, the user's) first, then rocm-bootstrap's groups."""
    lowered = {k.lower(): tuple(v) for k, v in families.items()}
    key = name.lower()
    if key in lowered:
        return lowered[key]
    try:
        bundle = rocm_bootstrap.lookup_bundle(key)
    except ValueError:
        return None
    if bundle.level not in _GROUP_LEVELS:
        return None
    return tuple(t.name for t in bundle.members if _NAME.match(t.name))


def package_key(target: str) -> str:
    """The name a target's device package carries (rocm-bootstrap's dist-safe name of the
    target's own bundle: ``gfx942``); the target's base name where rocm-bootstrap lacks it."""
    name = base_name(target).lower()
    try:
        bundle = rocm_bootstrap.packaging_chain(name)[0]
    except (ValueError, KeyError):
        return name
    return str(rocm_bootstrap.bundle_names(bundle).dist_name)


def is_known(name: str, *, known: Sequence[str], families: Mapping[str, Sequence[str]]) -> bool:
    """Whether ``name`` (no features) is a target or a family :func:`expand` takes."""
    return name.lower() in set(known) or _family(name, families) is not None


def suggest(name: str, *, known: Sequence[str], families: Mapping[str, Sequence[str]]) -> list[str]:
    """The targets, then the families, closest to an unknown name (targets first: a near-miss
    of gfx90a is not a group's name)."""
    close = difflib.get_close_matches(name.lower(), known, n=4, cutoff=0.6)
    groups = [*families, *BOOTSTRAP_GROUPS]
    return close + difflib.get_close_matches(name.lower(), groups, n=2, cutoff=0.6)


def _sample(families: Mapping[str, Sequence[str]]) -> str:
    """A few family names, TheRock's CI strings first, for an error message."""
    names = sorted(families, key=lambda k: ("-" not in k, k.lower()))
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")


def _check_features(item: str, features: Sequence[str]) -> None:
    seen: set[str] = set()
    for feature in features:
        name, sign = feature[:-1], feature[-1:]
        if name not in FEATURES or sign not in "+-" or not sign:
            allowed = ", ".join(f"{f}+ / {f}-" for f in FEATURES)
            msg = f"target '{item}': unknown feature '{feature}'; allowed: {allowed}"
            raise ConfigError(msg)
        if name in seen:
            msg = f"target '{item}' names feature '{name}' twice; keep one"
            raise ConfigError(msg)
        seen.add(name)


def expand(
    names: Iterable[str],
    *,
    known: Sequence[str],
    families: Mapping[str, Sequence[str]],
) -> tuple[str, ...]:
    """Expand families, validate names and features, drop duplicates (first one wins).

    Unknown names raise ``ConfigError`` listing the close matches among targets and families.
    """
    known_set = set(known)
    out: list[str] = []
    for item in names:
        base, *features = item.split(":")
        members = _family(base, families)
        if members is not None:
            if features:
                msg = f"'{item}': features apply to one target, not to the family '{base}'"
                raise ConfigError(msg)
            expanded = list(members)
        else:
            lowered = base.lower()
            if lowered not in known_set:
                close = suggest(lowered, known=known, families=families)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                what = "not a gfx target name" if not _NAME.match(lowered) else "not a known target"
                msg = (
                    f"'{base}' is {what}{hint} (families: TheRock's strings as its CI writes "
                    f"them, {_sample(families)}; rocm-bootstrap's groups, "
                    f"{', '.join(sorted(BOOTSTRAP_GROUPS))}; add a new target under [targets] "
                    "known in rocm-build.toml)"
                )
                raise ConfigError(msg)
            _check_features(item, features)
            expanded = [":".join([lowered, *features])]
        for target in expanded:
            if target not in out:
                out.append(target)
    return tuple(out)


def target_from_version(version: int) -> str | None:
    """KFD's ``gfx_target_version`` (major*10000 + minor*100 + stepping) -> ``gfx90a``: as
    rocm-bootstrap decodes it, else (a target it does not know yet) by the same encoding."""
    if version <= 0:
        return None
    try:
        return str(rocm_bootstrap.parse_gfx_target_version(version).name)
    except ValueError:
        pass
    major, rest = divmod(version, 10000)
    minor, stepping = divmod(rest, 100)
    if minor > 15 or stepping > 15:
        return None
    return f"gfx{major}{minor:x}{stepping:x}"


def parse_topology_properties(text: str) -> str | None:
    """The gfx target of one KFD topology node's ``properties`` file, or None for a CPU node."""
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "gfx_target_version":
            try:
                return target_from_version(int(value.strip()))
            except ValueError:
                return None
    return None


def _override(env: Mapping[str, str]) -> str | None:
    # HSA_OVERRIDE_GFX_VERSION=10.3.0 makes the runtime load gfx1030 code objects on every GPU,
    # so that is the target a build for this machine needs.
    raw = env.get("HSA_OVERRIDE_GFX_VERSION", "").strip()
    if not raw:
        return None
    try:
        major, minor, stepping = (int(p) for p in raw.split("."))
    except ValueError:
        log.warning("ignoring HSA_OVERRIDE_GFX_VERSION=%s (expected MAJOR.MINOR.STEPPING)", raw)
        return None
    return target_from_version(major * 10000 + minor * 100 + stepping)


#: rocm-bootstrap's detection variables: 1 = no detection; a ``,``-separated list of targets.
DISABLE_DETECTION = "ROCM_BOOTSTRAP_DISABLE_DETECTION"
FORCE_GFX_ARCH = "ROCM_BOOTSTRAP_FORCE_GFX_ARCH"


def detect_gpus(env: Mapping[str, str], topology: Path = KFD_TOPOLOGY) -> tuple[str, ...]:
    """The gfx targets of this machine's GPUs (from the amdgpu driver's KFD topology), in node
    order without duplicates; empty when there is no driver or no GPU. rocm-bootstrap's
    variables apply as in its ``detect_gfx_targets``."""
    if env.get(DISABLE_DETECTION, "").strip() == "1":
        return ()
    forced = [n.strip() for n in env.get(FORCE_GFX_ARCH, "").split(",") if n.strip()]
    if forced:
        return tuple(dict.fromkeys(forced))
    found: list[str] = []
    try:
        nodes = sorted(topology.iterdir(), key=lambda p: (len(p.name), p.name))
    except OSError:
        return ()
    for node in nodes:
        try:
            text = (node / "properties").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        target = parse_topology_properties(text)
        if target and target not in found:
            found.append(target)
    override = _override(env)
    if found and override:
        return (override,)
    return tuple(found)


#: Where a run's targets came from (:attr:`Targets.origin`).
FROM_SETTING = "arch setting"
FROM_GPUS = "GPUs of this machine"
NOT_GIVEN = "not given"


@dataclass(frozen=True)
class Targets:
    """A run's gfx targets, decided once (by the run context) and read by every stage.

    ``names`` keep their features (``gfx90a:xnack+``: the compiler and the pruner take them),
    families expanded, duplicates dropped, in order; ``bases`` are their base names (what the
    ROCm tree's support list, data file names and code objects found in a wheel compare);
    ``origin`` says where they came from: the ``arch`` setting, this machine's GPUs, or not given
    (no setting and no detection asked for: ``names`` is empty)."""

    names: tuple[str, ...] = ()
    origin: str = NOT_GIVEN

    @property
    def bases(self) -> tuple[str, ...]:
        """``gfx90a:xnack-;gfx942;gfx90a`` -> ``gfx90a``, ``gfx942``."""
        return tuple(dict.fromkeys(base_name(t) for t in self.names))

    @classmethod
    def parse(
        cls,
        text: str | Sequence[str],
        *,
        known: Sequence[str],
        families: Mapping[str, Sequence[str]],
    ) -> Targets:
        """The targets a setting (``"gfx90a;gfx110X"``) names, no detection; an unknown name is
        a ``ConfigError`` with its close matches; an empty text is no targets (not given)."""
        names = split_arch(text)
        if not names:
            return cls()
        return cls(expand(names, known=known, families=families), FROM_SETTING)


def resolve_targets(
    arch: str | Sequence[str],
    *,
    known: Sequence[str],
    families: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    topology: Path = KFD_TOPOLOGY,
) -> Targets:
    """The targets to build for. ``arch`` is the resolved setting (``--arch``,
    ``PYTORCH_ROCM_ARCH``, config); when empty, this machine's GPUs; when none, an error."""
    given = Targets.parse(arch, known=known, families=families)
    if given.names:
        return given
    detected = detect_gpus(env, topology)
    if detected:
        return Targets(expand(detected, known=known, families=families), FROM_GPUS)
    msg = (
        "no gfx target given and no AMD GPU detected on this machine; pass --arch "
        "(e.g. --arch gfx1100 or --arch 'gfx90a;gfx942') or set PYTORCH_ROCM_ARCH"
    )
    raise ConfigError(msg)


#: Targets with aotriton (flash attention) kernels start with one of these (TheRock's rule).
FLASH_PREFIXES = ("gfx90a", "gfx942", "gfx950", "gfx11", "gfx12")


def flash_targets(targets: Sequence[str]) -> list[str]:
    """The targets among ``targets`` that aotriton has kernels for."""
    return [t for t in targets if t.startswith(FLASH_PREFIXES)]
