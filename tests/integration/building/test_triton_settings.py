"""``triton.marker`` and ``triton.wheel_name`` end up in torch's wheel (a ``Requires-Dist`` line,
one ``|``-separated entry of ``PYTORCH_EXTRA_INSTALL_REQUIREMENTS``): a value that is no PEP 508
marker or distribution name is a one-line setting error (exit 2) when the settings are read,
also for ``--dry-run``, before anything is built."""

from __future__ import annotations

import pytest

from .conftest import Workspace

BAD = [
    ("marker", 'platform_system == "Linux" | evil-package>=6.6.6'),
    ("marker", 'platform_system == "a|evil-package"'),
    ("marker", "not a marker"),
    ("wheel_name", "triton|evil-package"),
    ("wheel_name", "triton; os_name == 'nt'"),
]


def _toml(value: str) -> str:
    return "'" + value + "'" if "'" not in value else '"' + value.replace('"', '\\"') + '"'


@pytest.mark.parametrize(("key", "value"), BAD)
@pytest.mark.parametrize("where", ["file", "environment"])
def test_bad_triton_settings_stop_before_anything_is_built(
    workspace: Workspace, key: str, value: str, where: str
) -> None:
    env: dict[str, str] = {}
    if where == "file":
        config = workspace.root / "rocm-build.toml"
        config.write_text(config.read_text() + f"\n[triton]\n{key} = {_toml(value)}\n")
    else:
        env[f"ROCM_BUILD_TRITON_{key.upper()}"] = value
    for args in (["torch", "--dry-run"], ["torch"]):
        res = workspace.build(*args, env=env)
        assert res.returncode == 2, res.stdout + res.stderr
        (line,) = [ln for ln in res.stderr.splitlines() if f"triton.{key}" in ln]
        assert "must be" in line
        assert "Traceback" not in res.stderr
    assert not workspace.wheels.exists()
    assert not (workspace.root / ".rocm-build" / "logs").exists()


def test_a_good_marker_is_taken(workspace: Workspace) -> None:
    marker = 'platform_system == "Linux" and python_version >= "3.9"'
    res = workspace.build("torch", "--dry-run", env={"ROCM_BUILD_TRITON_MARKER": marker})
    assert res.returncode == 0, res.stderr
