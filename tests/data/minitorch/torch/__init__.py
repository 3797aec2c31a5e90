from . import _C, cuda, version

__version__ = "2.9.0"
__all__ = ["_C", "cuda", "version"]
