"""What the overview shows, read through the client and kept in memory for the sparklines.

A :class:`Sampler` reads the state of every queue (``queue_info``, ``consumer_info``,
``in_flight``, the ticker) at most once per ``interval`` seconds, whatever the number of open
pages, and keeps the last ``history`` seconds of a few numbers per queue and consumer.  The
samples live in the app's memory only: they start when the first page is opened (a restarted
dashboard starts with empty sparklines).  Stored events are counted (``stored_events`` reads
the tables: about 0.3 s for a million events), so less often: every ``count_interval`` seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pglogq import AsyncClient
from pglogq.errors import PglogqError
from pglogq.health import Finding, Thresholds, assess
from pglogq.models import ConsumerInfo, InFlight, QueueInfo, TickerHolder


@dataclass
class Snapshot:
    taken_at: float
    queues: list[QueueInfo]
    consumers: list[ConsumerInfo]
    in_flight: list[InFlight]
    ticker_holder: TickerHolder | None
    ticker_last_run: datetime | None
    stored: dict[str, int | None]
    warnings: list[Finding] = field(default_factory=list)

    def queue(self, name: str) -> QueueInfo | None:
        return next((q for q in self.queues if q.queue_name == name), None)


Series = deque[tuple[float, float]]


class Sampler:
    RATE_WINDOW = 60.0
    """Seconds over which a consumer's rate out is estimated."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        interval: float = 2.0,
        count_interval: float = 30.0,
        history: float = 600.0,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.client = client
        self.interval = interval
        self.count_interval = count_interval
        self.history = history
        self.thresholds = thresholds or Thresholds()
        self.last: Snapshot | None = None
        self._lock = asyncio.Lock()
        self._counted_at: dict[str, float] = {}
        self._stored: dict[str, int | None] = {}
        # per queue: rate in, dead letters; per (queue, consumer): pending events, lag seconds, rate out
        # (pending and lag as docs/how-to/monitoring.md defines them; the sparklines plot pending)
        self.rate_in: dict[str, Series] = {}
        self.dead: dict[str, Series] = {}
        self.pending: dict[tuple[str, str], Series] = {}
        self.lag_seconds: dict[tuple[str, str], Series] = {}
        self.rate_out: dict[tuple[str, str], Series] = {}

    async def snapshot(self, *, fresh: bool = False) -> Snapshot:
        """The latest sample, taken now when the last one is older than ``interval`` (or ``fresh``)."""
        async with self._lock:
            now = time.monotonic()
            if self.last is not None and not fresh and now - self.last.taken_at < self.interval:
                return self.last
            self.last = await self._take(now)
            return self.last

    async def _take(self, now: float) -> Snapshot:
        c = self.client
        queues = await c.queue_info()
        consumers = await c.consumer_info()
        in_flight = await c.in_flight()
        holder = await c.ticker_holder()
        last_run = await c.ticker_last_run()
        for q in queues:
            name = q.queue_name
            if now - self._counted_at.get(name, -1e18) >= self.count_interval:
                try:
                    self._stored[name] = await c.stored_events(name)
                except PglogqError:  # dropped meanwhile
                    self._stored[name] = None
                self._counted_at[name] = now
        names = {q.queue_name for q in queues}
        for gone in [n for n in self._stored if n not in names]:
            del self._stored[gone]
            self._counted_at.pop(gone, None)
        snap = Snapshot(now, queues, consumers, in_flight, holder, last_run, dict(self._stored))
        self._record(snap)
        snap.warnings = self._warnings(snap)
        return snap

    def _add(self, series: dict[Any, Series], key: Any, t: float, value: float) -> Series:
        s = series.setdefault(key, deque())
        s.append((t, value))
        while s and s[0][0] < t - self.history:
            s.popleft()
        return s

    def _record(self, snap: Snapshot) -> None:
        t = snap.taken_at
        for q in snap.queues:
            self._add(self.rate_in, q.queue_name, t, q.events_per_second)
            self._add(self.dead, q.queue_name, t, float(q.dead_letters))
        for ci in snap.consumers:
            key = (ci.queue_name, ci.consumer_name)
            backlog = self._add(self.pending, key, t, float(ci.pending_events or 0))
            self._add(self.lag_seconds, key, t, ci.lag.total_seconds() if ci.lag is not None else 0.0)
            # what was acknowledged over the last minute: what came in minus how much pending grew
            window = [(st, v) for st, v in backlog if st >= t - self.RATE_WINDOW]
            ins = [v for st, v in self.rate_in.get(ci.queue_name, ()) if st >= t - self.RATE_WINDOW]
            if len(window) >= 2 and window[-1][0] > window[0][0] and ins:
                grew = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
                self._add(self.rate_out, key, t, max(0.0, sum(ins) / len(ins) - grew))
        live = {(ci.queue_name, ci.consumer_name) for ci in snap.consumers}
        for series in (self.pending, self.lag_seconds, self.rate_out):
            for k in [k for k in series if k not in live]:
                del series[k]
        qnames = {q.queue_name for q in snap.queues}
        for qseries in (self.rate_in, self.dead):
            for name in [n for n in qseries if n not in qnames]:
                del qseries[name]

    def _warnings(self, snap: Snapshot) -> list[Finding]:
        """The findings of :mod:`pglogq.health` for this sample (the CLI's ``status`` asks the same rules)."""
        th = self.thresholds
        growth: dict[str, tuple[int, float]] = {}
        for q in snap.queues:
            series = self.dead.get(q.queue_name)
            window = [v for t, v in series or () if t >= snap.taken_at - th.dlq_window]
            if series and window and window[-1] > window[0]:
                growth[q.queue_name] = (int(window[-1] - window[0]),
                                        min(th.dlq_window, snap.taken_at - series[0][0]))
        return assess(snap.queues, snap.consumers, snap.in_flight, thresholds=th, dead_growth=growth)


def sparkline(series: Sequence[tuple[float, float]] | None, width: int = 120, height: int = 24) -> str:
    """The ``points`` attribute of an SVG polyline drawing ``series`` (numbers only: safe in HTML)."""
    if not series or len(series) < 2:
        return ""
    t0, t1 = series[0][0], series[-1][0]
    values = [v for _, v in series]
    lo, hi = min(values), max(values)
    span_t = (t1 - t0) or 1.0
    span_v = (hi - lo) or 1.0
    pts = []
    for t, v in series:
        x = (t - t0) / span_t * (width - 2) + 1
        y = height - 1 - (v - lo) / span_v * (height - 2) if hi > lo else height / 2
        pts.append(f"{x:.1f},{y:.1f}")
    return " ".join(pts)
