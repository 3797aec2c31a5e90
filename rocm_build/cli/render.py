"""Rendering: the consoles, the run's State (global flags, settings shown, JSON out), rich
progress bars, the download bar and log formatting. Library code never prints; this does."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgressBars
from rich.text import Text

from rocm_build import __version__, config
from rocm_build.cli import given
from rocm_build.common.masking import mask_data, mask_url
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.common.sizes import human_size
from rocm_build.run import context
from rocm_build.run.context import RunContext

# Never hard-wrap at the terminal width: stdout carries paths and results that scripts read, and
# stderr ends up in CI logs, where a path cut at column 80 cannot be copied.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)


@dataclass
class State:
    config_file: Path | None = None
    verbose: int = 0
    quiet: bool = False
    json: bool = False
    debug_traceback: bool = False
    no_wait: bool = False

    def resolve(
        self,
        flags: Mapping[str, Any] | None = None,
        *,
        tree: bool = False,
        targets: bool = False,
        dry_run: bool = False,
    ) -> RunContext:
        """The run context (:meth:`context`), with the settings shown first (stderr, so --json
        stays clean). A ``dry_run`` downloads no tree: a URL must be in the cache already.
        ``flags``: settings the command decides itself, over the setting flags given."""
        ctx = self.context(flags)
        if not self.quiet and not self.json:
            show_settings(ctx.settings, only_changed=self.verbose == 0)
        return ctx.decide(tree=tree, targets=targets, download=not dry_run)

    def context(
        self, flags: Mapping[str, Any] | None = None, *, tree: bool = False, targets: bool = False
    ) -> RunContext:
        """How every command makes its run context: this run's settings (the global flags, the
        setting flags given on the command line (:mod:`.given`) and ``flags`` over the files and
        the environment), the folders, and the ROCm tree and the gfx targets where the command
        needs them (decided once, before any plan; a tree download shows a bar unless --quiet or
        --json). Not shown (``resolve`` shows it)."""
        explicit = {k: v for k, v in (flags or {}).items() if v is not None}
        flags = {**given.flags(), **explicit, "no_wait": True if self.no_wait else None}
        cfg = config.from_environment(flags=flags, config_file=self.config_file)
        show = not (self.quiet or self.json)
        download = render_download if show else None
        return context.resolve(cfg, download_progress=download, tree=tree, targets=targets)

    def emit(self, data: Any) -> None:
        """Machine output for --json (credentials in URLs masked, as everywhere)."""
        click.echo(mask_url(json.dumps(mask_data(data), indent=2, sort_keys=True, default=str)))

    def progress(self) -> Progress:
        """Where stages report progress: rich bars on stderr, or nothing with --quiet/--json."""
        if self.quiet or self.json:
            return NO_PROGRESS
        return RichProgress(verbose=self.verbose > 0)


class _CountColumn(ProgressColumn):
    """'12/40', or sizes for byte counts; just the count while the total is unknown."""

    def render(self, task: Task) -> Text:
        as_size = "bytes" in str(task.description)
        done = human_size(int(task.completed)) if as_size else str(int(task.completed))
        if task.total is None:
            return Text(done if task.completed else "", style="progress.download")
        total = human_size(int(task.total)) if as_size else str(int(task.total))
        return Text(f"{done}/{total}", style="progress.download")


class RichProgress:
    """The ``progress.Progress`` the CLI hands to stages: transient rich bars on stderr.

    The live display runs only while a task is open, so other live displays (the download
    bar) can run between stages. With --verbose each finished task leaves a line."""

    def __init__(self, *, verbose: bool = False) -> None:
        self.verbose = verbose
        self.bars = RichProgressBars(
            SpinnerColumn(),
            TextColumn("{task.description}", style="progress.description", markup=False),
            BarColumn(),
            _CountColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}
        self.live = False

    def start(self, task: str, total: int | None = None) -> None:
        if task in self.tasks:
            self.bars.update(self.tasks[task], total=total)
            return
        if not self.live:
            self.bars.start()
            self.live = True
        self.tasks[task] = self.bars.add_task(task, total=total)

    def advance(self, task: str, n: int = 1) -> None:
        if task in self.tasks:
            self.bars.advance(self.tasks[task], n)

    def done(self, task: str) -> None:
        task_id = self.tasks.pop(task, None)
        if task_id is None:
            return
        info = next(t for t in self.bars.tasks if t.id == task_id)
        if self.verbose and (info.total is not None or info.completed):
            count = _CountColumn().render(info)
            err_console.print(f"  {task}: {count.plain}", markup=False, highlight=False)
        self.bars.remove_task(task_id)
        if not self.tasks:
            self.close()

    def close(self) -> None:
        if self.live:
            self.bars.stop()
            self.live = False


pass_state = click.make_pass_decorator(State, ensure=True)


def show_settings(
    cfg: config.Config, *, only_changed: bool, console: Console | None = None
) -> None:
    """The settings (stderr by default: a command's own output stays clean on stdout)."""
    console = console or err_console
    rows = [r for r in cfg.describe() if not only_changed or r[2] != "default"]
    source = f" from {cfg.config_file}" if cfg.config_file else ""
    console.print(f"[bold]rocm-build {__version__}[/]: settings{source}", markup=True)
    for key, value, origin in rows:
        shown = escape(mask_url(repr(value)))
        console.print(f"  {key} = {shown}  [dim]({origin})[/]", markup=True)


class _LogFormatter(logging.Formatter):
    """Plain messages; warnings and errors say so, as a compiler's diagnostics do. Credentials
    in URLs are masked here too, whatever a module logged."""

    def format(self, record: logging.LogRecord) -> str:
        message = mask_url(super().format(record))
        if record.levelno >= logging.WARNING:
            return f"rocm-build: {record.levelname.lower()}: {message}"
        return message


def setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 0 else logging.INFO
    handler: logging.Handler
    if err_console.is_terminal:
        handler = RichHandler(
            console=err_console, show_time=False, show_path=False, markup=False, show_level=False
        )
    else:
        # CI logs and files: one line per record, never wrapped at 80 columns.
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormatter("%(message)s"))
    root = logging.getLogger("rocm_build")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def close_bars(bars: Progress) -> None:
    """Stop the live display of a RichProgress (after an error, tasks may be left open)."""
    if isinstance(bars, RichProgress):
        bars.close()


def render_download(url: str) -> tuple[Callable[[int, int | None], None], Callable[[], None]]:
    """A rich progress bar for a download; (callback, close)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TransferSpeedColumn,
    )

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=None)
    started = False

    def update(done: int, total: int | None) -> None:
        nonlocal started
        if not started:
            bar.start()
            started = True
        bar.update(task, completed=done, total=total)

    def close() -> None:
        if started:
            bar.stop()

    return update, close
