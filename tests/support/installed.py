"""What an installed rocm_build sees, asked of its own Python away from this checkout (no
PYTHONPATH, another working folder): where its package and its package data are."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def run_away(python: Path, cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``python -c script`` away from this checkout: no PYTHONPATH, another working folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(python), "-c", script], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def installed_locations(python: Path, cwd: Path) -> dict[str, str]:
    """Where the rocm_build that ``python`` imports (away from this checkout) finds its
    package: the package and each package-data folder."""
    script = (
        "import json, rocm_build\n"
        "from rocm_build.smoke import suite_dir\n"
        "from rocm_build.sources.patches import shipped_dir\n"
        "print(json.dumps({'package': rocm_build.__file__, 'suite_dir': str(suite_dir()),"
        " 'shipped_dir': str(shipped_dir())}))\n"
    )
    found = run_away(python, cwd, script)
    assert found.returncode == 0, found.stderr[-3000:]
    return dict(json.loads(found.stdout))
