"""The folders the smoke run removes (the last run's folder when it starts, a passing run's
venv when it ends), under the usual attacks (tests/support/hostile.py): what is planted at the
name is refused in one line (exit 14) and left as it is; a folder of its own goes, links inside
it removed and never followed. Removing needs no space, so a full disk is no case here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.common.errors import FileAccessError
from rocm_build.smoke.execute import remove_folder
from tests.support import hostile

#: What no folder of rocm-build's state may be (``statefile.check_folder``); a group-writable
#: one is a user's umask 002, and taken as the user's own.
REFUSED = ("wrong-type", "symlink", "foreign-owner", "world-writable", "open-parent")


@pytest.mark.parametrize("attack", hostile.FOLDER_ATTACKS)
def test_what_is_planted_at_the_venv_is_refused_and_left_alone(tmp_path: Path, attack: str) -> None:
    venv = tmp_path / "smoke" / "venv"
    planted = hostile.plant(venv, attack, elsewhere=tmp_path / "elsewhere", folder=True)
    if attack not in REFUSED:
        remove_folder(venv, "smoke venv")
        assert not venv.exists()
        planted.assert_untouched()
        return
    with pytest.raises(FileAccessError) as err:
        remove_folder(venv, "smoke venv")
    assert err.value.exit_code == 14
    assert str(venv) in str(err.value)
    assert "\n" not in str(err.value)
    planted.assert_left_alone()


def test_a_stale_venv_goes_and_links_inside_are_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim").write_bytes(b"precious\n")
    venv = tmp_path / "smoke" / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "to-elsewhere").symlink_to(elsewhere, target_is_directory=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(elsewhere / "victim")
    remove_folder(venv, "smoke venv")
    assert not venv.exists()
    assert (elsewhere / "victim").read_bytes() == b"precious\n"
    remove_folder(venv, "smoke venv")  # nothing there: nothing to do
