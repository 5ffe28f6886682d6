"""Option parsing shared by the commands: durations, 64-bit integers and ``key=value`` pairs.

A value that does not parse (or a duration too long to represent) is a usage error (exit 2,
click's ``BadParameter``); a well-formed integer beyond 64 bits is invalid input (exit 4): it
can name no id and no position, and PostgreSQL would refuse it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

import click

from pglogq.cli.errors import CliError, Exit

INT8_MIN = -(2**63)
INT8_MAX = 2**63 - 1

_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d|w)")


def parse_duration(text: str) -> timedelta:
    """``1.5`` (seconds), ``250ms``, ``10s``, ``5m``, ``1h30m``, ``2d``."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return _seconds(text, float(s))
    pos = 0
    total = 0.0
    for m in _PART.finditer(s):
        if s[pos : m.start()].strip():
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(f"invalid duration {text!r}: use e.g. 250ms, 10s, 5m, 1h30m, 2d")
    return _seconds(text, total)


def _seconds(text: str, total: float) -> timedelta:
    try:
        if not math.isfinite(total):
            raise OverflowError
        return timedelta(seconds=total)
    except OverflowError:
        raise ValueError(f"duration {text!r} is too long (at most {timedelta.max.days:,} days)") from None


def duration_callback(_ctx: click.Context, param: click.Parameter, value: Any) -> timedelta | None:
    """Click callback: a duration option's text → timedelta (None stays None)."""
    if value is None or isinstance(value, timedelta):
        return value
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def seek_position_callback(_ctx: click.Context, param: click.Parameter, value: Any) -> str | None:
    """Click callback of ``seek --to``: refuse a time that is not finite (``infinity``,
    ``-infinity``, ``infinity ago``): PostgreSQL parses it as a timestamp, but no tick has it."""
    if value is not None and "infinity" in str(value).lower():
        raise click.BadParameter(f"{value!r} is not a finite time: use earliest or latest for the ends "
                                 "of the queue, a tick id, a timestamp or an age such as '15 minutes ago'",
                                 param=param)
    return None if value is None else str(value)


def key_values_callback(_ctx: click.Context, param: click.Parameter, values: Any) -> dict[str, str]:
    """Click callback: repeated KEY=VALUE options → dict."""
    out: dict[str, str] = {}
    for v in values or ():
        key, sep, val = str(v).partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {v!r}", param=param)
        out[key] = val
    return out


class Int8(click.ParamType[int]):
    """An integer PostgreSQL's ``bigint`` can hold; beyond it, invalid input (exit 4)."""

    name = "integer"

    def __init__(self, what: str = "value") -> None:
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        else:
            text = str(value).strip()
            if not re.fullmatch(r"[-+]?\d+", text):
                self.fail(f"{value!r} is not an integer", param, ctx)
        # no int() of thousands of digits (Python refuses those): 20 digits are out of range anyway
        digits = text.lstrip("+-").lstrip("0")
        n = int(text) if len(digits) <= 20 else None
        if n is None or not INT8_MIN <= n <= INT8_MAX:
            name = param.human_readable_name if param is not None else self.what
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise CliError(f"{name} {shown} is out of range: {self.what}s are 64-bit integers"
                           f" ({INT8_MIN}..{INT8_MAX})", Exit.INVALID)
        return n


class Seconds(click.ParamType[float]):
    """A finite, positive number of seconds."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            f = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(f) or f <= 0 or f > 86400 * 365:
            self.fail(f"{value!r} is not a number of seconds between 0 and one year", param, ctx)
        return f
