"""smoke planning: import names from real wheels, the scrubbed environment, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rocm_build import config, smoke
from rocm_build.common.errors import ConfigError, UnsafeInput
from rocm_build.run import context
from rocm_build.smoke import environment, junit, wheels
from rocm_build.smoke.plan import flash_expectation
from tests.support.wheels import make_wheel


def test_import_names_from_top_level_txt(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "torch-2.9.0-cp311-cp311-linux_x86_64.whl",
        {
            "torch/__init__.py": "",
            "functorch/__init__.py": "",
            "torch-2.9.0.dist-info/top_level.txt": "functorch\ntorch\ntorchgen\n",
        },
    )
    assert wheels.import_names(wheel) == ("torch",)
    other = make_wheel(
        tmp_path / "pytorch_triton_rocm-3.0.0-cp311-cp311-linux_x86_64.whl",
        {"pytorch_triton_rocm-3.0.0.dist-info/top_level.txt": "triton\n_triton_helpers\n"},
    )
    assert wheels.import_names(other) == ("triton",)


def test_import_names_from_record_layout(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "vecadd-1.0-cp311-cp311-linux_x86_64.whl",
        {
            "vecadd/__init__.py": "",
            "vecadd/lib/libamdhip64.so.5": "",
            "vecadd.libs/libnuma.so.1": "",
            "vecadd-1.0.dist-info/RECORD": "",
        },
    )
    assert wheels.import_names(wheel) == ("vecadd",)


def test_not_a_wheel_is_refused_as_bundle_and_inspect_refuse_it(tmp_path: Path) -> None:
    bad = tmp_path / "x-1.0-py3-none-any.whl"
    bad.write_text("not a zip")
    with pytest.raises(UnsafeInput, match="not a wheel") as err:
        wheels.import_names(bad)
    assert str(err.value).count("not a wheel") == 1


def test_scrub_removes_rocm_locations(tmp_path: Path) -> None:
    rocm = tmp_path / "rocm"
    env = {
        "PATH": f"{rocm}/bin:/opt/rocm-6.2/bin:/usr/bin:/bin",
        "ROCM_PATH": str(rocm),
        "ROCM_HOME": str(rocm),
        "HIP_PATH": str(rocm),
        "LD_LIBRARY_PATH": f"{rocm}/lib",
        "PYTHONPATH": "/somewhere",
        "ROCM_BUILD_ARCH": "gfx90a",
        "HIP_VISIBLE_DEVICES": "0,1",
        "HOME": "/home/u",
    }
    out = environment.scrub_environment(env, [rocm])
    assert out["PATH"] == "/usr/bin:/bin"
    for name in ("ROCM_PATH", "ROCM_HOME", "HIP_PATH", "LD_LIBRARY_PATH", "PYTHONPATH"):
        assert name not in out
    assert "ROCM_BUILD_ARCH" not in out
    assert out["HIP_VISIBLE_DEVICES"] == "0,1"
    assert out["HOME"] == "/home/u"
    assert out["PYTHONNOUSERSITE"] == "1"


def test_plan_collects_packages_targets_and_forbidden_paths(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path / "torchvision-0.24.0-cp311-cp311-linux_x86_64.whl",
        {
            "torchvision/__init__.py": "",
            "torchvision-0.24.0.dist-info/top_level.txt": "torchvision",
        },
    )
    torch = make_wheel(
        tmp_path / "torch-2.9.0-cp311-cp311-linux_x86_64.whl",
        {"torch/__init__.py": "", "torch-2.9.0.dist-info/top_level.txt": "torch"},
    )
    rocm = tmp_path / "rocm"
    cfg = config.load(
        cwd=tmp_path,
        env={"ROCM_PATH": str(rocm), "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/x"},
        flags={"arch": "gfx90a;gfx110X", "smoke.find_links": ["wh"], "smoke.offline": True},
    )
    plan = smoke.plan(context.resolve(cfg), [wheel, torch])
    assert plan.packages == ("torch", "torchvision")  # torch first
    assert plan.targets == ("gfx90a", "gfx1100", "gfx1101", "gfx1102", "gfx1103")
    assert rocm.resolve() in plan.forbidden
    assert (tmp_path / "src") in plan.forbidden
    assert plan.find_links == (tmp_path / "wh",)
    assert "LD_LIBRARY_PATH" not in plan.env
    assert plan.python == sys.executable
    assert plan.run_dir == tmp_path / ".rocm-build" / "smoke"


@pytest.mark.parametrize(
    ("wheels", "flags", "match"),
    [
        ([], {}, "no wheels to test"),
        (["missing.whl"], {}, "wheel not found"),
        (["w-1.0-py3-none-any.whl"], {"smoke.offline": True}, "--offline needs --find-links"),
        (
            ["w-1.0-py3-none-any.whl"],
            {"arch": "gfx9000"},
            "'gfx9000' is not a known target; did you mean gfx900",
        ),
        (
            ["w-1.0-py3-none-any.whl"],
            {"smoke.upstream_tests": "test_nn.py"},
            "needs the torch checkout",
        ),
    ],
)
def test_plan_rejects_bad_input(
    tmp_path: Path, wheels: list[str], flags: dict[str, object], match: str
) -> None:
    make_wheel(tmp_path / "w-1.0-py3-none-any.whl", {"w/__init__.py": ""})
    cfg = config.load(cwd=tmp_path, env={}, flags=flags)
    with pytest.raises(ConfigError, match=match):
        smoke.plan(context.resolve(cfg), [tmp_path / w for w in wheels])


def test_upstream_pattern_must_match_a_test_file(tmp_path: Path) -> None:
    make_wheel(tmp_path / "w-1.0-py3-none-any.whl", {"w/__init__.py": ""})
    (tmp_path / "src" / "torch" / "test").mkdir(parents=True)
    (tmp_path / "src" / "torch" / "test" / "test_nn.py").write_text("")
    cfg = config.load(cwd=tmp_path, env={}, flags={"smoke.upstream_tests": "test_jit*.py"})
    with pytest.raises(ConfigError, match="matches no file"):
        smoke.plan(context.resolve(cfg), [tmp_path / "w-1.0-py3-none-any.whl"])
    cfg = config.load(cwd=tmp_path, env={}, flags={"smoke.upstream_tests": "test_nn.py"})
    assert (
        smoke.plan(context.resolve(cfg), [tmp_path / "w-1.0-py3-none-any.whl"]).upstream_dir
        == tmp_path / "src/torch/test"
    )


def test_parse_junit(tmp_path: Path) -> None:
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        '<testcase classname="suite.test_generic" name="test_imports[vecadd]"/>'
        '<testcase classname="suite.test_generic" name="test_code_object_targets[vecadd]">'
        '<failure message="AssertionError: code objects differ&#10;more">trace</failure>'
        "</testcase>"
        '<testcase classname="suite.test_torch" name="test_x"><skipped message="no torch"/>'
        "</testcase></testsuite></testsuites>"
    )
    outcomes = junit.parse_junit(xml)
    assert [(o.outcome, o.headline) for o in outcomes] == [
        ("passed", ""),
        ("failed", "AssertionError: code objects differ"),
        ("skipped", "no torch"),
    ]
    assert outcomes[1].name == "suite.test_generic::test_code_object_targets[vecadd]"


@pytest.mark.parametrize(
    ("env", "packages", "arch", "expected"),
    [
        ({}, ["torch"], "gfx942", None),  # no triton under test: not checked
        ({"ROCM_BUILD_FEATURES_FLASH_ATTENTION": "on"}, ["torch", "triton"], "gfx942", True),
        ({"ROCM_BUILD_FEATURES_FLASH_ATTENTION": "off"}, ["torch", "triton"], "gfx942", False),
        ({}, ["torch", "triton"], "gfx1030", False),  # auto, and no target with aotriton kernels
        ({"ROCM_BUILD_BUILD_AOTRITON": "off"}, ["torch", "triton"], "gfx942", False),
        ({}, ["torch", "triton"], "gfx942", None),  # auto + aotriton auto: the build decided
    ],
)
def test_flash_attention_expectation(
    tmp_path: Path, env: dict[str, str], packages: list[str], arch: str, expected: bool | None
) -> None:
    cfg = config.load(cwd=tmp_path, env=env, flags={"arch": arch})
    assert flash_expectation(context.resolve(cfg), packages) is expected
