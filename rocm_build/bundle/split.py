"""bundle --split-arch: one fat bundle cut into a host wheel and one device wheel per gfx target.

The fat bundle is made as usual (every requested target's data), into a scratch folder; then one
pass over it, copying members without recompressing them, writes

* the **host wheel**: same name and version as the fat one, every member except the per-target
  data files (ROCm libraries, their device code, target-neutral data). Its METADATA gets one
  ``Provides-Extra: device-<gfx>`` per target, requiring that target's device wheel at exactly
  this version;
* one **device wheel** per target (``bundle.device_name``, ``amd-{project}-device-{target}`` by
  default, as ROCm's CI names them): the data files of that target (a data-tree file whose path
  names the target), at the very paths they have in the fat wheel, and ``Requires-Dist:
  <project>==<version>``. Tagged ``py3-none-<platform>``: one device wheel serves every Python
  version of the host, and installs into platlib beside it (``Root-Is-Purelib: false``).

The kpack archives of kpack-split libraries (TheRock's trees since 2026) are per target already:
each goes into the device wheel of the targets it serves, at the path the library's marker
resolves to, so host and device wheels installed side by side give the loader every archive
(TheRock's own split). Where the tree's runtime loads kpack (``librocm_kpack``), the project's
own libraries with device code are kpack-split the same way (:mod:`.kpackown`). Elsewhere device
code inside shared libraries (HIP fat binaries) stays in the host wheel: the HIP runtime reads it
from the library file it loaded. ``inspect`` of the host wheel shows its bytes per target.

``pip install 'torch[device-gfx942]'`` then installs exactly the files of the fat gfx942 wheel.
A file whose path names several requested targets goes into each of their device wheels (same
bytes: pip lets the second overwrite the first). A wheel with no per-target data at all
(torchvision, which takes torch's libraries) gets no device wheels and no extras.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name

from rocm_build import __version__
from rocm_build.binary import kpack
from rocm_build.bundle import kpackown, platforms, provenance
from rocm_build.bundle.data import data_destination, gfx_tokens, looked_up_at
from rocm_build.bundle.execute import execute as stage_execute
from rocm_build.bundle.model import BundleResult
from rocm_build.bundle.plan import Plan
from rocm_build.bundle.plan import plan as stage_plan
from rocm_build.common import arch, faults, locks, statefile, tempfiles
from rocm_build.common.errors import BundleError, ConfigError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.config.schema import output_settings
from rocm_build.run.context import RunContext
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelName, WheelReader, WheelWriter

__all__ = [
    "DEFAULT_DEVICE_NAME",
    "FatWheel",
    "SplitPlan",
    "SplitResult",
    "device_name",
    "device_requirements",
    "split_arch",
    "split_arch_plan",
    "split_wheel",
]

log = logging.getLogger(__name__)

DEFAULT_DEVICE_NAME = "amd-{project}-device-{target}"
_EXTRA = "device-{target}"


@dataclass(frozen=True)
class SplitResult:
    input: str
    host: str
    devices: Mapping[str, str]  # target -> device wheel path
    status: Literal["split", "up-to-date", "planned"]
    seconds: float
    #: per target: (data files, their bytes uncompressed) moved out of the host wheel
    moved: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    bundle: BundleResult | None = None  # the fat bundle's result
    #: the project's own libraries kpack-split (:meth:`.kpackown.OwnSplit.summary`); None:
    #: not told (an up-to-date or planned split)
    kpack_own: kpackown.OwnSummary | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            **asdict(replace(self, bundle=None, kpack_own=None)),
            "bundle": None if self.bundle is None else self.bundle.as_json(),
            "kpack_own": {} if self.kpack_own is None else self.kpack_own.as_json(),
        }


#: The longest device wheel name: with its version and tags it must stay a file name.
MAX_DEVICE_NAME = 100


def device_name(pattern: str, project: str, target: str) -> str:
    """The device wheel's distribution name: ``pattern`` with {project} and {target} (the
    target's package name as rocm-bootstrap gives it: ``gfx942``)."""
    try:
        name = pattern.format(project=canonicalize_name(project), target=arch.package_key(target))
    except (KeyError, IndexError, ValueError):
        name = ""
    valid = re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name)
    if not valid or target not in name or len(name) > MAX_DEVICE_NAME:
        shown = pattern if len(pattern) <= MAX_DEVICE_NAME else pattern[:MAX_DEVICE_NAME] + "..."
        raise ConfigError(
            f"bundle.device_name '{shown}' does not make a distribution name for {target} "
            f"(letters, digits, . _ -; at most {MAX_DEVICE_NAME} characters): use {{project}} and "
            "{target}, as in " + DEFAULT_DEVICE_NAME
        )
    return name


