"""What needs an operator's attention: the one set of rules behind every surface that warns.

``pglogq status`` (and ``status --check``), the dashboard's warnings, the ticker daemon's
``/metrics`` (``pglogq_health_warning``) and the consumer runtime's "no ticker" warning all ask
this module, so the terminal, the browser and the alerting say the same thing about the same
rows.  It is pure: it reads the rows its caller already has (``queue_info``, ``consumer_info``,
``in_flight``) and queries nothing; the caller decides where the rows come from and how the
findings are shown.

The rules, by kind (``KINDS`` holds the same list for the docs and the CLI's help):

``paused``
    The queue is paused: nothing is ticked until it is resumed.  Information, not a problem.
``ticker_stalled``
    Committed events have waited longer than ``stall_after`` for a tick, or the last tick
    (keep-alive ticks included) is older than ``max_tick_age``: is a ticker running?
``rotation_blocked``
    Rotation is overdue and held back (``queue_info().rotation_blocked_by`` names the holder).
``consumer_stale``
    A consumer with work left (events pending or a batch open), none of whose workers reports
    progress or heartbeats, that nobody has asked for work for longer than ``stale_after``, or
    whose batch has been open that long.
``worker_silent``
    A worker with events in flight that has sent no heartbeat or progress for longer than
    ``silent_after``: hung, stopped, or cut off.  One finding per worker.
``lease_expired``
    A share consumer has leases past their lock's expiry (their worker sent no heartbeat for the
    queue's ``dead_interval``, or maintenance released them) that no worker took over yet: the
    next receive of any of its workers takes them, so while they stay no worker of the consumer
    is asking for work (all busy, or none running).  One finding per consumer.
``dlq_growing``
    The queue's dead letters grew within the caller's window (only a caller that keeps samples
    over time can say so: the dashboard).
``dead_letters``
    With ``fail_on_dead``: the queue holds dead letters.
``consumer_lagging``
    With ``lag_after``: a consumer's lag (the age of its oldest pending event) is over that.
``backlog``
    With ``max_pending``: a consumer has more than that many events not yet acknowledged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from pglogq.durations import format_duration

KINDS: dict[str, str] = {
    "paused": "the queue is paused (information, not a problem)",
    "ticker_stalled": "events wait for a tick over --stall-after (or no tick at all for max_tick_age, where set)",
    "rotation_blocked": "rotation is overdue and held back (the holder is named)",
    "consumer_stale": "a consumer with work left, no worker reporting, unseen (or its batch open) over --stale-after",
    "worker_silent": "a worker with events in flight silent (no heartbeat, no progress) for --silent-after",
    "lease_expired": "a share consumer's lease is past its lock's expiry and no worker has taken it over",
    "dlq_growing": "dead letters grew in the last minutes (dashboard)",
    "dead_letters": "with --fail-on-dead: the queue holds dead letters",
    "consumer_lagging": "with --lag-after: a consumer's oldest pending event is older than that",
    "backlog": "with --max-pending: a consumer has more events not yet acknowledged than that",
}
"""Every kind a finding can have, with what it means."""

INFORMATION = frozenset({"paused"})
"""Kinds that inform without being a problem (``status --check`` ignores them)."""


@dataclass(frozen=True)
class Thresholds:
    """When a rule fires.  ``None`` turns an optional rule off."""

    stall_after: timedelta = timedelta(seconds=10)
    """Committed events waiting this long for a tick: the ticker is stalled."""
    max_tick_age: timedelta | None = None
    """No tick at all (keep-alive included) for this long: the ticker is stalled."""
    stale_after: timedelta = timedelta(minutes=1)
    """A consumer with work left that was not seen for this long (and has no reporting worker) is stale."""
    silent_after: timedelta = timedelta(minutes=1)
    """A worker with events in flight that did not report for this long is silent."""
    dlq_window: float = 300.0
    """Seconds over which a growing dead-letter count is reported (callers that sample)."""
    lag_after: timedelta | None = None
    """A consumer whose lag (age of its oldest pending event) exceeds this is lagging."""
    max_pending: int | None = None
    """A consumer with more events than this not yet acknowledged has a backlog."""
    fail_on_dead: bool = False
    """Any dead letter is a problem."""
    stuck_after: InitVar[timedelta | None] = None
    """The dashboard's earlier name of ``stale_after`` (accepted, sets it)."""

    def __post_init__(self, stuck_after: timedelta | None) -> None:
        if stuck_after is not None:
            object.__setattr__(self, "stale_after", stuck_after)


