"""The data rocm-build reads from auditwheel and delvewheel is there, in the shape it reads.

Neither file is an API the packages promise (auditwheel's ``policy/manylinux-policy.json``,
delvewheel's ``_dll_list`` module), so pyproject.toml bounds both to the major versions this test
has passed on; it is the test to run before raising a bound."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from rocm_build.binary import pe
from rocm_build.bundle import policy
from tests.conftest import REPO


def _bound(name: str) -> Requirement:
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == name]
    return req


def test_auditwheel_policies_have_the_fields_read() -> None:
    installed = Version(metadata.version("auditwheel"))
    assert installed in _bound("auditwheel").specifier
    policies = policy._policies()
    assert len(policies) > 5
    for p in policies:
        assert {"name", "aliases", "priority", "symbol_versions", "lib_whitelist"} <= set(p)
    names = {p["name"] for p in policies}
    assert {"linux", "manylinux_2_17", "manylinux_2_28"} <= names
    assert "libc.so.6" in policy.policy_whitelist("manylinux_2_28")
    assert "libamdhip64.so.6" not in policy.policy_whitelist("manylinux_2_28")


def test_delvewheels_dll_lists_have_the_names_read() -> None:
    from delvewheel import _dll_list

    installed = Version(metadata.version("delvewheel"))
    assert installed in _bound("delvewheel").specifier
    for attr in ("ignore_names_x64", "ignore_names_arm64", "ignore_names_x86"):
        names = getattr(_dll_list, attr)
        assert "kernel32.dll" in names, attr
        assert all(isinstance(n, str) and n == n.lower() for n in names), attr
    assert all(isinstance(r, re.Pattern) for r in _dll_list.ignore_regexes)
    assert pe.windows_provides("KERNEL32.dll", "IMAGE_FILE_MACHINE_AMD64")
    assert not pe.windows_provides("amdhip64_6.dll", "IMAGE_FILE_MACHINE_AMD64")


def test_package_data_in_an_archive_is_one_clear_error(tmp_path: Path) -> None:
    """A zipped install cannot give pytest or git a folder: the one lookup both use says so."""
    import sys
    import zipfile

    from rocm_build.common.errors import ConfigError
    from rocm_build.common.packagedata import data_folder

    archive = tmp_path / "pkg.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped_rb_pkg/__init__.py", "")
        zf.writestr("zipped_rb_pkg/suite/conftest.py", "")
    sys.path.insert(0, str(archive))
    try:
        with pytest.raises(ConfigError, match=r"the smoke suite is inside an archive .* pytest"):
            data_folder("zipped_rb_pkg", "suite", "the smoke suite", "pytest can run")
    finally:
        sys.path.remove(str(archive))
        sys.modules.pop("zipped_rb_pkg", None)
    assert data_folder("rocm_build.smoke", "suite", "x", "y").is_dir()
