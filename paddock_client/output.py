"""How the CLI prints: `-o table` (rich, for people) or `-o json` (for scripts: the API's
objects as they came), and progress bars on stderr so stdout stays the answer."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from paddock_client.options import Format

# a column: (header, a function of the row giving the cell)
Column = tuple[str, Callable[[dict], Any]]


def _console() -> Console:
    # looked up per call: tests capture sys.stdout, and a pipe gets no colour codes
    return Console(file=sys.stdout, soft_wrap=True, highlight=False)


def err(message: str) -> None:
    print(f"paddock: {message}", file=sys.stderr)


def field(*path: str) -> Callable[[dict], Any]:
    """A cell from a (nested) key of the row; missing is blank."""

    def get(row: dict) -> Any:
        value: Any = row
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return get


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def show_list(rows: Sequence[dict], columns: Sequence[Column], fmt: Format) -> None:
    if fmt is Format.json:
        print(json.dumps(list(rows), indent=2))
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for header, _ in columns:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(get(row)) for _, get in columns))
    _console().print(table)


def show_one(obj: dict, fmt: Format, keys: Sequence[str] | None = None) -> None:
    """One object: json as is, or a two-column table of its keys."""
    if fmt is Format.json:
        print(json.dumps(obj, indent=2))
        return
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key in keys or list(obj):
        table.add_row(key, _cell(obj.get(key)))
    _console().print(table)


@contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int | None], None]]:
    """A callback for the client's transfers that draws a bar on stderr (a terminal only:
    a log file gets no bar)."""
    console = Console(file=sys.stderr)
    columns = [TextColumn(what), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn()]  # fmt: skip
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        yield update
