"""What a new user meets: the help, the exit codes, and one-line errors for their mistakes.

Every test runs the real ``rocm-build`` process; a traceback (exit 70) for a user's mistake is a
bug.
"""

from __future__ import annotations

import re
import shlex
import tarfile
from pathlib import Path

from rocm_build.common.errors import EXIT_CODES
from tests.conftest import CliRunner
from tests.support.clierrors import one_line_error
from tests.support.wheels import tiny_wheel

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"


def test_readme_exit_code_table_is_the_help_text(run_cli: CliRunner, tmp_path: Path) -> None:
    """The README's table and the manual's page (docs/exit-codes.md) both say what --help says."""
    pages = ((REPO / "README.md", "## Exit codes"), (DOCS / "exit-codes.md", "# Exit codes"))
    for doc, heading in pages:
        section = doc.read_text(encoding="utf-8").split(heading, 1)[1].split("\n## ", 1)[0]
        rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", section, flags=re.M))
        assert {int(code): text for code, text in rows.items()} == EXIT_CODES, doc.name
    shown = run_cli(["--help"], cwd=tmp_path, check=True).stdout
    for code, text in EXIT_CODES.items():
        assert re.search(rf"^\s+{code}\s+{re.escape(text)}$", shown, flags=re.M), (code, shown)


