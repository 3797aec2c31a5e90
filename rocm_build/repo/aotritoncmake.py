"""What a torch checkout's ``cmake/External/aotriton.cmake`` downloads: aotriton's runtime for
the build's ROCm and one image archive per GPU family of the targets, each with its sha256.

The shape read is PyTorch's since the per-target images (aotriton 0.10): ``set()`` lists
``__AOTRITON_VER``, ``__AOTRITON_MANYLINUX_LIST`` / ``__AOTRITON_ROCM_LIST`` /
``__AOTRITON_SHA256_LIST`` (one runtime per ROCm ``major.minor``, chosen by exact match),
``__AOTRITON_IMAGE_LIST`` / ``__AOTRITON_IMAGE_SHA256_LIST``, ``__AOTRITON_Z``, the base URL
(``__AOTRITON_BASE_URL``, which ``$ENV{PYTORCH_AOTRITON_BASE_URL}`` overrides, or a literal
``.../releases/download/`` in ``string(CONCAT __AOTRITON_URL ...)``), and the file names as
``string(CONCAT __AOTRITON_FILE ...)`` templates. An image is wanted when a target matches the
image name after its first 7 characters with ``x`` as any character (CMake's ``MATCHES``: a
search, ``amd-gfx110x`` -> ``110.``). Anything else (the older ``aotriton_version.txt`` shape, a
list of the wrong length, a hash that is not one) is one line, exit 2: nothing is guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rocm_build.common.errors import ConfigError, RocmTreeError

__all__ = ["AOTRITON_CMAKE", "Aotriton", "Download", "parse"]

AOTRITON_CMAKE = "cmake/External/aotriton.cmake"
_SET = re.compile(r"\bset\(\s*(__AOTRITON_\w+)\s+((?:\"[^\"\n]*\"\s*)+)\)")
_CONCAT = re.compile(r"\bstring\(\s*CONCAT\s+(__AOTRITON_(?:FILE|URL))\s+((?:\"[^\"\n]*\"\s*)+)\)")
_QUOTED = re.compile(r"\"([^\"\n]*)\"")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_VAR = re.compile(r"\$\{(\w+)\}")
_ENV_BASE = "PYTORCH_AOTRITON_BASE_URL"


@dataclass(frozen=True)
class Download:
    """One archive the build would download: what it is, from where, and its sha256."""

    what: str  # "aotriton runtime rocm7.14", "aotriton image amd-gfx942", "llvm ..."
    name: str  # the file name
    url: str
    sha256: str


@dataclass(frozen=True)
class Aotriton:
    """The aotriton downloads one ``aotriton.cmake`` names."""

    version: str
    base_url: str
    compression: str
    runtimes: tuple[tuple[str, str, str], ...]  # (rocmX.Y, manylinux, sha256)
    images: tuple[tuple[str, str], ...]  # (amd-gfx942, sha256)
    runtime_file: str  # template with ${...}
    image_file: str

    def runtime(self, rocm_version: str, host_arch: str) -> Download:
        """The runtime for a ROCm ``major.minor[.patch]`` on ``host_arch`` (x86_64)."""
        wanted = "rocm" + ".".join(rocm_version.split(".")[:2])
        for rocm, manylinux, sha in self.runtimes:
            if rocm == wanted:
                name = self._fill(
                    self.runtime_file,
                    __AOTRITON_MANYLINUX=manylinux,
                    __AOTRITON_ARCH=host_arch,
                    __AOTRITON_ROCM=rocm,
                )
                return Download(f"aotriton runtime {rocm}", name, self._url(name), sha)
        have = ", ".join(r for r, _, _ in self.runtimes)
        msg = (
            f"torch's {AOTRITON_CMAKE} names no aotriton runtime for ROCm {wanted[4:]} (it has "
            f"{have}): torch would build aotriton from source; set build.aotriton to an "
            "aotriton install for this ROCm, or features.flash_attention = off"
        )
        raise RocmTreeError(msg)

    def images_for(self, targets: Sequence[str]) -> tuple[Download, ...]:
        """The image archives the targets need, in the file's order."""
        out = []
        for image, sha in self.images:
            pattern = image[7:].replace("x", ".")
            if any(re.search(pattern, t) for t in targets):
                name = self._fill(self.image_file, image=image)
                out.append(Download(f"aotriton image {image}", name, self._url(name), sha))
        return tuple(out)

    def _fill(self, template: str, **values: str) -> str:
        known = {"__AOTRITON_VER": self.version, "__AOTRITON_Z": self.compression, **values}
        return _VAR.sub(lambda m: known[m.group(1)], template)

    def _url(self, name: str) -> str:
        return f"{self.base_url.rstrip('/')}/{self.version}/{name}"


