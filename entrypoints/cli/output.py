"""Terminal output: rich consoles, tables, JSON for scripts, progress bars and spinners.

What the server sent is shown as text, never as terminal control (``escape``): each cell of a
table is escaped whole; a value put in a line of text is passed through ``escape`` by the
command; and the consoles escape every control character but the line break of whatever they
print, so a value a command forgot still cannot move the cursor or rewrite the screen.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from entrypoints.cli.escape import escape as escape  # re-exported: commands escape with it
from entrypoints.cli.escape import escape_lines

if TYPE_CHECKING:
    from rich.progress import Progress

# rich.progress and rich.table are imported where used: every `tp` process imports this module,
# and most print neither a bar nor a table on a terminal (a few hundredths of a second each)


class _Console(Console):
    """A console whose text never controls the terminal: a str printed has its control
    characters (all but the line break) and bidi overrides escaped (``escape_lines``)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        super().print(*(escape_lines(o) if isinstance(o, str) else o for o in objects), **kwargs)


out: Console = _Console(highlight=False, soft_wrap=True)
err: Console = _Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour, no wrapping), for scripts."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    err.print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    """Progress chatter goes to stderr so stdout stays clean for the result."""
    err.print(message, markup=False)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> None:
    """A rich table on a terminal; plain aligned columns (no wrapping, no box) otherwise. Every
    cell is shown escaped (``escape``): a line break, a CR or an ESC in a server's string is
    shown as ``\\n``, ``\\r``, ``\\x1b``, and can neither add a row nor rewrite one."""
    cells = [[escape(v) for v in row] for row in rows]
    if not out.is_terminal:
        widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
        for line in [list(columns), *cells]:
            text = "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
            sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    from rich.table import Table
    from rich.text import Text

    shown = Text(escape(title)) if title is not None else None
    t = Table(title=shown, show_edge=False, header_style="bold")
    for i, c in enumerate(columns):
        t.add_column(c, overflow="fold", no_wrap=i == 0)
    for row in cells:  # plain text: a cell never styles the terminal (server-sent strings)
        t.add_row(*(Text(c) for c in row))
    out.print(t)


def metric_value(value: Any) -> str:
    """A metric value of the API: a number (6 significant digits), or "NaN", "Infinity",
    "-Infinity" as the API writes values that are not finite; "-" for none."""
    if isinstance(value, str):
        return value
    if value is None:
        return "-"
    return f"{value:.6g}"


def short_time(iso: Any) -> str:
    """``2026-12-02T21:41:40.887896Z`` → ``2026-12-02 21:41:40`` (UTC as the server sent it)."""
    text = "" if iso is None else str(iso)
    return text[:19].replace("T", " ") if len(text) >= 19 and text[10] == "T" else text


def human_size(n: int | float) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover


class Bar:
    """A byte-progress bar (packing, uploading); silent when stderr is not a terminal."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def reset(self) -> None:
        if self._progress is not None:
            self._progress.reset(self._task)

    def total(self, n: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, total=n)


@contextmanager
def byte_progress(description: str, total: int | None) -> Iterator[Bar]:
    if not err.is_terminal:
        yield Bar(None, None)
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield Bar(progress, task)


class Spinner:
    def __init__(self, status: Any) -> None:
        self._status = status

    def update(self, text: str) -> None:
        if self._status is not None:
            from rich.text import Text

            self._status.update(Text(escape_lines(text)))  # plain text: a job's reason


@contextmanager
def spinner(text: str) -> Iterator[Spinner]:
    """A spinner with changing text on a terminal; nothing otherwise."""
    if not err.is_terminal:
        yield Spinner(None)
        return
    from rich.text import Text

    with err.status(Text(escape_lines(text))) as status:
        yield Spinner(status)
