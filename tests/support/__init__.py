"""Helpers the test modules share: git repositories, HIP libraries, hostile files, a loopback
HTTP server, a kpack writer and reader, ROCm trees, another user's view, recorded progress.

The rule (held by ``tests/unit/test_test_layout.py``): a test module imports helpers only from
``tests.support`` or from its own folder's ``conftest`` and helper modules, never from another
``test_*.py`` module. A helper two test modules need moves here (or into the folder's helper
module), named for its subject."""
