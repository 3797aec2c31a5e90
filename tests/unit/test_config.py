from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.common.errors import ConfigError


def test_defaults_resolve_and_record_their_source(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert cfg.general.src_dir == "src"
    assert cfg.sources["src_dir"] is config.Source.DEFAULT
    assert cfg.patchset == cfg.general.train
    assert [p.name for p in cfg.selected_projects()] == ["torch", "torchvision", "torchaudio"]


def test_precedence_file_env_flag(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        'src_dir = "from-file"\ntrain = "2.10"\n[checkout]\ndepth = 5\njobs = 3\n'
    )
    env = {"ROCM_BUILD_CHECKOUT_DEPTH": "7", "ROCM_BUILD_SRC_DIR": "from-env"}
    cfg = config.load(cwd=tmp_path, env=env, flags={"src_dir": "from-flag", "train": None})
    assert cfg.general.src_dir == "from-flag"
    assert cfg.sources["src_dir"] is config.Source.FLAG
    assert cfg.checkout.depth == 7
    assert cfg.sources["checkout.depth"] is config.Source.ENVIRONMENT
    assert cfg.checkout.jobs == 3
    assert cfg.sources["checkout.jobs"] is config.Source.FILE
    assert cfg.general.train == "2.10"
    assert cfg.train_refs()["torch"] == "v2.10.0"


def test_pyproject_section_is_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.rocm-build]\noutput_dir = "out"\n')
    cfg = config.load(cwd=tmp_path, env={})
    assert cfg.general.output_dir == "out"
    assert cfg.config_file == tmp_path / "pyproject.toml"


def test_ecosystem_variables(tmp_path: Path) -> None:
    cfg = config.load(
        cwd=tmp_path,
        env={"PYTORCH_ROCM_ARCH": "gfx90a;gfx942", "ROCM_HOME": "/a", "ROCM_PATH": "/b"},
    )
    assert cfg.general.arch == "gfx90a;gfx942"
    assert cfg.general.rocm == "/b"  # ROCM_PATH wins over ROCM_HOME


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("src_dri = 'x'\n", "did you mean 'src_dir'"),
        ("[checkout]\ndepht = 1\n", "did you mean 'depth'"),
        ("[projects.torch]\norigni = 'x'\n", "did you mean 'origin'"),
        ("[checkout]\ndepth = 'deep'\n", "'checkout.depth' must be int"),
    ],
)
def test_bad_file_keys_are_errors_with_a_hint(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "rocm-build.toml").write_text(text)
    with pytest.raises(ConfigError, match=expected):
        config.load(cwd=tmp_path, env={})


def test_unknown_environment_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ROCM_BUILD_TRAIN"):
        config.load(cwd=tmp_path, env={"ROCM_BUILD_TRAN": "2.9"})


def test_user_project_and_flag_overrides(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        "[projects.apex]\norigin = 'https://example.invalid/apex.git'\nref = 'master'\n"
        "depends = ['torch']\n"
    )
    cfg = config.load(
        cwd=tmp_path, env={}, flags={"projects.torch.ref": "abc123", "projects.apex.hipify": []}
    )
    assert cfg.project("torch").ref == "abc123"
    apex = cfg.project("apex")
    assert apex.patches == "apex"
    assert apex.depends == ("torch",)
    assert apex.hipify == ()
    order = [p.name for p in cfg.selected_projects(["apex", "torch"])]
    assert order == ["torch", "apex"]


def test_misspelled_project(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    with pytest.raises(ConfigError, match="did you mean 'torchvision'"):
        cfg.project("torchvison")


def test_unknown_train(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={}, flags={"train": "9.9"})
    with pytest.raises(ConfigError, match=r"unknown release train '9\.9'"):
        cfg.train_refs()


def test_dependency_cycle(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        "[projects.a]\norigin='x'\ndepends=['b']\n[projects.b]\norigin='y'\ndepends=['a']\n"
    )
    cfg = config.load(cwd=tmp_path, env={})
    with pytest.raises(ConfigError, match="cycle"):
        cfg.selected_projects(["a", "b"])


def test_source_fork_takes_torch_from_rocms_fork_at_the_trains_branch(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_SOURCE": "fork", "ROCM_BUILD_TRAIN": "2.9"})
    torch = cfg.project("torch")
    assert torch.origin == "https://github.com/ROCm/pytorch.git"
    assert torch.ref == "release/2.9"
    assert cfg.project("torchvision").origin == "https://github.com/pytorch/vision.git"
    upstream = config.load(cwd=tmp_path, env={})
    assert upstream.project("torch").origin == "https://github.com/pytorch/pytorch.git"
    assert upstream.floors["2.14"]["torch"] == ["hipfile>=7.14"]


def test_which_projects_must_carry_device_code(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    # A torch or torchvision wheel without code objects fell back to CPU; torchaudio's ROCm
    # build has none since 2.9.
    assert cfg.project("torch").device_code
    assert cfg.project("torchvision").device_code
    assert not cfg.project("torchaudio").device_code
    assert cfg.project("torch").version_from_tag
    assert not cfg.project("torchvision").version_from_tag
