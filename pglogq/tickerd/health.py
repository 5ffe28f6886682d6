"""Is anybody ticking?  A check the CLI's ``status`` and the consumer runtime can call.

The rule itself is :func:`pglogq.health.stalled_reason`, the one every surface uses; this is its
form for a program's log.  Without a ticker nothing is ever delivered, and nothing fails either: consumers simply see
empty batches.  :func:`ticker_stalled` turns ``queue_info()`` rows into a warning when events
wait with no tick, or when not even the keep-alive tick (``ticker_idle_period``, 1 minute by
default) has been written for a long time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Protocol, runtime_checkable

from pglogq.health import stalled_reason

DEFAULT_MAX_LAG = timedelta(seconds=30)
DEFAULT_MAX_TICK_AGE = timedelta(minutes=5)


@runtime_checkable
class QueueLike(Protocol):
    """The fields of :class:`pglogq.QueueInfo` this check reads."""

    @property
    def queue_name(self) -> str: ...
    @property
    def paused(self) -> bool: ...
    @property
    def last_tick_age(self) -> timedelta | None: ...
    @property
    def ticker_lag(self) -> timedelta | None: ...
    @property
    def pending_estimate(self) -> int: ...


def ticker_stalled(
    info: QueueLike | Iterable[QueueLike],
    *,
    max_lag: timedelta = DEFAULT_MAX_LAG,
    max_tick_age: timedelta = DEFAULT_MAX_TICK_AGE,
) -> str | None:
    """A warning when no ticker seems to run for these queues, else ``None``.

    A (non-paused) queue looks stalled when committed events have waited longer than
    ``max_lag`` for a tick (``ticker_lag``), or when its last tick (keep-alive included) is
    older than ``max_tick_age``.  Pass one :class:`pglogq.QueueInfo` or several, e.g.
    ``ticker_stalled(client.queue_info())``.
    """
    rows: list[QueueLike] = [info] if isinstance(info, QueueLike) else list(info)
    stalled: list[str] = []
    for row in rows:
        reason = stalled_reason(row, max_lag, max_tick_age)
        if reason is not None:
            stalled.append(f'"{row.queue_name}" ({reason})')
    if not stalled:
        return None
    shown = ", ".join(stalled[:3]) + (f" and {len(stalled) - 3} more" if len(stalled) > 3 else "")
    return (
        f"no ticker has ticked for too long: queue {shown}; without a ticker no batch is ever "
        "delivered. Is pglogq-ticker running against this database? (start it with "
        "`pglogq-ticker --dsn ...`, or `pglogq.start_ticker(dsn)` in-process for small apps)"
    )
