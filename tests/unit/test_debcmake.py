"""Debian's CMake files rewritten for a tree (rocm_build.rocm.debcmake): the generated forms."""

from __future__ import annotations

from pathlib import Path

from rocm_build.rocm import debcmake

STEP = 'get_filename_component(_IMPORT_PREFIX "${_IMPORT_PREFIX}" PATH)\n'
# As CMake's install(EXPORT) writes a targets file for usr/lib/<multiarch>/cmake/<package>/.
TARGETS = (
    'get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_FILE}" PATH)\n'
    + STEP * 4
    + "set_target_properties(hip-lang::amdhip64 PROPERTIES\n"
    + '  IMPORTED_LOCATION_RELEASE "${_IMPORT_PREFIX}/lib/x86_64-linux-gnu/libamdhip64.so.6")\n'
    + 'get_filename_component(_realOrig "/usr/lib/x86_64-linux-gnu/cmake/hip-lang" REALPATH)\n'
)
# As configure_package_config_file writes a config file, and hip-lang's own climb.
CONFIG = (
    'get_filename_component(PACKAGE_PREFIX_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../../" ABSOLUTE)\n'
    'get_filename_component(_IMPORT_PREFIX "${_DIR}/../../../../../" REALPATH)\n'
    'set_and_check(hip_LIB_INSTALL_DIR "${PACKAGE_PREFIX_DIR}/lib/x86_64-linux-gnu")\n'
    'include("${CMAKE_CURRENT_LIST_DIR}/../hip/hip-targets.cmake")\n'
)


def test_prefix_steps_climbs_and_library_paths_move_one_folder_up() -> None:
    out = debcmake.rewrite(TARGETS, "x86_64-linux-gnu")
    assert out.count(STEP) == 3
    assert '"${_IMPORT_PREFIX}/lib/libamdhip64.so.6"' in out
    # CMake's "is this the original install folder" check keeps its absolute path
    assert '"/usr/lib/x86_64-linux-gnu/cmake/hip-lang"' in out
    out = debcmake.rewrite(CONFIG, "x86_64-linux-gnu")
    assert '"${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE' in out
    assert '"${_DIR}/../../../../" REALPATH' in out
    assert '"${PACKAGE_PREFIX_DIR}/lib")' in out
    assert '"${CMAKE_CURRENT_LIST_DIR}/../hip/hip-targets.cmake"' in out  # a short climb stays


def test_a_hand_written_climb_on_its_own_variable_moves_one_folder_up() -> None:
    """comgr's config (Debian sid) climbs by AMD_COMGR_PREFIX; left at four steps it ends
    above the tree and find_package(hip), which asks for amd_comgr, fails."""
    step = 'get_filename_component(AMD_COMGR_PREFIX "${AMD_COMGR_PREFIX}" PATH)\n'
    first = 'get_filename_component(AMD_COMGR_PREFIX "${CMAKE_CURRENT_LIST_FILE}" PATH)\n'
    out = debcmake.rewrite(first + step * 4, "x86_64-linux-gnu")
    assert out == first + step * 3
    mixed = first + step * 2 + STEP * 2  # two variables: no run of four on either
    assert debcmake.rewrite(mixed, "x86_64-linux-gnu") == mixed


def test_a_file_written_for_a_tree_is_left_alone() -> None:
    text = 'get_filename_component(P "${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE)\n'
    assert debcmake.rewrite(text + STEP * 3, "x86_64-linux-gnu") == text + STEP * 3


def test_relocate_rewrites_the_files_and_adds_the_device_libs_config(tmp_path: Path) -> None:
    hip_lang = tmp_path / "lib" / "cmake" / "hip-lang"
    hip_lang.mkdir(parents=True)
    (hip_lang / "hip-lang-targets.cmake").write_text(TARGETS)
    (hip_lang / "hip-lang-config.cmake").write_text(CONFIG + "find_dependency(AMDDeviceLibs)\n")
    (hip_lang / "link.cmake").symlink_to("hip-lang-targets.cmake")
    changed = debcmake.relocate(tmp_path, "x86_64-linux-gnu")
    device_libs = tmp_path / "lib/cmake/AMDDeviceLibs/AMDDeviceLibsConfig.cmake"
    assert sorted(p.name for p in changed) == sorted(
        ["hip-lang-targets.cmake", "hip-lang-config.cmake", device_libs.name]
    )
    assert "AMDDeviceLibs_FOUND TRUE" in device_libs.read_text()
    assert debcmake.relocate(tmp_path, "x86_64-linux-gnu") == []  # once is enough


def test_a_link_where_the_device_libs_config_goes_is_not_written_through(tmp_path: Path) -> None:
    hip_lang = tmp_path / "lib" / "cmake" / "hip-lang"
    hip_lang.mkdir(parents=True)
    (hip_lang / "hip-lang-config.cmake").write_text("find_dependency(AMDDeviceLibs)\n")
    folder = tmp_path / "lib" / "cmake" / "AMDDeviceLibs"
    folder.mkdir()
    (folder / "AMDDeviceLibsConfig.cmake").symlink_to(tmp_path / "elsewhere.cmake")
    assert debcmake.relocate(tmp_path, "x86_64-linux-gnu") == []
    assert not (tmp_path / "elsewhere.cmake").exists()
