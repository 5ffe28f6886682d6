"""Plain data returned by the client: messages, queue and consumer information."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A jsonb value the client could not decode (e.g. nested deeper than Python's decoder goes).

    It stands in for the ``payload`` (or ``headers``) of a received :class:`Message` or
    :class:`DeadLetter`, whose ``decode_error`` then says why; ``text`` is the JSON as stored.
    The consumer runtime never calls a handler with it: it nacks the message with the reason."""

    text: str
    error: str

    def __repr__(self) -> str:
        return f"<Undecodable {len(self.text)} chars: {self.error}>"


@dataclass(slots=True, unsafe_hash=True)
class Message:
    """One event as a consumer receives it.

    A plain record with slots, not a frozen dataclass: a consumer builds one per event, and a
    frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) cost more than
    everything else the client does per event.  Treat it as read-only: ``ack`` and ``nack``
    identify the event by the fields ``receive`` returned (and its hash, as before, is that of
    its fields: hashable when its payload and headers are)."""

    batch_id: int
    msg_id: int
    type: str | None
    payload: Any
    headers: dict[str, Any] | None
    retry_count: int
    created_at: datetime
    priority: int
    txid: str
    """The inserting transaction's id (xid8, as text): lets nack find the event in O(1)."""
    decode_error: str | None = None
    """Why ``payload`` or ``headers`` could not be decoded (they are then :class:`Undecodable`)."""


@dataclass(frozen=True)
class QueueInfo:
    queue_name: str
    paused: bool
    last_tick_id: int | None
    last_tick_time: datetime | None
    last_tick_age: timedelta | None
    ticker_lag: timedelta | None
    events_per_second: float
    pending_estimate: int
    consumers: int
    retry_depth: int
    dead_letters: int
    delayed: int
    size_bytes: int
    rotation_period: timedelta
    last_rotation: datetime
    rotation_blocked_by: str | None
    partitions: int = 1
    """1: one ordered log; else the queue's fixed partition count (``create_queue``)."""
    urgent_lane: bool = False
    """Whether the queue has an urgent lane (events of priority above 100 overtake a backlog;
    ``create_queue(..., urgent_lane=True)``); only a queue of one partition can have one."""


@dataclass(frozen=True)
class ConsumerInfo:
    queue_name: str
    consumer_name: str
    last_tick: int | None
    lag: timedelta | None
    lag_events: int | None
    pending_events: int | None
    last_seen: datetime | None
    batch_id: int | None
    batch_open_since: datetime | None
    workers: int
    open_batches: int
    retry_depth: int
    dead_letters: int
    skipped_events: int = 0
    skipped_at: datetime | None = None
    share: bool = False
    """A share consumer (``subscribe(..., share=True)``): ``open_batches`` counts its workers' leases."""
    in_flight_events: int | None = None
    """A share consumer: the events its workers hold in leases, not acknowledged (None: an ordinary
    consumer; the leases one by one: :meth:`pglogq.Client.leases`)."""
    oldest_in_flight: timedelta | None = None
    """A share consumer: the age of its oldest lease holding events (since it was taken, or taken
    over); None when nothing is in flight."""
    expired_leases: int | None = None
    """A share consumer: leases past their lock's expiry (no heartbeat for the queue's
    ``dead_interval``) or released by maintenance, not taken over yet: the next receive of any
    worker takes them (``pglogq status``: lease_expired)."""
    redelivered: int | None = None
    """A share consumer: leased events delivered more than once (a delivery count above 1)."""


@dataclass(frozen=True)
class DeadLetter:
    dead_id: int
    queue_name: str
    consumer_name: str
    msg_id: int
    type: str | None
    payload: Any
    headers: dict[str, Any] | None
    retry_count: int
    reason: str | None
    created_at: datetime
    first_failed_at: datetime
    failed_at: datetime
    decode_error: str | None = None
    """Why ``payload`` or ``headers`` could not be decoded (they are then :class:`Undecodable`)."""

    @property
    def attempts(self) -> int:
        """The attempt count (every delivery whose handler ran: ``retry_count`` failed ones before
        the last, plus the last), as ``lookup``, ``jobs`` and the dashboard count it."""
        return self.retry_count + 1


@dataclass(frozen=True)
class DeadLetterPreview:
    """A dead letter as a page of ``dlq_search`` shows it: payload and headers as pretty JSON text,
    cut to a preview (``payload_chars``: the whole text's length; the preview is whole when equal)."""

    dead_id: int
    queue_name: str
    consumer_name: str
    msg_id: int
    type: str | None
    payload_text: str
    payload_chars: int
    headers_text: str | None
    headers_chars: int
    retry_count: int
    reason: str | None
    created_at: datetime
    first_failed_at: datetime
    failed_at: datetime

    @property
    def attempts(self) -> int:
        """The attempt count: ``retry_count + 1`` (see :attr:`DeadLetter.attempts`)."""
        return self.retry_count + 1

    @property
    def truncated(self) -> bool:
        """True when the payload or headers preview is cut."""
        return len(self.payload_text) < self.payload_chars or len(self.headers_text or "") < self.headers_chars


