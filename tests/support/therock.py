"""Facts of ROCm/TheRock that tests compare rocm-build's own tables against."""

from __future__ import annotations

# TheRock's family strings and their members, as ROCm/TheRock's cmake/therock_amdgpu_targets.cmake
# declares them (therock_add_amdgpu_target ... FAMILY ...), in its order.
THEROCK_FAMILIES = {
    "dcgpu-all": ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1250"),
    "dgpu-all": (
        "gfx900", "gfx906", "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032",
        "gfx1034", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201",
    ),
    "igpu-all": (
        "gfx90c", "gfx1033", "gfx1035", "gfx1036", "gfx1103", "gfx1150", "gfx1151", "gfx1152",
        "gfx1153",
    ),
    "gfx900-dgpu": ("gfx900",),
    "gfx90c-igpu": ("gfx90c",),
    "gfx906-dgpu": ("gfx906",),
    "gfx908-dcgpu": ("gfx908",),
    "gfx90a-dcgpu": ("gfx90a",),
    "gfx94X-all": ("gfx942",),
    "gfx94X-dcgpu": ("gfx942",),
    "gfx950-all": ("gfx950",),
    "gfx950-dcgpu": ("gfx950",),
    "gfx101X-all": ("gfx1010", "gfx1011", "gfx1012"),
    "gfx101X-dgpu": ("gfx1010", "gfx1011", "gfx1012"),
    "gfx103X-all": ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"),
    "gfx103X-dgpu": ("gfx1030", "gfx1031", "gfx1032", "gfx1034"),
    "gfx103X-igpu": ("gfx1033", "gfx1035", "gfx1036"),
    "gfx110X-all": ("gfx1100", "gfx1101", "gfx1102", "gfx1103"),
    "gfx110X-dgpu": ("gfx1100", "gfx1101", "gfx1102"),
    "gfx110X-igpu": ("gfx1103",),
    "gfx115X-all": ("gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx115X-igpu": ("gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx120X-all": ("gfx1200", "gfx1201"),
    "gfx125X-all": ("gfx1250",),
    "gfx125X-dcgpu": ("gfx1250",),
    # before TheRock split gfx906/gfx908/gfx90a apart
    "gfx90X-all": ("gfx906", "gfx908", "gfx90a"),
    "gfx90X-dcgpu": ("gfx906", "gfx908", "gfx90a"),
    "gfx90X-dgpu": ("gfx906",),
}  # fmt: skip