@dataclass(frozen=True)
class Finding:
    """One thing to look at."""

    kind: str
    queue: str
    consumer: str | None
    message: str

    @property
    def problem(self) -> bool:
        """False for the kinds that only inform (a paused queue)."""
        return self.kind not in INFORMATION

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "queue": self.queue, "consumer": self.consumer, "message": self.message}


class TickedRow(Protocol):
    """The fields of :class:`pglogq.QueueInfo` the ticker rule reads."""

    @property
    def queue_name(self) -> str: ...
    @property
    def paused(self) -> bool: ...
    @property
    def last_tick_age(self) -> timedelta | None: ...
    @property
    def ticker_lag(self) -> timedelta | None: ...


class QueueRow(TickedRow, Protocol):
    """The fields of :class:`pglogq.QueueInfo` the rules read."""

    @property
    def rotation_blocked_by(self) -> str | None: ...
    @property
    def dead_letters(self) -> int: ...


class ConsumerRow(Protocol):
    """The fields of :class:`pglogq.ConsumerInfo` the rules read."""

    @property
    def queue_name(self) -> str: ...
    @property
    def consumer_name(self) -> str: ...
    @property
    def lag(self) -> timedelta | None: ...
    @property
    def lag_events(self) -> int | None: ...
    @property
    def pending_events(self) -> int | None: ...
    @property
    def last_seen(self) -> datetime | None: ...
    @property
    def open_batches(self) -> int: ...
    @property
    def batch_open_since(self) -> datetime | None: ...
    @property
    def expired_leases(self) -> int | None: ...


class InFlightRow(Protocol):
    """The fields of :class:`pglogq.InFlight` the rules read (``msg_id`` may be unknown)."""

    @property
    def queue_name(self) -> str: ...
    @property
    def consumer_name(self) -> str: ...
    @property
    def worker(self) -> str | None: ...
    @property
    def msg_id(self) -> int | None: ...
    @property
    def silent_for(self) -> timedelta: ...


def human(delta: timedelta) -> str:
    """A duration as the findings write it (``1m 5s``)."""
    return format_duration(delta, rounded=True)


def stalled_reason(row: TickedRow, stall_after: timedelta, max_tick_age: timedelta | None) -> str | None:
    """Why the queue looks unticked (``None``: it does not, or it is paused)."""
    if row.paused:
        return None
    if row.ticker_lag is not None and row.ticker_lag > stall_after:
        return f"events waiting {human(row.ticker_lag)} for a tick"
    if max_tick_age is not None and row.last_tick_age is not None and row.last_tick_age > max_tick_age:
        return f"last tick {human(row.last_tick_age)} ago"
    return None


def ticker_engine_ok(state: str, *, last_poll_age: float | None, state_age: float, idle_interval: float) -> bool:
    """The ticker daemon's own health (``/healthz``): a database it stands by for, or ticks and has
    polled recently (20 idle intervals, at least 10 s; a database that became active less than
    10 s ago is given that long to poll)."""
    if state == "standby":
        return True
    if state != "active":
        return False
    if last_poll_age is not None and last_poll_age < max(10.0, 20 * idle_interval):
        return True
    return state_age < 10.0