def device_requirements(metadata: str) -> dict[str, str]:
    """A host wheel's device wheels: target -> requirement, from its ``device-<gfx>`` extras."""
    out: dict[str, str] = {}
    for req in wheelmeta.parsed_requirements(metadata):
        marker = str(req.marker or "")
        match = re.search(r"""extra\s*==\s*['"]device-(gfx[0-9a-z]+)['"]""", marker)
        if match:
            out[match.group(1)] = f"{req.name}{req.specifier}"
    return dict(sorted(out.items()))


def _data_prefixes(rocm: Path, data_trees: Sequence[str], lib_dir: str) -> list[str]:
    """Where the fat bundle put each data tree (as :func:`.data.select_data` does)."""
    return sorted(
        {data_destination(lib_dir, looked_up_at(rocm, t)) for t in data_trees},
        key=len,
        reverse=True,
    )


def member_targets(name: str, prefixes: Sequence[str], targets: Sequence[str]) -> set[str]:
    """The requested targets a data-tree member or kpack archive belongs to (empty:
    target-neutral). An archive goes with every requested target its target id serves (its
    feature variants with their base target, a generic processor's with each it serves)."""
    if name.endswith(".kpack") and f"/{kpack.KPACK_DIR}/" in f"/{name}":
        tokens = gfx_tokens(posixpath.basename(name))
        return {t for t in targets if any(arch.serves(k, t) for k in tokens)}
    for prefix in prefixes:
        if name == prefix or name.startswith(prefix + "/"):
            rel = name[len(prefix) + 1 :] or posixpath.basename(name)
            return gfx_tokens(rel) & set(targets)
    return set()


def _up_to_date(wheel: Path, output_dir: Path, fingerprint: str) -> SplitResult | None:
    """The host and device wheels of these very inputs and settings, if all are there."""
    start = time.monotonic()
    for existing in sorted(output_dir.glob(f"{wheel.name.split('-')[0]}-*.whl")):
        try:
            with WheelReader(existing) as reader:
                _, prov = provenance.found_in(reader)
        except (OSError, BundleError, ValueError):
            continue
        split = prov.get("split")
        if not isinstance(split, dict) or prov.get("fingerprint") != fingerprint:
            continue
        if not statefile.facts_unchanged(prov.get("sources", [])):
            continue
        devices = {t: output_dir / n for t, n in split.get("device_wheels", {}).items()}
        if all(p.is_file() for p in devices.values()):
            log.info("%s and its device wheels are up to date", existing.name)
            paths = {t: str(p) for t, p in devices.items()}
            seconds = time.monotonic() - start
            return SplitResult(str(wheel), str(existing), paths, "up-to-date", seconds)
    return None


@dataclass(frozen=True)
class _Device:
    target: str
    dist: str  # distribution name
    path: Path  # the wheel to write
    dist_info: str


@dataclass(frozen=True)
class _Cut:
    """The fat wheel being cut, which targets each member belongs to, and how the pieces are
    written (each under its lock, counted in one progress task)."""

    reader: WheelReader
    owner: Mapping[str, set[str]]
    deflate: Deflate
    no_wait: bool
    progress: Progress
    task: str
    own: kpackown.OwnSplit = kpackown.NO_SPLIT

    @contextlib.contextmanager
    def writer(self, out: Path, dist_info: str) -> Iterator[WheelWriter]:
        with (
            locks.hold(out, f"the wheel {out}", no_wait=self.no_wait),
            tempfiles.writing(out),
            WheelWriter(out, dist_info, self.deflate) as writer,
        ):
            yield writer


