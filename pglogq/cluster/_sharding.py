"""What the asyncio and the blocking sharded clients share (no I/O): which errors say a shard is
unreachable, how long a shard that failed is left alone, and how per-shard monitoring rows
combine into one."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from pglogq.models import ConsumerInfo, QueueInfo, ShardedConsumerInfo, ShardedQueueInfo

T = TypeVar("T")

UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "3D000", "53300", "28000", "28P01"})
"""SQLSTATEs of a server that does not take the call (besides class 08, connection exceptions):
shut down or starting, the database gone or closed to connections, too many connections, the
role refused.  Their calls never ran: nothing was written."""

DOWN_FIRST = 1.0
"""Seconds a shard that failed is left alone by receive (then doubled at each failure)."""

DOWN_MAX = 30.0
"""The longest a shard that keeps failing is left alone by receive before it is tried again."""


def unreachable(exc: BaseException) -> bool:
    """True when ``exc`` says the shard could not be reached (no connection in time, the
    connection broke, the server or database refuses connections), not that it refused the call."""
    if isinstance(exc, (PoolTimeout, psycopg.InterfaceError, OSError)):
        return True
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate
        if state is None:  # the client's own report: no connection, or it broke
            return isinstance(exc, psycopg.OperationalError)
        return state.startswith("08") or state in UNREACHABLE_STATES
    return False


class DownShards:
    """The shards that failed lately, and until when each is left alone (no I/O, no lock needed:
    each update is one dict operation)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    def failed(self, shard: str) -> float:
        """Note a failure of ``shard``; the seconds it is left alone now."""
        n = self._failures.get(shard, 0) + 1
        self._failures[shard] = n
        wait: float = min(DOWN_MAX, DOWN_FIRST * 2.0 ** (n - 1))
        self._until[shard] = self._clock() + wait
        return wait

    def answered(self, shard: str) -> None:
        self._until.pop(shard, None)
        self._failures.pop(shard, None)

    def is_down(self, shard: str) -> bool:
        """True while ``shard`` is left alone after a failure."""
        until = self._until.get(shard)
        return until is not None and self._clock() < until

    def known_down(self) -> list[str]:
        return [s for s in self._until if self.is_down(s)]


def _sum(values: Iterable[int | float | None]) -> Any:
    got = [v for v in values if v is not None]
    return sum(got) if got else None


def _pick(values: Iterable[T | None], fn: Callable[[list[T]], T]) -> T | None:
    got = [v for v in values if v is not None]
    return fn(got) if got else None


def combine_queue_info(name: str, rows: Mapping[str, QueueInfo | None]) -> ShardedQueueInfo:
    """One row for queue ``name`` from each shard's row (None: the shard did not answer); at
    least one row must be there."""
    got = [r for r in rows.values() if r is not None]
    assert got, "no shard answered"
    blocked = next((f"{s}: {r.rotation_blocked_by}" for s, r in rows.items()
                    if r is not None and r.rotation_blocked_by), None)
    tick_time: datetime | None = _pick((r.last_tick_time for r in got), min)
    age: timedelta | None = _pick((r.last_tick_age for r in got), max)
    lag: timedelta | None = _pick((r.ticker_lag for r in got), max)
    return ShardedQueueInfo(
        queue_name=name,
        paused=any(r.paused for r in got),
        last_tick_id=_pick((r.last_tick_id for r in got), max),
        last_tick_time=tick_time,
        last_tick_age=age,
        ticker_lag=lag,
        events_per_second=float(sum(r.events_per_second for r in got)),
        pending_estimate=sum(r.pending_estimate for r in got),
        consumers=max(r.consumers for r in got),
        retry_depth=sum(r.retry_depth for r in got),
        dead_letters=sum(r.dead_letters for r in got),
        delayed=sum(r.delayed for r in got),
        size_bytes=sum(r.size_bytes for r in got),
        rotation_period=max(r.rotation_period for r in got),
        last_rotation=min(r.last_rotation for r in got),
        rotation_blocked_by=blocked,
        partitions=max(r.partitions for r in got),
        urgent_lane=any(r.urgent_lane for r in got),
        shards=dict(rows),
    )


def combine_consumer_info(queue: str, consumer: str, rows: Mapping[str, ConsumerInfo | None]) -> ShardedConsumerInfo:
    """One row for ``consumer`` of ``queue`` from each shard's row (None: no answer)."""
    got = [r for r in rows.values() if r is not None]
    assert got, "no shard answered"
    open_ids = [r.batch_id for r in got if r.batch_id is not None]
    lag: timedelta | None = _pick((r.lag for r in got), max)
    return ShardedConsumerInfo(
        queue_name=queue,
        consumer_name=consumer,
        last_tick=_pick((r.last_tick for r in got), max),
        lag=lag,
        lag_events=_sum(r.lag_events for r in got),
        pending_events=_sum(r.pending_events for r in got),
        last_seen=_pick((r.last_seen for r in got), max),
        batch_id=open_ids[0] if len(open_ids) == 1 else None,
        batch_open_since=_pick((r.batch_open_since for r in got), min),
        workers=max(r.workers for r in got),
        open_batches=sum(r.open_batches for r in got),
        retry_depth=sum(r.retry_depth for r in got),
        dead_letters=sum(r.dead_letters for r in got),
        skipped_events=sum(r.skipped_events for r in got),
        skipped_at=_pick((r.skipped_at for r in got), max),
        shards=dict(rows),
    )
