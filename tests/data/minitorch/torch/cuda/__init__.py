from torch import _C


def device_count() -> int:
    return max(_C._cuda_getDeviceCount(), 0)


def is_available() -> bool:
    return device_count() > 0


def get_arch_list() -> list[str]:
    return _C._cuda_getArchFlags().split() if is_available() else []
