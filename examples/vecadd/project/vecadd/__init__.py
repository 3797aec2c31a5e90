"""vecadd: element-wise vector addition on the GPU."""

from ._vecadd import add, device_count, runtime_version

__all__ = ["add", "device_count", "runtime_version"]
