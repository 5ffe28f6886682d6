"""Output of the ``pglogq`` command: human tables (rich) by default, JSON with ``--json``.

JSON conventions (stable): keys are snake_case; timestamps are ISO 8601 strings with a time
zone; durations are numbers of seconds (float); sizes are bytes (integer); absent values are
``null``.  List commands print a JSON array of objects, one per row; others print one object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import sys
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pglogq.cli import jsontext
from pglogq.durations import format_duration

_AS_IS = frozenset({str, int, float, bool})  # exactly these types (a subclass may need more: RawJson)
_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass's field names, looked up once per class


def jsonable(value: Any) -> Any:
    """A value as the JSON conventions above want it."""
    if value is None or type(value) in _AS_IS:
        return value  # most values of a listing: no further test
    names = _FIELDS.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS[type(value)] = tuple(f.name for f in dataclasses.fields(value))
    if names is not None:
        return {n: jsonable(getattr(value, n)) for n in names}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 6)
    if isinstance(value, Decimal) and not value.is_finite():
        return None
    return value  # a finite Decimal is written exactly (jsontext.dumps)


def emit_json(value: Any) -> None:
    click.echo(jsontext.dumps(jsonable(value), indent=2))


def json_line(value: Any) -> str:
    """``value`` as one line of JSON, with its newline."""
    return jsontext.dumps(jsonable(value)) + "\n"


def emit_json_line(value: Any) -> None:
    click.echo(json_line(value), nl=False)


def flush_stdout() -> None:
    """Make sure what was printed has left the process (before acknowledging it)."""
    sys.stdout.flush()


def stdout_closed(exc: BaseException) -> bool:
    """Whether ``exc`` says stdout's reader went away (a closed pipe)."""
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, OSError) and exc.errno == errno.EPIPE)


def quiet_stdout() -> None:
    """After a closed pipe: drop whatever is still buffered for stdout, and print nothing more."""
    with contextlib.suppress(Exception):
        real = sys.__stdout__
        if real is not None and sys.stdout is real:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, real.fileno())
            os.close(devnull)
    sys.stdout = _Quiet(sys.stdout)


class _Quiet:
    """A stdout whose reader went away: writes and flushes do nothing (Python flushes at exit)."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


class _Console(Console):
    """rich's console, except that a closed pipe raises BrokenPipeError for the command to
    handle (a normal end, nothing more acknowledged) instead of exiting 1 on its own."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "stdout closed")


def console(stderr: bool = False) -> Console:
    """A console on the current stdout (or stderr); 80 columns when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return _Console(file=stream, highlight=False, soft_wrap=False)


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
    empty: str | None = None,
    overflow: str = "fold",
) -> Table | None:
    """A compact rich table (or None, after printing ``empty``, when there are no rows).

    ``overflow``: what a cell too wide for 80 columns does: ``fold`` (wrap, nothing lost) or
    ``ellipsis`` (one line per row, cut with …: for overviews whose details are elsewhere)."""
    data = [[fmt(v) for v in r] for r in rows]
    if not data and empty is not None:
        click.echo(empty)
        return None
    align = set(right)
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
              title_style="bold", expand=False)
    for i, c in enumerate(columns):
        # with ellipsis only the text columns give way: numbers and durations keep their width
        keep = max([len(c), *(len(r[i]) for r in data)]) if overflow != "fold" and c in align else None
        t.add_column(c, justify="right" if c in align else "left", overflow=overflow,  # type: ignore[arg-type]
                     no_wrap=keep is not None, min_width=keep)
    for r in data:
        t.add_row(*[Text(c) for c in r])  # cells are data, never rich markup
    return t


def print_table(*args: Any, **kwargs: Any) -> None:
    t = table(*args, **kwargs)
    if t is not None:
        console().print(t)


def fmt(value: Any) -> str:
    """A cell value for humans."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return format_duration(value)  # a setting or an exact span: not rounded
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, (float, Decimal)):
        return f"{float(value):,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (dict, list)):
        return jsontext.dumps(value)
    return str(value)


def duration(value: timedelta | float | None) -> str:
    """A measured age or lag, rounded for reading: ``6.2s``, ``3m5s``, ``2h10m``, ``4d3h``
    (pglogq's one duration format, :mod:`pglogq.durations`)."""
    return format_duration(value, rounded=True)


def size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def ago(when: datetime | None, now: datetime | None = None) -> str:
    if when is None:
        return "never"
    now = now or datetime.now(when.tzinfo)
    return duration(now - when) + " ago"


def short(text: Any, width: int = 40) -> str:
    s = text if isinstance(text, str) else jsontext.dumps(text)
    return s if len(s) <= width else s[: width - 1] + "…"


def info(message: str) -> None:
    """A human message on stderr (kept off stdout, which may be JSON)."""
    click.echo(message, err=True)
