"""mkdocs hook: the CLI reference page (``reference/cli.md``), rendered at build time from the
click definitions in ``rocm_build.cli``, so it cannot drift from the code.

Every command of the ``rocm-build`` group, walked recursively (``rocm fetch`` too), gets a
section with its own anchor (``#rocm-build-rocm-fetch``) holding its ``--help`` exactly as the
command prints it. The page exists only in the built site; ``python docs/hooks/cli_reference.py``
prints the same Markdown.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

REPO = Path(__file__).resolve().parents[2]
PAGE = "reference/cli.md"
PROG = "rocm-build"
WIDTH = 100


def _commands(
    cmd: click.Command, ctx: click.Context
) -> Iterator[tuple[click.Command, click.Context]]:
    """``cmd`` and every command under it, depth first, in the order its help lists them."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def anchor(ctx: click.Context) -> str:
    return ctx.command_path.replace(" ", "-")


def render() -> str:
    """The reference page: an index of the commands, then one section per command."""
    if str(REPO) not in sys.path[:1]:
        sys.path.insert(0, str(REPO))  # this checkout's CLI, not another installed copy
    from rocm_build.cli import cli

    root = click.Context(cli, info_name=PROG, terminal_width=WIDTH, max_content_width=WIDTH)
    found = list(_commands(cli, root))
    lines = [
        "# CLI reference",
        "",
        "Every command's `--help`, generated from the code when this site was built.",
        "",
    ]
    lines += [f"- [`{ctx.command_path}`](#{anchor(ctx)})" for _, ctx in found]
    for cmd, ctx in found:
        lines += ["", f"## {ctx.command_path} {{#{anchor(ctx)}}}", ""]
        lines += ["```text", cmd.get_help(ctx).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """Add the generated page to the site's files (mkdocs >= 1.6)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    sys.stdout.write(render())