def _strip_comments(text: str) -> str:
    # A '#' outside quotes starts a comment (no bracket comments in the shape read).
    return "\n".join(
        re.sub(r"#(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$).*", "", ln) for ln in text.split("\n")
    )


def _lists(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for match in _SET.finditer(text):
        found.setdefault(match.group(1), _QUOTED.findall(match.group(2)))
    return found


def _not_understood(where: str, why: str) -> ConfigError:
    return ConfigError(
        f"{where}: not the aotriton.cmake shape rocm-build reads ({why}); set build.aotriton "
        "to an aotriton install, or features.flash_attention = off"
    )


def _base_url(text: str, env: Mapping[str, str]) -> str:
    if f"$ENV{{{_ENV_BASE}}}" in text and env.get(_ENV_BASE):
        return env[_ENV_BASE]
    sets = [m for m in _SET.finditer(text) if m.group(1) == "__AOTRITON_BASE_URL"]
    value: str
    for value in [
        *(v for m in sets for v in _QUOTED.findall(m.group(2))),
        *(v for m in _CONCAT.finditer(text) for v in _QUOTED.findall(m.group(2))),
    ]:
        if re.match(r"https?://", value):
            return value
    return ""


def _templates(text: str, where: str) -> tuple[str, str]:
    files = [
        "".join(_QUOTED.findall(m.group(2)))
        for m in _CONCAT.finditer(text)
        if m.group(1) == "__AOTRITON_FILE"
    ]
    runtime = [f for f in files if "-shared" in f and "${image}" not in f]
    image = [f for f in files if "${image}" in f]
    if len(runtime) != 1 or len(image) != 1:
        raise _not_understood(where, "no single runtime and image file name template")
    allowed = {"__AOTRITON_VER", "__AOTRITON_Z", "__AOTRITON_MANYLINUX", "__AOTRITON_ARCH"}
    for template, more in ((runtime[0], {"__AOTRITON_ROCM"}), (image[0], {"image"})):
        odd = set(_VAR.findall(template)) - allowed - more
        if odd or "/" in template:
            raise _not_understood(where, f"file name {template} uses {', '.join(sorted(odd))}")
    return runtime[0], image[0]


def parse(text: str, where: str, env: Mapping[str, str]) -> Aotriton:
    """The downloads ``text`` (the file at ``where``) names; ``env`` is the build's environment
    (``PYTORCH_AOTRITON_BASE_URL``)."""
    clean = _strip_comments(text)
    lists = _lists(clean)
    names = (
        "__AOTRITON_VER",
        "__AOTRITON_MANYLINUX_LIST",
        "__AOTRITON_ROCM_LIST",
        "__AOTRITON_SHA256_LIST",
        "__AOTRITON_IMAGE_LIST",
        "__AOTRITON_IMAGE_SHA256_LIST",
        "__AOTRITON_Z",
    )
    missing = [n for n in names if n not in lists]
    if missing:
        raise _not_understood(where, f"no set({missing[0]} ...)")
    rocms, manylinux, shas = (
        lists["__AOTRITON_ROCM_LIST"],
        lists["__AOTRITON_MANYLINUX_LIST"],
        lists["__AOTRITON_SHA256_LIST"],
    )
    images, image_shas = lists["__AOTRITON_IMAGE_LIST"], lists["__AOTRITON_IMAGE_SHA256_LIST"]
    if not (len(rocms) == len(manylinux) == len(shas)) or len(images) != len(image_shas):
        raise _not_understood(where, "lists of different lengths")
    for sha in [*shas, *image_shas]:
        if not _HEX64.fullmatch(sha):
            raise _not_understood(where, f"'{sha}' is not a sha256")
    version, z = lists["__AOTRITON_VER"][0], lists["__AOTRITON_Z"][0]
    if not re.fullmatch(r"[0-9A-Za-z._-]+", version) or not re.fullmatch(r"[a-z0-9]+", z):
        raise _not_understood(where, f"version '{version}' or compression '{z}'")
    if any(not re.fullmatch(r"amd-gfx[0-9a-z]+", i) for i in images):
        raise _not_understood(where, "an image name that is not amd-gfx...")
    base = _base_url(clean, env)
    if not base:
        raise _not_understood(where, "no base URL")
    runtime_file, image_file = _templates(clean, where)
    return Aotriton(
        version=version,
        base_url=base,
        compression=z,
        runtimes=tuple(zip(rocms, manylinux, shas, strict=True)),
        images=tuple(zip(images, image_shas, strict=True)),
        runtime_file=runtime_file,
        image_file=image_file,
    )