def test_help_lists_commands_in_pipeline_order_without_cutting_them(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    shown = run_cli(["--help"], cwd=tmp_path, check=True).stdout
    listing = shown.split("Commands:", 1)[1].split("Exit codes:", 1)[0]
    names = re.findall(r"^  (\S+)  ", listing, flags=re.M)
    assert names == [
        "checkout",
        "save-patches",
        "fetch",
        "build",
        "bundle",
        "inspect",
        "smoke",
        "all",
        "doctor",
        "matrix",
        "config",
        "rocm",
    ]
    assert "..." not in listing
    sub = run_cli(["rocm", "--help"], cwd=tmp_path, check=True).stdout
    assert re.findall(r"^  (\S+)  ", sub.split("Commands:", 1)[1], flags=re.M) == [
        "debian",
        "fetch",
        "run",
        "sysroot",
        "wheels",
    ]
    assert "..." not in sub.split("Commands:", 1)[1]


def test_save_patches_help_names_its_real_default(run_cli: CliRunner, tmp_path: Path) -> None:
    shown = run_cli(["save-patches", "--help"], cwd=tmp_path, check=True).stdout
    assert "the one the checkout used" in " ".join(shown.split())


def test_unknown_train_lists_trains_in_version_order(run_cli: CliRunner, tmp_path: Path) -> None:
    for args in (["checkout", "--train", "9.9"], ["matrix", "--train", "9.9"]):
        result = run_cli(args, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        line = one_line_error(result.stderr)
        assert "did you mean '2.9'? known: 2.9, 2.10, 2.11" in line, line


def test_unknown_project_has_a_readable_hint(run_cli: CliRunner, tmp_path: Path) -> None:
    result = run_cli(["checkout", "torhc"], cwd=tmp_path)
    assert result.returncode == 2
    line = one_line_error(result.stderr)
    assert "did you mean 'torch'? known: torch, torchaudio, torchvision" in line, line


def test_rocm_debian_into_a_folder_that_cannot_exist(run_cli: CliRunner, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    result = run_cli(["rocm", "debian", str(blocker / "rocm")], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "pick a folder you can write to" in one_line_error(result.stderr)


def test_rocm_fetch_of_a_plain_path_says_to_use_rocm(run_cli: CliRunner, tmp_path: Path) -> None:
    result = run_cli(["rocm", "fetch", str(tmp_path / "rocm.tar.gz")], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "pass its folder to --rocm" in one_line_error(result.stderr)


def test_rocm_fetch_of_a_file_url(run_cli: CliRunner, tmp_path: Path) -> None:
    """``file://`` counts as a URL for --rocm and rocm fetch, so it must download."""
    tree = tmp_path / "dist" / "rocm"
    (tree / ".info").mkdir(parents=True)
    (tree / ".info" / "version").write_text("7.0.0\n")
    (tree / "lib").mkdir()
    archive = tmp_path / "rocm.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname="rocm")
    env = {"ROCM_BUILD_BUILD_ROCM_CACHE": str(tmp_path / "cache")}
    result = run_cli(["rocm", "fetch", archive.as_uri()], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    unpacked = Path(result.stdout.strip())
    assert (unpacked / ".info" / "version").read_text() == "7.0.0\n"
    missing = run_cli(["rocm", "fetch", (tmp_path / "gone.tar.gz").as_uri()], cwd=tmp_path, env=env)
    assert missing.returncode == 5, missing.stderr
    assert "is not a file; check the URL" in one_line_error(missing.stderr)


def test_smoke_unknown_target_has_close_matches(run_cli: CliRunner, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path)
    result = run_cli(["smoke", str(wheel), "--arch", "gfx9000"], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = one_line_error(result.stderr)
    assert "'gfx9000' is not a known target; did you mean gfx900" in line, line


def test_all_checks_targets_and_tree_before_the_checkout(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    """A typo in --arch or --rocm must not wait for an hours-long PyTorch checkout."""
    origin = ["--origin", f"torch={(tmp_path / 'nowhere').as_uri()}"]
    bad_arch = run_cli(
        ["all", "torch", "--arch", "gfx9000", "--rocm", str(tmp_path), *origin], cwd=tmp_path
    )
    assert bad_arch.returncode == 2, bad_arch.stderr
    assert "'gfx9000' is not a known target" in one_line_error(bad_arch.stderr)
    bad_tree = run_cli(
        ["all", "torch", "--arch", "gfx90a", "--rocm", str(tmp_path / "no-rocm"), *origin],
        cwd=tmp_path,
    )
    assert bad_tree.returncode == 8, bad_tree.stderr
    assert "no-rocm does not exist" in one_line_error(bad_tree.stderr)
    assert not (tmp_path / "src").exists()


def test_commands_are_shown_with_verbose_only(run_cli: CliRunner, tmp_path: Path) -> None:
    quiet = run_cli(["doctor"], cwd=tmp_path)
    assert "git version" in quiet.stdout + quiet.stderr
    assert not re.search(r"^\+ ", quiet.stderr, flags=re.M), quiet.stderr
    verbose = run_cli(["-v", "doctor"], cwd=tmp_path)
    assert re.search(r"^\+ \S*git --version", verbose.stderr, flags=re.M), verbose.stderr


def _readme_commands() -> list[list[str]]:
    """Every ``rocm-build ...`` line of the sh blocks of the README and the manual (docs/), with
    continuations joined."""
    text = "\n".join(
        p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
    )
    calls = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #", 1)[0].split(">>", 1)[0].strip()
            if line.startswith("rocm-build "):
                calls += _split_inner(shlex.split(line)[1:])
    return calls


def _split_inner(words: list[str]) -> list[list[str]]:
    """``rocm run ROOT -- CMD``: CMD is not rocm run's; when it is rocm-build (after ``env``
    and its assignments), it is a call of its own."""
    if "--" not in words:
        return [words]
    split = words.index("--")
    inner = words[split + 1 :]
    while inner and (inner[0] == "env" or re.fullmatch(r"[A-Z_]+=.*", inner[0])):
        inner = inner[1:]
    calls = [words[:split]]
    if inner and inner[0].rsplit("/", 1)[-1] == "rocm-build":
        calls.append(inner[1:])
    return calls


def test_readme_examples_use_commands_and_flags_that_exist(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    calls = _readme_commands()
    assert len(calls) > 20
    helps: dict[tuple[str, ...], str] = {}
    problems = []
    top = run_cli(["--help"], cwd=tmp_path, check=True).stdout
    for words in calls:
        flags = [w for w in words if w.startswith("-")]
        rest = [w for w in words if not w.startswith("-")]
        path = tuple(rest[:2] if rest[:1] == ["rocm"] else rest[:1])
        if path not in helps:
            shown = run_cli([*path, "--help"], cwd=tmp_path)
            if shown.returncode != 0:
                problems.append(f"rocm-build {' '.join(path)}: no such command")
                continue
            helps[path] = shown.stdout
        for flag in flags:
            name = flag.split("=", 1)[0]
            if not re.search(rf"(^|[\s,]){re.escape(name)}\b", helps[path] + top):
                problems.append(f"rocm-build {' '.join(path)}: no flag {name}")
    assert not problems, problems


def test_docs_flag_tables_match_the_commands(run_cli: CliRunner, tmp_path: Path) -> None:
    """The first flag table of each command's page in the manual (docs/) names only flags the
    command has."""
    tables = {
        "sources.md": "checkout",
        "building.md": "build",
        "bundle.md": "bundle",
        "smoke.md": "smoke",
    }
    problems = []
    for page, command in tables.items():
        table = (DOCS / page).read_text(encoding="utf-8").split("| flag |", 1)[1]
        table = table.split("\n\n", 1)[0]
        flags = {
            f
            for row in table.splitlines()
            for f in re.findall(r"`(--?[a-z][a-z-]*)", row.split("|")[1] if "|" in row else "")
        }
        assert flags, page
        shown = run_cli([command, "--help"], cwd=tmp_path, check=True).stdout
        problems += [f"{command} {f}" for f in sorted(flags) if not re.search(rf"\s{f}\b", shown)]
    assert not problems, problems


def test_inspect_of_a_pure_python_wheel_says_there_is_nothing_to_bundle(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    wheel = tiny_wheel(tmp_path)
    result = run_cli(["inspect", str(wheel)], cwd=tmp_path, check=True)
    assert "ELF files: none (no compiled code: nothing to bundle)" in result.stdout
    missing = run_cli(["inspect", str(wheel), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert missing.returncode == 11, missing.stderr
    assert "gfx90a" in one_line_error(missing.stderr)


def test_config_prints_the_settings_on_stdout(run_cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text("[checkout]\ndepth = 3\n")
    env = {"ROCM_BUILD_BUILD_CACHE_URL": "http://builder:s3cret@127.0.0.1:9/cache"}
    result = run_cli(["config"], cwd=tmp_path, env=env, check=True)
    assert "build.cache_url = 'http://builder:***@127.0.0.1:9/cache'" in result.stdout
    assert "s3cret" not in result.stdout + result.stderr
    assert "  checkout.depth = 3  (file)" in result.stdout.splitlines(), result.stdout
    assert "  checkout.retries = 3  (default)" in result.stdout.splitlines(), result.stdout
    assert "checkout.depth" not in result.stderr


def test_bundle_with_a_missing_tree_says_it_does_not_exist(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    wheel = tiny_wheel(tmp_path)
    result = run_cli(["bundle", str(wheel), "--rocm", str(tmp_path / "gone")], cwd=tmp_path)
    assert result.returncode == 8, result.stderr
    assert "gone does not exist; pass --rocm DIR" in one_line_error(result.stderr)


def test_log_lines_are_not_wrapped_when_stderr_is_not_a_terminal(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 6)
    deep.mkdir()
    (deep / "rocm-build.toml").write_text(
        '[projects.proj]\norigin = "file:///nonexistent/proj.git"\nref = "v1"\n'
        "[checkout]\nretries = 0\n"
    )
    result = run_cli(["-v", "checkout", "proj"], cwd=deep)
    assert result.returncode == 5, result.stderr
    # The settings header and the git commands name the long folder whole, each on one line.
    assert f"settings from {deep / 'rocm-build.toml'}" in result.stderr
    assert re.search(rf"^\+ .*{re.escape(str(deep))}", result.stderr, flags=re.M), result.stderr
    assert "file:///nonexistent/proj.git" in one_line_error(result.stderr)


def test_binary_config_files_are_one_line_errors(run_cli: CliRunner, tmp_path: Path) -> None:
    """A binary file where the config belongs (rocm-build.toml, pyproject.toml): exit 2 naming
    the file, not a traceback."""
    binary = bytes(range(256)) * 4
    for name in ("rocm-build.toml", "pyproject.toml"):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        (folder / name).write_bytes(binary)
        result = run_cli(["config"], cwd=folder)
        assert result.returncode == 2, result.stderr
        line = one_line_error(result.stderr)
        assert name in line
        assert "not UTF-8 text" in line


def test_config_with_a_byte_order_mark_is_read(run_cli: CliRunner, tmp_path: Path) -> None:
    """A UTF-8 byte order mark (Notepad writes one) is accepted, in both config files."""
    (tmp_path / "rocm-build.toml").write_bytes(b"\xef\xbb\xbf[checkout]\ndepth = 3\n")
    result = run_cli(["config"], cwd=tmp_path, check=True)
    assert "  checkout.depth = 3  (file)" in result.stdout.splitlines(), result.stdout
    other = tmp_path / "project"
    other.mkdir()
    (other / "pyproject.toml").write_bytes(
        b'\xef\xbb\xbf[project]\nname = "x"\n[tool.rocm-build.checkout]\ndepth = 4\n'
    )
    result = run_cli(["config"], cwd=other, check=True)
    assert "  checkout.depth = 4  (file)" in result.stdout.splitlines(), result.stdout
