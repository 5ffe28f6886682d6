"""Option parsing shared by the commands: durations and ``key=value`` pairs."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import click

_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d|w)")


def parse_duration(text: str) -> timedelta:
    """``1.5`` (seconds), ``250ms``, ``10s``, ``5m``, ``1h30m``, ``2d``."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return timedelta(seconds=float(s))
    pos = 0
    total = 0.0
    for m in _PART.finditer(s):
        if s[pos : m.start()].strip():
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(f"invalid duration {text!r}: use e.g. 250ms, 10s, 5m, 1h30m, 2d")
    return timedelta(seconds=total)


def duration_callback(_ctx: click.Context, param: click.Parameter, value: Any) -> timedelta | None:
    """Click callback: a duration option's text → timedelta (None stays None)."""
    if value is None or isinstance(value, timedelta):
        return value
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def key_values_callback(_ctx: click.Context, param: click.Parameter, values: Any) -> dict[str, str]:
    """Click callback: repeated KEY=VALUE options → dict."""
    out: dict[str, str] = {}
    for v in values or ():
        key, sep, val = str(v).partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {v!r}", param=param)
        out[key] = val
    return out
