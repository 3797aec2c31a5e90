"""torch.cuda of the fixture: device count from the fixture's HIP library."""

from torch import _C, _lib


def device_count() -> int:
    return max(int(_lib.fixture_torch_device_count()), 0)


def is_available() -> bool:
    return device_count() > 0


def get_arch_list() -> list:
    return _C._cuda_getArchFlags().split() if is_available() else []