def assess(
    queues: Iterable[QueueRow],
    consumers: Iterable[ConsumerRow] = (),
    in_flight: Iterable[InFlightRow] = (),
    *,
    thresholds: Thresholds | None = None,
    now: datetime | None = None,
    dead_growth: Mapping[str, tuple[int, float]] | None = None,
) -> list[Finding]:
    """Every finding for these rows, queues first, in a stable order.

    ``dead_growth`` maps a queue to (dead letters added, over how many seconds), for a caller
    that keeps samples; ``now`` is the time ``last_seen`` is compared with (default: now).
    """
    th = thresholds or Thresholds()
    now = now or datetime.now(timezone.utc)
    flights = list(in_flight)
    out: list[Finding] = []
    for q in queues:
        name = q.queue_name
        if q.paused:
            out.append(Finding("paused", name, None, f"queue {name} is paused: no ticks until `pglogq queue resume`"))
        reason = stalled_reason(q, th.stall_after, th.max_tick_age)
        if reason is not None:
            out.append(Finding("ticker_stalled", name, None,
                               f"queue {name}: {reason}; is a ticker running? (`pglogq ticker run`)"))
        if q.rotation_blocked_by:
            out.append(Finding("rotation_blocked", name, None,
                               f"queue {name}: rotation blocked by {q.rotation_blocked_by}"))
        grown = (dead_growth or {}).get(name)
        if grown is not None and grown[0] > 0:
            out.append(Finding("dlq_growing", name, None,
                               f"dead letters of {name} grew by {grown[0]} in the last {int(grown[1])} s"
                               f" (now {q.dead_letters})"))
        if th.fail_on_dead and q.dead_letters > 0:
            out.append(Finding("dead_letters", name, None,
                               f"queue {name} holds {q.dead_letters} dead letter(s) (`pglogq dlq list {name}`)"))
    # a consumer one of whose workers reports heartbeats or progress is working, however long
    # its batch has been open
    working = {(f.queue_name, f.consumer_name) for f in flights if f.silent_for <= th.silent_after}
    for c in consumers:
        who = f"consumer {c.consumer_name} on {c.queue_name}"
        pending = max(c.pending_events or 0, c.lag_events or 0)
        behind = pending > 0 or c.open_batches > 0
        idle = behind and (c.queue_name, c.consumer_name) not in working
        if idle and c.last_seen is not None and now - c.last_seen > th.stale_after:
            out.append(Finding("consumer_stale", c.queue_name, c.consumer_name,
                               f"{who} is stuck: {pending} event(s) pending,"
                               f" last seen {human(now - c.last_seen)} ago"
                               + (f", {c.open_batches} batch(es) open" if c.open_batches else "")))
        elif idle and c.batch_open_since is not None and now - c.batch_open_since > th.stale_after:
            # asks for pages but never finishes its batch (and no worker of it reports)
            out.append(Finding("consumer_stale", c.queue_name, c.consumer_name,
                               f"{who} is stuck: its batch has been open for {human(now - c.batch_open_since)}"
                               f" with no worker reporting"))
        if c.expired_leases:
            out.append(Finding("lease_expired", c.queue_name, c.consumer_name,
                               f"{who}: {c.expired_leases} lease(s) past their lock's expiry, not taken over yet"
                               f" (`pglogq consumer leases {c.queue_name} {c.consumer_name}`); the next receive of"
                               f" any of its workers takes them: is a worker running and free?"))
        if th.lag_after is not None and c.lag is not None and c.lag > th.lag_after:
            out.append(Finding("consumer_lagging", c.queue_name, c.consumer_name,
                               f"{who}: lag {human(c.lag)} (over {human(th.lag_after)})"))
        if th.max_pending is not None and (c.pending_events or 0) > th.max_pending:
            out.append(Finding("backlog", c.queue_name, c.consumer_name,
                               f"{who}: {c.pending_events} event(s) pending (over {th.max_pending})"))
    out += _silent_workers(flights, th.silent_after)
    return out


def _silent_workers(flights: list[InFlightRow], silent_after: timedelta) -> list[Finding]:
    worst: dict[tuple[str, str, str], tuple[timedelta, int | None, int]] = {}
    for f in flights:
        if f.silent_for <= silent_after:
            continue
        key = (f.queue_name, f.consumer_name, f.worker or f.consumer_name)
        silent, msg, count = worst.get(key, (timedelta(0), None, 0))
        if f.silent_for > silent or count == 0:
            silent, msg = f.silent_for, f.msg_id
        worst[key] = (silent, msg, count + 1)
    out = []
    for (q, c, w), (silent, msg, count) in sorted(worst.items()):
        on = f" (msg {msg})" if msg is not None else ""
        out.append(Finding("worker_silent", q, c,
                           f"worker {w} of {c} on {q}: silent for {human(silent)} with {count} event(s) in flight"
                           f"{on}; hung or stopped? its work is taken over after the queue's dead_interval"))
    return out