def _write_device(cut: _Cut, device: _Device, project: str, version: str) -> tuple[int, int]:
    """One device wheel: the members of its target, copied as they are; returns their count
    and uncompressed bytes."""
    files = size = 0
    reader = cut.reader
    with cut.writer(device.path, device.dist_info) as writer:
        for m in reader.members:
            if device.target in cut.owner.get(m.name, ()):
                writer.copy_member(reader, m.name)
                files, size = files + 1, size + m.file_size
                cut.progress.advance(cut.task, m.compress_size)
        for arcname, path in cut.own.archives.items():
            if device.target in cut.owner.get(arcname, ()):
                writer.add_file(arcname, path, 0o644, stored=True)
                files, size = files + 1, size + path.stat().st_size
        summary = (
            f"{device.target} kernels and tuning data of {project} {version} (made by rocm-build "
            "bundle --split-arch)"
        )
        meta = wheelmeta.new_metadata(device.dist, version, summary, [f"{project}=={version}"])
        writer.add_bytes(f"{device.dist_info}/METADATA", meta.encode())
        tags = [f"py3-none-{p}" for p in reader.name.platform_tag.split(".")]
        writer.add_bytes(f"{device.dist_info}/WHEEL", wheelmeta.new_wheel_info(tags).encode())
        writer.commit()
    return files, size


def _write_host(
    cut: _Cut, host: Path, new_record: tuple[str, dict[str, Any]], extras: Mapping[str, str]
) -> None:
    """The host wheel: every member no device wheel took, with the new provenance record
    (member, data) and extras."""
    prov_name, prov = new_record
    reader = cut.reader
    record = f"{reader.dist_info}/RECORD"
    with cut.writer(host, reader.dist_info) as writer:
        for m in reader.members:
            if m.is_dir or m.name == record or cut.owner.get(m.name):
                continue
            if m.name == prov_name:
                text = json.dumps(prov, indent=1, sort_keys=True) + "\n"
                writer.add_bytes(m.name, text.encode())
            elif m.name == f"{reader.dist_info}/METADATA":
                writer.add_bytes(m.name, wheelmeta.add_extras(reader.metadata(), extras).encode())
            elif m.name in cut.own.hosts:
                writer.add_file(m.name, cut.own.hosts[m.name], m.mode or 0o755)
            else:
                writer.copy_member(reader, m.name)
            cut.progress.advance(cut.task, m.compress_size)
        for arcname, path in cut.own.archives.items():
            if not cut.owner.get(arcname):  # serves no requested target: never lost
                writer.add_file(arcname, path, 0o644, stored=True)
        writer.commit()


@dataclass(frozen=True)
class FatWheel:
    """One fat wheel to cut, as its bundle wrote it: ``path``, bundled from ``input`` (as
    given), its data trees at ``prefixes``. ``own``: members to kpack-split in ``scratch``
    (:func:`.kpackown.split_own`), their archives going to the device wheels; () when the tree's
    runtime cannot load kpack (``scratch`` None)."""

    path: Path
    input: Path
    prefixes: tuple[str, ...]
    own: tuple[str, ...] = ()
    scratch: Path | None = None


