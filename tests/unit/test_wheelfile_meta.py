"""A wheel's METADATA and WHEEL texts (wheelmeta): version consistency between file name and
METADATA, requirements read from the headers only, texts made from nothing."""

from __future__ import annotations

from rocm_build.wheel import wheelmeta


def test_metadata_version_wins_over_file_name() -> None:
    meta = "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0+rocm5.2.3\n"
    assert wheelmeta.consistent_version("2.9.0", meta) == "2.9.0+rocm5.2.3"
    assert wheelmeta.consistent_version("2.9.0+rocm5.2.3", meta) == "2.9.0+rocm5.2.3"
    assert wheelmeta.consistent_version("1.0", "Name: x\n") == "1.0"


def test_requirements_come_from_the_headers_not_the_description() -> None:
    meta = (
        "Metadata-Version: 2.1\nName: tv\nVersion: 0.24.0\nRequires-Dist: torch==2.9.0\n"
        'Requires-Dist: pillow; extra == "img"\nRequires-Dist: not a requirement!\n\n'
        "Requires-Dist: numpy (an example in the description)\n"
    )
    assert wheelmeta.requirements(meta) == (
        "torch==2.9.0",
        'pillow; extra == "img"',
        "not a requirement!",
    )
    assert [r.name for r in wheelmeta.parsed_requirements(meta)] == ["torch", "pillow"]
    assert (wheelmeta.metadata_name(meta), wheelmeta.metadata_version(meta)) == ("tv", "0.24.0")


def test_texts_made_from_nothing() -> None:
    meta = wheelmeta.new_metadata("m", "1.0", "S", ["a==1", 'b==1; extra == "x"'], extras=["x"])
    assert meta == (
        "Metadata-Version: 2.1\nName: m\nVersion: 1.0\nSummary: S\nProvides-Extra: x\n"
        'Requires-Dist: a==1\nRequires-Dist: b==1; extra == "x"\n'
    )
    info = wheelmeta.new_wheel_info(["py3-none-any"], purelib=True)
    assert info.splitlines()[2:] == ["Root-Is-Purelib: true", "Tag: py3-none-any"]
    assert wheelmeta.new_wheel_info(["py3-none-x"]).splitlines()[2] == "Root-Is-Purelib: false"
