"""rocm-build: PyTorch wheels for AMD GPUs, from pinned sources to self-contained fat wheels."""

__version__ = "0.2.0"