def split_wheel(wheel: FatWheel, plan: SplitPlan, progress: Progress = NO_PROGRESS) -> SplitResult:
    """Cut ``wheel`` into the host wheel and the device wheels named by ``plan``, in its output
    folder: the device wheels first, the host wheel (which names them) last."""
    start = time.monotonic()
    output_dir = plan.fat.output_dir
    with WheelReader(wheel.path) as reader:
        prov_name, prov = provenance.found_in(reader)
        targets = tuple(prov.get("targets", ()))
        if not prov_name or not targets:
            raise BundleError(
                f"{wheel.input.name}: nothing to split (no ROCm library or data bundled, or no gfx "
                "target named): bundle it without --split-arch"
            )
        version = wheelmeta.consistent_version(reader.name.version, reader.metadata())
        project = reader.name.distribution
        owner = {
            m.name: member_targets(m.name, wheel.prefixes, targets)
            for m in reader.members
            if not m.is_dir
        }
        own_split = kpackown.NO_SPLIT
        if wheel.scratch is not None:
            group = re.sub(r"[-.]+", "_", project)
            own_split = kpackown.split_own(reader, wheel.own, group, wheel.scratch)
            owner |= {a: member_targets(a, wheel.prefixes, targets) for a in own_split.archives}
        if not any(owner.values()):  # no data of any target (torchvision): no device wheels
            targets = ()
        plat = reader.name.platform_tag
        devices = []
        for t in targets:
            dist = device_name(plan.pattern, project, t)
            stem = f"{re.sub(r'[-.]+', '_', dist)}-{version}"
            path = output_dir / f"{stem}-py3-none-{plat}.whl"
            devices.append(_Device(t, dist, path, f"{stem}.dist-info"))
        host = output_dir / wheel.path.name
        task = f"{host.name}: split"
        progress.start(task, sum(m.compress_size for m in reader.members))
        cut = _Cut(reader, owner, plan.fat.deflate, plan.fat.no_wait, progress, task, own_split)
        moved: dict[str, tuple[int, int]] = {}
        for device in devices:
            moved[device.target] = _write_device(cut, device, project, version)
            faults.point("bundle.split-device")
        split = {
            "bundle_fingerprint": prov.get("fingerprint", ""),
            "device_wheels": {d.target: d.path.name for d in devices},
            "moved": {t: {"files": n, "bytes": b} for t, (n, b) in moved.items()},
            "kpack_own": own_split.summary().as_json(),
        }
        # a fat bundle of the same settings must not take the host wheel for its own output
        new_prov = {**prov, "fingerprint": plan.fingerprints[wheel.input], "split": split}
        extras = {_EXTRA.format(target=d.target): f"{d.dist}=={version}" for d in devices}
        _write_host(cut, host, (prov_name, new_prov), extras)
        faults.point("bundle.split-host")
        progress.done(task)
    paths = {d.target: str(d.path) for d in devices}
    names = ", ".join(d.path.name for d in devices) or NO_DEVICES
    log.info("split %s: host %s, device wheels: %s", wheel.input.name, host.name, names)
    seconds = time.monotonic() - start
    summary = own_split.summary()
    return SplitResult(
        str(wheel.input), str(host), paths, "split", seconds, moved, kpack_own=summary
    )


def _settings_fingerprint(
    ctx: RunContext,
    wheel: Path,
    with_wheels: Sequence[Path],
    lib_dir: str | None,
    split: tuple[str, bool],
) -> str:
    pattern, kpack_own = split
    cfg = ctx.settings
    return provenance.fingerprint(
        {
            "tool": __version__,
            "split": True,
            "input": statefile.file_facts(wheel.resolve()),
            "rocm": str(ctx.tree.root.resolve()),
            "targets": list(ctx.targets.bases),
            "bundle": output_settings(cfg.bundle),
            "lib_dir": lib_dir,
            "with": [statefile.file_facts(w.resolve()) for w in with_wheels],
            "pattern": pattern,
            "kpack_own": kpack_own,
            "torch_lib_dir": str(cfg.projects["torch"].lib_dir) if "torch" in cfg.projects else "",
        }
    )


@dataclass(frozen=True)
class SplitPlan:
    """What ``bundle --split-arch`` will do: bundle ``wheels`` fat with ``fat`` (into a scratch
    folder ``split_arch`` makes in ``fat.output_dir``), then cut each into a host wheel and a
    device wheel per target, named by ``pattern``."""

    wheels: tuple[Path, ...]  # as given; the fat bundle takes torch first
    fat: Plan
    pattern: str
    #: per wheel (file name): target -> its device wheel's distribution name, for the targets
    #: requested (none requested: those of the wheel's own device code, known once bundled)
    devices: Mapping[str, Mapping[str, str]]
    #: per wheel: its inputs and settings, the no-op check's key (see :func:`_up_to_date`)
    fingerprints: Mapping[Path, str]
    #: the tree's kpack loader ("": its runtime cannot load kpack): the project's own
    #: libraries are kpack-split only where it has one
    kpack_loader: str = ""

    @property
    def dry_run(self) -> bool:
        return self.fat.dry_run

    def as_json(self) -> dict[str, Any]:
        return {
            **self.fat.as_json(),
            "split_arch": True,
            "device_name": self.pattern,
            "devices": {w: dict(d) for w, d in self.devices.items()},
            "kpack_loader": self.kpack_loader,
        }


