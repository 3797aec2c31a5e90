"""Triton-shaped fixtures shared by the checkout, build and smoke tests: a torch repository that
pins Triton the way PyTorch does (its real pin files), and a Triton repository with a real
``setup.py`` that versions itself as Triton's does (``+git<sha>`` off release branches, then
``TRITON_WHEEL_VERSION_SUFFIX`` appended as given)."""