@dataclass(frozen=True)
class TickerHolder:
    """The session holding a database's ticker lock (see ``pglogq.ticker_holder``)."""

    pid: int
    application_name: str | None
    client: str
    since: datetime


@dataclass(frozen=True)
class SeekPlan:
    """Where a consumer is and where a seek moves it (see ``pglogq.seek_plan``)."""

    current_tick: int | None
    current_tick_time: datetime | None
    target_tick: int
    target_tick_time: datetime
    delta_events: int | None
    """Estimated events: negative = delivered again (replayed), positive = skipped."""
    earliest_tick: int
    earliest_tick_time: datetime
    latest_tick: int
    latest_tick_time: datetime
    open_batches: int


@dataclass(frozen=True)
class InFlight:
    """One event being handled right now (a row of the view ``pglogq.in_flight``)."""

    queue_name: str
    consumer_name: str
    worker: str | None
    batch_id: int
    msg_id: int
    started_at: datetime
    last_heartbeat: datetime
    running_for: timedelta
    silent_for: timedelta
    percent: float | None
    stage: str | None
    counters: dict[str, Any] | None
    decode_error: str | None = None
    """Why ``counters`` could not be decoded (it is then :class:`Undecodable`)."""
    expires_at: datetime | None = None
    """When its holder's batch (a lease, for a share consumer) is taken over unless renewed: the
    last heartbeat + the queue's ``dead_interval`` (None: a consumer receiving without a worker
    name, whose batch nobody takes over)."""
    delivery_count: int | None = None
    """The hand-out this is: 1 + its failed deliveries so far (nacks, and crashes of earlier
    hand-outs whose handler had started), the ``retry_count`` received + 1."""


@dataclass(frozen=True)
class Lease:
    """One lease of a worker of a share consumer (a row of ``pglogq.leases``): who holds what, until when.

    The delivery count of an event is the hand-out it is: 1 + its failed deliveries so far (nacks,
    and crashes of earlier hand-outs whose handler had started), the ``retry_count`` received + 1."""

    queue_name: str
    consumer_name: str
    worker: str | None
    """The worker holding it; None for a tail its worker ceded, free for the next worker that asks."""
    batch_id: int
    events: int
    """Leased events not acknowledged (those nacked in the lease left out)."""
    returned: int
    """Of them, in the page ``receive`` returned last (the rest: leased, not returned yet)."""
    started: int
    """Of them, events a handler started on."""
    first_msg_id: int | None
    last_msg_id: int | None
    leased_at: datetime
    """When the lease was taken (or taken over)."""
    last_heartbeat: datetime
    expires_at: datetime
    """When its lock ends unless renewed (``last_heartbeat`` + the queue's ``dead_interval``), or
    when maintenance released it or its worker ceded it."""
    expired: bool
    """Past ``expires_at`` or released by maintenance: the next receive of any worker takes it over."""
    released: bool
    """Released by maintenance, or ceded: free for any worker."""
    max_delivery_count: int | None
    """The highest delivery count of its events (None: no event left in it)."""
    redelivered: int
    """Its events delivered more than once."""


@dataclass(frozen=True)
class JobState:
    """Where one event stands for one consumer (a row of ``pglogq.lookup`` or ``pglogq.jobs``).

    ``state``: ``waiting``, ``in-flight``, ``retry``, ``dead``, ``cancelled``, ``done``,
    ``skipped`` or ``gone`` (not stored: see ``detail``, and ``pglogq.lookup``).
    ``cursor`` (jobs only): pass it as ``after`` to get the next page."""

    consumer: str
    state: str
    msg_id: int
    type: str | None
    created_at: datetime | None
    worker: str | None = None
    since: datetime | None = None
    last_heartbeat: datetime | None = None
    percent: float | None = None
    stage: str | None = None
    due_at: datetime | None = None
    attempts: int | None = None
    reason: str | None = None
    dead_id: int | None = None
    detail: str | None = None
    cursor: str | None = None
    finished_at: datetime | None = None
    """When the last handler run ended (done, stopped, dead; a row of the outcome log in ``jobs``)."""
    result: Any = None
    """The handler's stored JSON result (done, stopped; None: none stored)."""
    history: list[Attempt] = field(default_factory=list)
    """Every handler run of the consumer's outcome log for the event, oldest first (``lookup``)."""


