"""The one way pglogq writes a duration for people: the CLI, ``queue config``, the ticker's logs.

The format is also an input: every value it writes is accepted back by ``--set``, by
``pglogq queue config``, by the CLI's duration options and by PostgreSQL's ``interval`` input.

| value | written |
| --- | --- |
| 0 | ``0s`` |
| under a second | ``250ms`` (``0.5ms`` below a millisecond) |
| under a minute | ``6s``, ``1.5s`` |
| longer | units from days down, zero units left out: ``1m30s``, ``2h``, ``1h5s``, ``1d2h`` |
| negative | ``-`` first: ``-2s`` |

``rounded=True`` (measured ages and lags, not settings) keeps what a person reads at a glance:
a tenth of a second under 10 s (``6.2s``), whole seconds under an hour (``3m5s``), minutes under
a day (``2h10m``), hours beyond (``4d3h``).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal

_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


def _number(value: Decimal) -> str:
    return format(value.normalize(), "f")


def format_duration(value: timedelta | float | int | None, *, rounded: bool = False) -> str:
    """``value`` (a timedelta or seconds) in pglogq's duration format; ``-`` for None."""
    if value is None:
        return "-"
    if isinstance(value, timedelta):
        # exact: days, seconds and microseconds as integers
        us = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
        secs = Decimal(us) / Decimal(1_000_000)
    else:
        secs = Decimal(repr(float(value))) if isinstance(value, float) else Decimal(value)
    if secs < 0:
        return "-" + format_duration(float(-secs), rounded=rounded)
    secs = _round_for_reading(secs) if rounded else secs.quantize(Decimal("0.000001"), rounding=ROUND_HALF_EVEN)
    if secs == 0:
        return "0s"
    if secs < 1:
        return _number(secs * 1000) + "ms"
    if secs < 60:
        return _number(secs) + "s"
    whole = int(secs)
    frac = secs - whole
    parts: list[str] = []
    for unit, size in _UNITS:
        n, whole = divmod(whole, size)
        if n:
            parts.append(f"{n}{unit}")
    rest = whole + frac
    if rest:
        parts.append(_number(rest) + "s")
    return "".join(parts)


def _round_for_reading(secs: Decimal) -> Decimal:
    if secs < 10:
        return secs.quantize(Decimal("0.1"), rounding=ROUND_HALF_EVEN)
    if secs < 3600:
        return secs.quantize(Decimal("1"), rounding=ROUND_HALF_EVEN)
    if secs < 86400:
        return Decimal(int(secs) // 60 * 60)
    return Decimal(int(secs) // 3600 * 3600)