def split_arch_plan(
    ctx: RunContext,
    wheels: Sequence[Path],
    *,
    with_wheels: Sequence[Path] = (),
    lib_dir: str | None = None,
    dry_run: bool = False,
    mode: Literal["fat", "thin"] = "fat",
) -> SplitPlan:
    """``bundle --split-arch``, decided: the fat bundle's plan (:func:`.plan.plan`, every wheel
    planned as if its fat wheel were not there: they are written into a scratch folder), the
    device wheels' names, each wheel's fingerprint. Writes nothing."""
    if mode == "thin":
        raise ConfigError("--split-arch makes fat wheels: leave out --mode thin")
    settings = ctx.settings.bundle
    pattern = settings.device_name or DEFAULT_DEVICE_NAME
    for wheel in wheels:
        platforms.check_split(wheel, settings.platform)
    for t in ctx.targets.bases:
        device_name(pattern, "project", t)
    devices = {
        w.name: {
            t: device_name(pattern, WheelName.parse(w.name).distribution, t)
            for t in ctx.targets.bases
        }
        for w in wheels
    }
    fat = stage_plan(
        ctx, wheels, with_wheels=with_wheels, lib_dir=lib_dir, dry_run=dry_run, fresh=True
    )
    loader = kpack.tree_loader(ctx.tree.root)
    split = (pattern, loader is not None)
    prints = {w: _settings_fingerprint(ctx, w, with_wheels, lib_dir, split) for w in wheels}
    return SplitPlan(tuple(wheels), fat, pattern, devices, prints, str(loader or ""))


def split_arch(plan: SplitPlan, progress: Progress = NO_PROGRESS) -> list[SplitResult]:
    """Bundle each wheel fat (torch first, see :func:`.execute.execute`) into a scratch folder,
    then split it into the output folder (``dry_run``: the fat bundle's plan, nothing written).
    Nothing to do when the host and device wheels of the same inputs are there already."""
    if plan.dry_run:
        fats = stage_execute(plan.fat).results
        return [_planned(r, plan.pattern) for r in fats]
    output_dir = plan.fat.output_dir
    tempfiles.check_folder(output_dir)
    tempfiles.sweep(output_dir)  # again when the split ends (swept): see tempfiles.swept
    done = {w: _up_to_date(w.resolve(), output_dir, plan.fingerprints[w]) for w in plan.wheels}
    if all(done.values()):
        return [r for r in done.values() if r is not None]
    settings = plan.fat.settings
    results: list[SplitResult] = []
    with tempfiles.swept(output_dir), tempfiles.folder(output_dir, "split-arch") as scratch:
        fats = stage_execute(plan.fat.into(scratch), progress).results
        by_input = {Path(r.input).resolve(): r for r in fats}
        for index, wheel in enumerate(plan.wheels):
            fat = by_input[wheel.resolve()]
            with WheelReader(Path(fat.output)) as reader:
                _, prov = provenance.found_in(reader)
            prefixes = _data_prefixes(
                plan.fat.rocm, settings.data_trees, str(prov.get("lib_dir", ""))
            )
            fat_wheel = FatWheel(Path(fat.output), wheel, tuple(prefixes))
            if plan.kpack_loader:
                own = kpackown.own_device_code(wheel, fat.closure)
                fat_wheel = replace(fat_wheel, own=own, scratch=scratch / f"own-{index}")
            result = split_wheel(fat_wheel, plan, progress)
            results.append(replace(result, bundle=fat))
    return results


def _planned(fat: BundleResult, pattern: str) -> SplitResult:
    name = WheelName.parse(Path(fat.input).name)
    targets = fat.closure.targets if fat.closure else ()
    devices = {t: device_name(pattern, name.distribution, t) for t in targets}
    return SplitResult(fat.input, fat.output, devices, "planned", fat.seconds, bundle=fat)


NO_DEVICES = (
    "none (no file of any requested target to move out: the host wheel holds the whole bundle)"
)


def lines(result: SplitResult) -> Iterator[str]:
    """One split, for people."""
    word = {"split": "split", "up-to-date": "up to date", "planned": "would split"}[result.status]
    yield f"{word}: {result.host}  ({result.seconds:.1f} s)"
    for target, path in result.devices.items():
        files, size = result.moved.get(target, (0, 0))
        note = f"  ({files} data files, {size} bytes)" if result.status == "split" else ""
        yield f"  {target}: {path}{note}"
    if not result.devices:
        yield f"  device wheels: {NO_DEVICES}"
    else:
        closure = result.bundle.closure if result.bundle else None
        kpacked = [a.arcname for a in closure.kpack.archives] if closure else []
        yield from kpackown.device_code_lines(list(result.devices), kpacked, result.kpack_own)
