"""A torch-shaped fixture: a HIP library built for PYTORCH_ROCM_ARCH, and its version."""

from .version import __version__

__all__ = ["__version__"]
