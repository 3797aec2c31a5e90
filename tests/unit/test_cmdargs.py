"""The shapes of origins and refs that may reach git's command line (rocm_build.repo.cmdargs)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from rocm_build.common.errors import ConfigError
from rocm_build.repo import cmdargs
from rocm_build.repo.cmdargs import check_origin, check_ref, positional


@pytest.mark.parametrize(
    "origin",
    [
        "https://github.com/pytorch/pytorch.git",
        "https://user:token@example.com/a/b.git",
        "ssh://git@example.com:22/a/b.git",
        "file:///srv/mirror/pytorch",
        "git@github.com:pytorch/pytorch.git",
        "mirror:pytorch.git",
    ],
)
def test_urls_and_scp_forms_pass_unchanged(origin: str, tmp_path: Path) -> None:
    assert check_origin(origin, "test", tmp_path) == origin


@pytest.mark.parametrize(
    "origin",
    [
        "--upload-pack=touch x",
        "-oProxyCommand=x",
        "ext::sh -c touch% x",
        "fd::3",
        "ssh://-oProxyCommand=x/a",
        "https://",
        "file://",
        "https://example.com/a\nb",
        "",
    ],
)
def test_options_helpers_and_empty_urls_are_refused(origin: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a git URL"):
        check_origin(origin, "test", tmp_path)


def test_a_path_must_exist_and_is_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    assert check_origin("mirror", "test", tmp_path) == str(tmp_path / "mirror")
    with pytest.raises(ConfigError, match="neither a URL nor an existing path"):
        check_origin("missing/repo", "test", tmp_path)


@pytest.mark.parametrize("ref", ["v2.5.0", "release/2.5", "refs/tags/v1", "a" * 40, ""])
def test_ref_names_pass(ref: str) -> None:
    assert check_ref(ref, "test") == ref


@pytest.mark.parametrize("ref", ["-x", "--upload-pack=x", "a b", "a..b", "x~1", "a:b", "x\n"])
def test_bad_ref_names_are_refused(ref: str) -> None:
    with pytest.raises(ConfigError, match="not a valid git branch"):
        check_ref(ref, "test")


def test_positional_refuses_a_leading_dash() -> None:
    assert positional("HEAD", "revision") == "HEAD"
    with pytest.raises(ConfigError, match="starts with '-'"):
        positional("--output=x", "revision")


def test_credentials_leave_the_url_for_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    bare, env = cmdargs.credentials("https://me:p%40ss@Host.example:8443/org/repo.git")
    assert bare == "https://Host.example:8443/org/repo.git"
    assert env == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://Host.example:8443/.extraHeader",
        "GIT_CONFIG_VALUE_0": "Authorization: Basic " + base64.b64encode(b"me:p@ss").decode(),
    }
    # A token alone as the user (GitHub's way): sent with an empty password.
    bare, env = cmdargs.credentials("https://ghp_abc@github.com/o/r")
    assert bare == "https://github.com/o/r"
    assert env["GIT_CONFIG_VALUE_0"].endswith(base64.b64encode(b"ghp_abc:").decode())
    # Settings the user's environment already gives git stay: ours come after them.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
    _, env = cmdargs.credentials("http://u:t@h/r")
    assert env["GIT_CONFIG_COUNT"] == "3"
    assert "GIT_CONFIG_KEY_2" in env
    for url in ("https://h/r", "ssh://git@h/r", "git@h:r", "/a/path"):
        assert cmdargs.credentials(url) == (url, {})