@dataclass(frozen=True)
class Attempt:
    """One handler run of an event for one consumer, from its outcome log.

    ``outcome``: ``done``, ``failed`` (it came back), ``dead``, ``cancelled`` (cancelled after it
    was received, never started), ``stopped`` (returned after a stop request) or ``skipped`` (not
    run: an earlier event of its partition failed; it comes again).  ``attempt``: the attempt
    number (the attempt count of the docs: 1 for the first delivery)."""

    attempt: int
    outcome: str
    worker: str | None
    started_at: datetime | None
    finished_at: datetime
    error: str | None = None

    @property
    def duration(self) -> timedelta | None:
        """How long the handler ran (None: it never started)."""
        return None if self.started_at is None else self.finished_at - self.started_at


@dataclass(frozen=True)
class JobResult:
    """How an event's latest handler run ended for one consumer (``Client.result``).

    ``final``: it will not run again for this consumer (done, dead, cancelled, stopped);
    ``result``: the handler's stored JSON value (None: none stored)."""

    queue: str
    consumer: str
    msg_id: int
    outcome: str
    final: bool
    attempt: int | None
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    result: Any = None


@dataclass(frozen=True)
class TypeConfig:
    """The overrides of one event type of a queue (None: the queue's setting applies)."""

    type: str
    max_retries: int | None
    retry_delay: timedelta | None
    retry_factor: float | None
    retry_cap: timedelta | None
    retry_jitter: bool | None


@dataclass(frozen=True)
class Schedule:
    """A periodic send (a row of ``pglogq.schedule_list``)."""

    queue_name: str
    name: str
    cron: str
    type: str | None
    payload: Any
    headers: dict[str, Any] | None
    priority: int
    missed: str
    created_at: datetime
    next_due: datetime | None
    last_due: datetime | None
    last_msg_id: int | None
    sent: int
    skipped: int


@dataclass(frozen=True)
class CaptureInfo:
    """A table whose row changes are captured into a queue (see ``pglogq.captured_tables``)."""

    table_name: str
    """The table, as PostgreSQL names it (schema-qualified when not on the search path)."""
    queue_name: str
    key_columns: list[str]
    include_columns: list[str] | None
    exclude_columns: list[str] | None
    old_values: str
    """'changed', 'full' or 'none': what an UPDATE carries of the old row."""
    only_if: dict[str, Any] | None


@dataclass(frozen=True)
class ShardedQueueInfo(QueueInfo):
    """A queue of a cluster (``ShardedClient.queue_info``): the :class:`QueueInfo` fields summed
    or combined over the shards that answered, and each shard's own row in ``shards``.

    Sums: ``events_per_second``, ``pending_estimate``, ``retry_depth``, ``dead_letters``,
    ``delayed``, ``size_bytes``.  The worst shard: ``last_tick_time`` and ``last_rotation`` (the
    oldest), ``last_tick_age`` and ``ticker_lag`` (the largest), ``paused`` and ``urgent_lane`` (any shard),
    ``rotation_blocked_by`` (the first shard's reason, prefixed by its name).  The largest:
    ``consumers``, ``partitions``, ``rotation_period``, ``last_tick_id`` (tick ids are per shard:
    compare them within a shard only)."""

    shards: Mapping[str, QueueInfo | None] = field(default_factory=dict)
    """Each shard of the map by name: its own row, or None when it did not answer (down)."""

    @property
    def unavailable(self) -> list[str]:
        """The shards that did not answer: the figures above leave them out."""
        return [name for name, row in self.shards.items() if row is None]


@dataclass(frozen=True)
class ShardedConsumerInfo(ConsumerInfo):
    """A consumer of a cluster's queue (``ShardedClient.consumer_info``): the
    :class:`ConsumerInfo` fields combined over the shards that answered, and each shard's own
    row in ``shards``.

    Sums: ``lag_events``, ``pending_events``, ``open_batches``, ``retry_depth``,
    ``dead_letters``, ``skipped_events``.  The worst shard: ``lag`` (the largest),
    ``batch_open_since`` (the oldest).  The latest: ``last_seen``, ``skipped_at``.  The largest:
    ``workers`` (a consumer's workers read every shard), ``last_tick`` (per shard: compare within
    a shard only).  ``batch_id`` is the open batch when exactly one shard has one, else None
    (batch ids are per shard: see ``shards``)."""

    shards: Mapping[str, ConsumerInfo | None] = field(default_factory=dict)
    """Each shard of the map by name: its own row, or None when it did not answer (down)."""

    @property
    def unavailable(self) -> list[str]:
        """The shards that did not answer: the figures above leave them out."""
        return [name for name, row in self.shards.items() if row is None]
