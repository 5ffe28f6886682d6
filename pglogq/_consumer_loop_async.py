"""One receive loop of a consumer: receive a page, run its handlers, finish it, heartbeat it.

``pglogq/_consumer_loop.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
A :class:`ReceiveLoop` holds what one loop needs and nothing of the others: its client, its worker
name, its page sizing, the page being handled and its heartbeat, its wake-up.  The consumer
(``consumer_async.py``) holds the settings and the handlers and makes its loops when ``run``
starts; a layer above (``pglogq.cluster``) runs loops of its own kind, one per shard, through the
hooks a loop calls (``_receive``, ``_learn_partitioned``, ``_error_wait``, ``_log_error``,
``_idle``, ``_drained``, ``_conninfo``, ``_send_probe``).

The page, its handler calls and its heartbeat are described in the consumer module's docstring.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import PoolTimeout

from pglogq import _collector, _concurrency_async, _outcomes_async, _trace
from pglogq._runtime import (
    ABANDONED,
    ABANDONED_OUTCOME,
    NOT_RUN_OUTCOME,
    OK,
    OK_OUTCOME,
    TIMEOUT,
    Nack,
    NotifyHealth,
    Outcome,
    Route,
    RunStats,
    Unit,
    failure_reason,
    group_units,
)
from pglogq._wakeup_async import AsyncSharedWakeup, AsyncWakeup
from pglogq.client_async import AsyncBatch, AsyncClient
from pglogq.errors import BatchLost, CedeRefused, PglogqError, StaleBatch, UndecodableEvent, UnknownBatch
from pglogq.models import Message
from pglogq.retry import RetryPolicy

if TYPE_CHECKING:
    from pglogq.consumer_async import AsyncConsumer

log = logging.getLogger("pglogq.consumer")

AnyConn = psycopg.AsyncConnection[Any]

AnyWakeup = AsyncWakeup | AsyncSharedWakeup
"""What a receive loop waits on: its own listener, or one shared by the consumer's slots."""

PAGE_MIN = 100
"""The adaptive page (``max_messages=None``, the default): the first page, and the smallest."""

PAGE_MAX = 10_000
"""The adaptive page's largest size: beyond it a no-op drain gains nothing measurable (one receive
and one ack per 10,000 events) while the page's memory grows (about 15 MB at 10,000 small events)."""

PAGE_SECONDS = 0.1
"""The adaptive page holds about this many seconds of handler starts at the measured pace."""

LEASE_MIN = 1
"""A share consumer's adaptive lease (``max_messages=None``): the first lease of a handler slot, and
the smallest (after a slow event): one event, so that a slot that meets a long job holds no other
event behind it."""

IDLE_CEDE_AFTER = 0.02
"""A share consumer's slot gives back its lease's unstarted tail once the running event has run
this long (or ``cede_after`` when shorter) while another slot of the same consumer is idle (its
receive found nothing): the idle slot takes it at once.  Not at once: quick jobs, those that
grow a lease, would be ceded back and forth between the slots (a cede, a receive and leases back
to one event each time); a job that has run 20 ms is long beside the two or three round trips a
cede and the idle slot's receive cost."""

NO_CEDE = 1 << 62
"""``_Page.ceded_at`` of a page nothing of which was ceded."""

ERROR_BACKOFF_MAX = 10.0
"""The longest wait of a receive loop between attempts while its database keeps failing: the wait
starts at ``poll_interval`` and doubles at each failure in a row up to this (or ``poll_interval``
when that is longer).  A worker whose server went away neither hammers it nor logs a warning
every ``poll_interval``, and goes on within this long once the server is back."""

RECOVERABLE = (psycopg.OperationalError, psycopg.InterfaceError, OSError, PoolTimeout)
"""Errors a receive loop survives (it waits and tries again): the database is away for a while."""


class _Dropped(Exception):
    """Internal: roll back a transactional page that must not be acknowledged."""


class HandlerLeftTransactionFailed(Exception):
    """A transactional handler returned with its savepoint in error: it caught an SQL error and
    went on.  Its work is rolled back to its savepoint and the message is nacked (the next
    messages of the page run normally)."""


class _Page:
    """The page being handled: its batch id, heartbeat state and deliveries."""

    def __init__(self, batch_id: int, queue: str, consumer: str) -> None:
        self.batch_id = batch_id
        self.queue = queue
        self.consumer = consumer
        self.abandon = _concurrency_async.Event()
        self.lost = False
        self.finishing = False
        self.last_beat = time.monotonic()  # receive itself was a heartbeat
        self.deliveries: list[AsyncDelivery] = []
        self.lock = _concurrency_async.Lock()
        self.claimed = -1  # deliveries[: claimed + 1] are marked started in the database
        self.claimed_at = time.monotonic()
        self.started = -1  # deliveries[: started + 1] have started (or count as such)
        self.first_start = 0.0
        self.handled_at = 0.0  # when the page's handler calls had all returned (0: not yet)
        self.chunk = 1  # events marked by the last mark (doubles while they start quickly)
        self.claim_seconds = 0.0  # time spent marking (not part of the handlers' pace)
        self.cancelled: set[int] = set()  # cancelled after receive: never started
        self.stop_ids: set[int] = set()  # asked to stop (request_stop)
        self.released = False
        self.releasing = False
        self.strict = False  # a partition's page: calls one at a time, the first failure ends it
        self.acked = False  # acknowledged already (with the nack that ended a strict page)
        self.ceding = False  # a share slot's page whose tail is (being) ceded: check before each start
        self.ceded_at = NO_CEDE  # deliveries[ceded_at:] were given back (cede): never started here
        self.keep_tail = False  # a share slot's page whose cede the engine refused: its tail runs here
        self.cede_warned = False  # a failed cede of this page was logged (a stopping slot retries before each start)

    def mark_lost(self, how: str) -> None:
        if self.lost or self.finishing:
            return
        self.lost = True
        self.abandon.set()
        log.warning(
            "batch %d of %s/%s is no longer this worker's (%s): another worker took it over after this "
            "one was silent for the queue's dead_interval, or a seek or the retention limit ended it; "
            "dropping it unacknowledged",
            self.batch_id, self.queue, self.consumer, how,
        )


class AsyncDelivery(Message):
    """One message handed to a handler, with what the handler may report about it.

    Read the message through the attributes (``payload``, ``type``, ``msg_id``, ...: a delivery
    is the received :class:`Message` itself, and ``message`` is the delivery);
    ``await msg.progress(42, stage="rendering", counters={"rows": 1200})`` records progress
    (visible in ``pglogq.in_flight``) and is a heartbeat; ``conn`` is the transaction the ack
    will commit in when the consumer is ``transactional`` (else None).  Compared and hashed by
    identity, as one handler call's object (not by its fields, as a Message is).
    """

    # one per event of every page, made by receive (one object per event, not a Message and a
    # delivery: half the objects the cyclic garbage collector goes through), completed by
    # ReceiveLoop._deliveries.  What every handler call sets is a slot; what most deliveries
    # never change stays a class default (in the instance's dict only once changed)
    __slots__ = ("__dict__", "__weakref__", "_ended", "_loop", "_page", "_t0", "_wall", "conn", "index", "running")
    skipped = False
    _reported = False
    _last_write = 0.0
    _last_stage: str | None = None
    _pending: tuple[float | None, str | None, dict[str, Any] | None] | None = None
    _verdict: str | None = None  # 'ack', 'retry' or 'dead' once the page is finished
    _failure: str | None = None  # why it was nacked
    _reject = False  # its handler raised Nack(dead=True): to the dead-letter queue at once
    _span: Any = None  # the tracing span of its handler call (pglogq.contrib.otel)

    # pglogq.Message's own are by field
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    conn: AnyConn | None
    index: int
    running: bool
    _loop: ReceiveLoop
    _page: _Page
    _t0: float
    _wall: float
    _ended: float  # time.time() when its handler returned or raised (0: not yet)

    @property
    def message(self) -> Message:
        """The received message: the delivery itself."""
        return self

    @property
    def started_at(self) -> datetime | None:
        """When its handler started (None: not yet)."""
        return datetime.fromtimestamp(self._wall, timezone.utc) if self._wall else None

    @property
    def worker(self) -> str:
        """This worker's label (as shown in ``pglogq.in_flight``)."""
        return self._loop.label

    @property
    def shard(self) -> str | None:
        """The shard of a cluster the message came from (a consumer of a sharded client), else None."""
        return self._loop.shard

    @property
    def lost(self) -> bool:
        """True once the batch was found taken over: stop working, the result will be dropped."""
        return self._page.lost

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked this running job to stop (``cancel(..., running=True)``).

        Seen within about ``heartbeat_interval``.  Stop cleanly: return (the event is
        acknowledged as handled) or raise (it is nacked)."""
        return self.msg_id in self._page.stop_ids

    def __repr__(self) -> str:
        return f"<Delivery msg_id={self.msg_id} type={self.type!r} batch={self.batch_id}>"

    # -- reporting ------------------------------------------------------------------------

    async def progress(
        self,
        percent: float | None = None,
        *,
        stage: str | None = None,
        counters: dict[str, Any] | None = None,
    ) -> bool:
        """Report progress (None keeps the last value); also a heartbeat of the batch.

        Writes at most every ``progress_interval`` per message (a changed stage or 100 % is
        written at once; the latest report is written by the heartbeat otherwise).
        Returns True to go on, False when the job was asked to stop (:attr:`cancel_requested`).
        Raises :class:`BatchLost` when the batch was taken over by another worker."""
        if percent is not None and not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, got {percent}")
        old = self._pending or (None, None, None)
        self._pending = (
            percent if percent is not None else old[0],
            stage if stage is not None else old[1],
            counters if counters is not None else old[2],
        )
        now = time.monotonic()
        if (
            not self._reported
            or now - self._last_write >= self._loop.progress_interval
            or (stage is not None and stage != self._last_stage)
            or (percent is not None and percent >= 100)
        ):
            await self._flush()
        if self._page.lost:
            raise BatchLost(f"batch {self.batch_id} was taken over by another worker")
        return not self.cancel_requested

    async def heartbeat(self) -> None:
        """Heartbeat the batch now (the runtime does it every ``heartbeat_interval`` anyway).

        Raises :class:`BatchLost` when the batch was taken over by another worker."""
        await self._loop._beat(self._page, force=True)
        if self._page.lost:
            raise BatchLost(f"batch {self.batch_id} was taken over by another worker")

    async def _flush(self) -> None:
        pending, self._pending = self._pending, None
        percent, stage, counters = pending or (None, None, None)
        self._last_write = time.monotonic()
        self._reported = True
        if stage is not None:
            self._last_stage = stage
        ok = await self._loop.client.report_progress(
            self.batch_id, self.msg_id, percent=percent, stage=stage, counters=counters,
            worker=self._loop.label, started_at=self.started_at,
        )
        if not ok:
            self._page.mark_lost("progress report refused")


class ReceiveLoop:
    """One receive loop of ``consumer``: pages until stopped, idle or ``max_batches`` (:meth:`serve`).

    Made when the consumer's ``run`` starts, one per loop (``workers``), with the consumer's
    settings and handlers as they are then, the client it reads through and its worker name
    (``name`` None: the consumer's own ``worker_name`` and ``label``).  The page sizing starts
    where the consumer's is (a consumer with one loop carries it over from one run to the next);
    ``health`` is the notification health this loop reports to (a fresh one when None)."""

    recoverable: tuple[type[BaseException], ...] = RECOVERABLE
    """What :meth:`serve` survives (it waits and receives again); anything else ends the loop."""

    backoff_max: float = ERROR_BACKOFF_MAX
    """The longest wait after failures in a row (see :meth:`_error_wait`)."""

    def __init__(
        self,
        consumer: AsyncConsumer,
        client: AsyncClient,
        name: str | None = None,
        health: NotifyHealth | None = None,
    ) -> None:
        self.consumer = consumer
        self.client = client
        self.queue = consumer.queue
        self.consumer_name = consumer.consumer_name
        self.worker_name = consumer.worker_name if name is None else name
        self.label = consumer.label if name is None else name
        """This worker's label (as shown in ``pglogq.in_flight``)."""
        self.shard: str | None = None
        """The shard of a cluster this loop reads (None: a single server's loop)."""
        # the settings, read once: the handler calls read them for every event
        self._routes = consumer._routes
        self.max_messages = consumer.max_messages
        self.concurrency = consumer.concurrency
        self.retry_policy = consumer.retry_policy
        self.message_timeout = consumer.message_timeout
        self.poll_interval = consumer.poll_interval
        self.heartbeat_interval = consumer.heartbeat_interval
        self.progress_interval = consumer.progress_interval
        self.transactional = consumer.transactional
        self.start_ahead = consumer.start_ahead
        # the page sizing and what was learnt of the queue
        self.page_size = consumer.page_size
        """The page size of the next receive (``max_messages``, or where the adaptive default is)."""
        self._pace = consumer._pace  # seconds per handler start, measured over pages
        self._partitioned = consumer._partitioned  # learnt when the loop starts
        # the run
        self.stats = RunStats()
        self.health = NotifyHealth(consumer.health.limit) if health is None else health
        self.wakeup: AnyWakeup | None = None
        self._page: _Page | None = None
        self._stopping = False
        self._failures_in_row = 0  # receives (or pages) that failed since the last receive that worked
        self._failing_since = 0.0
        self._stop_event = _concurrency_async.Event()
        self._hb_stop = _concurrency_async.Event()
        self._hb_wake = _concurrency_async.Event()  # set: the heartbeat side looks at once (stop, poke)
        self._hb_idle = False  # the heartbeat side waits for a page (no timeout): _handle pokes it
        self._runner = _concurrency_async.Runner(self.concurrency, self.message_timeout)
        self._strict_runner = _concurrency_async.Runner(1, self.message_timeout)

    def __repr__(self) -> str:
        who = f" worker={self.worker_name!r}" if self.worker_name else ""
        where = f" shard={self.shard!r}" if self.shard is not None else ""
        return f"<{type(self.consumer).__name__} {self.queue}/{self.consumer_name}{who}{where}>"

    def stop(self, *, abandon: bool = False) -> None:
        """Ask :meth:`serve` to return (as the consumer's ``stop``)."""
        self._stopping = True
        self._stop_event.set()
        if abandon:
            page = self._page
            if page is not None:
                page.abandon.set()

    # -- the wake-up ----------------------------------------------------------------------

    async def listen(self) -> AnyWakeup:
        """Make this loop's wake-up (:attr:`wakeup`), which :meth:`serve` waits on and closes."""
        consumer = self.consumer
        if consumer.listen_dsn is not None:
            conninfo: str | None = consumer.listen_dsn
        elif consumer.pooled:
            conninfo = None
            log.info("%r: pooled DSN and no listen_dsn: polling for ticks every %g s", self, self.poll_interval)
        else:
            conninfo = await self._conninfo()
        self.wakeup = AsyncWakeup(conninfo, self.queue, self._stop_event, self._send_probe,
                                  consumer.listen_probe_timeout)
        return self.wakeup

    async def _conninfo(self) -> str:
        # the consumer's: its loops share its client
        return await self.consumer._conninfo()

    async def _send_probe(self, channel: str) -> None:
        await self.consumer._send_probe(channel)

    # -- the loop -------------------------------------------------------------------------

    async def serve(self, stop_when_idle: bool, max_batches: int | None) -> None:
        """Receive and handle pages until stopped, idle (``stop_when_idle``) or ``max_batches``."""
        stats = self.stats
        wake = self.wakeup if self.wakeup is not None else await self.listen()
        beat = _concurrency_async.Background(self._heartbeat_loop, name=f"pglogq-heartbeat-{self.label}")
        polled = False
        try:
            while not self._stopping:
                if max_batches is not None and stats.pages >= max_batches:
                    break
                try:
                    # the page's objects live until it is acknowledged: the collector would only
                    # scan them (pglogq._collector)
                    with _collector.held_off():
                        if self._partitioned is None:
                            self._partitioned = await self._learn_partitioned()
                        batch = await self._receive()
                        if self._failures_in_row:
                            self._recovered()
                        if batch is None:
                            continue  # nothing to wait for: receive again at once
                        if batch:
                            if polled and self.health.found_by_polling():
                                log.warning(
                                    "no tick notification arrived on channel %s for %d polls that found events: "
                                    "LISTEN does not work on this connection (a transaction-mode pooler?) or the "
                                    "listener was dropped; reconnecting it and polling every %g s meanwhile",
                                    wake.channel, self.health.misses, self.poll_interval,
                                )
                                await wake.reconnect()
                            polled = False
                            await self._handle(batch)
                            del batch  # its messages are freed before the collector is back
                            continue
                except self.recoverable as exc:
                    stats.errors += 1
                    wait = self._error_wait()
                    self._log_error(exc, wait)
                    await _concurrency_async.wait_event(self._stop_event, wait)
                    continue
                self._idle()
                if stop_when_idle and self._drained():
                    break
                if await wake.wait(self.poll_interval):
                    self.health.notified()
                    polled = False
                else:
                    polled = True
        finally:
            self._runner.close()
            self._strict_runner.close()
            self._hb_stop.set()
            self._hb_wake.set()
            await beat.join()
            await wake.close()

    async def _receive(self) -> AsyncBatch | None:
        """The next page (empty: nothing to do; None: look again at once)."""
        return await self.client._receive(
            self.queue, self.consumer_name, max_messages=self.page_size, worker=self.worker_name,
            start_first=self._ahead(), conn=None, cls=AsyncDelivery,
        )

    async def _learn_partitioned(self) -> bool:
        """Whether the queue is partitioned (asked once per run)."""
        rows = await self.client.queue_info(self.queue)
        return bool(rows) and rows[0].partitions > 1  # none: dropped meanwhile (receive says so)

    def _error_wait(self) -> float:
        """The wait after a database error before the next receive: ``poll_interval``, doubling at
        each failure in a row up to :attr:`backoff_max`."""
        self._failures_in_row += 1
        if self._failures_in_row == 1:
            self._failing_since = time.monotonic()
        longest = max(self.poll_interval, self.backoff_max)
        return float(min(longest, self.poll_interval * 2.0 ** min(self._failures_in_row - 1, 32)))

    def _log_error(self, exc: BaseException, wait: float) -> None:
        more = f" (failure {self._failures_in_row} in a row)" if self._failures_in_row > 1 else ""
        log.warning("%r: database error (%s); trying again in %g s%s", self, " ".join(str(exc).split()) or
                    type(exc).__name__, wait, more)

    def _recovered(self) -> None:
        """A receive worked after failures in a row: say so, and start the backoff afresh."""
        log.warning("%r: the database is reachable again after %d failed attempt(s) over %.1f s", self,
                    self._failures_in_row, time.monotonic() - self._failing_since)
        self._failures_in_row = 0

    def _idle(self) -> None:
        """A receive found nothing: the loop waits for a wake-up next (or ends its drain)."""

    def _drained(self) -> bool:
        """Whether a drain (``stop_when_idle``) ends now that a receive found nothing."""
        return True

    # -- what a share consumer's slot overrides (ShareSlot) ---------------------------------

    _watch_every = float("inf")
    """How often (seconds) the heartbeat side calls :meth:`_watch`, at most (its step is half the
    shortest of this, the heartbeat, progress and start-ahead intervals)."""

    async def _watch(self, page: _Page) -> float | None:
        """Called by the heartbeat side at each step while ``page`` is handled; the seconds until
        it wants to be called again, when sooner than the next step (None: at the next step)."""
        return None

    async def _before_start(self, page: _Page, index: int) -> bool:
        """Whether the event at ``index`` of a page marked ``ceding`` may start (False: it was
        given back, skip it).  Called before the event counts as started."""
        return index < page.ceded_at

    # -- one page -------------------------------------------------------------------------

    def _ahead(self) -> int:
        """How many events to mark started at once: those expected to start within half of
        ``start_ahead`` (at least the ``concurrency`` that start at once)."""
        if self.start_ahead <= 0:
            return 0
        if self._pace is None:
            return self.concurrency
        n = int(self.start_ahead / 2 / max(self._pace, 1e-7))
        return max(self.concurrency, min(n, self.page_size))

    def _paced(self, page: _Page) -> None:
        """Learn the pace of handler starts from a finished page (and size the next page)."""
        if page.released:
            self._pace = self.start_ahead  # a slow handler: mark one event at a time for a while
            self._size_page(None)
            return
        n = page.started + 1
        if n <= 0 or self.start_ahead <= 0:
            return
        # the pace of the handler calls alone: up to when the last returned, without the ack
        # (with it, a quick handler's page looked slower than its starts, and fewer events were
        # marked in receive than start_ahead allows: a mark_started round trip more per page)
        end = page.handled_at or time.monotonic()
        pace = max(0.0, end - page.first_start - page.claim_seconds) / n
        self._pace = pace if self._pace is None else 0.5 * self._pace + 0.5 * pace
        self._size_page(max(pace, self._pace))

    def _size_page(self, pace: float | None) -> None:
        """The adaptive page (``max_messages`` None): ``PAGE_SECONDS`` of handler starts at
        ``pace`` (None: a slow handler, back to ``PAGE_MIN``), at most four times the last page."""
        if self.max_messages is not None:
            return
        if pace is None:
            self.page_size = PAGE_MIN
            return
        want = int(PAGE_SECONDS / pace) if pace > 0 else PAGE_MAX
        self.page_size = max(PAGE_MIN, min(PAGE_MAX, want, self.page_size * 4))

    async def _handle(self, batch: AsyncBatch) -> None:
        assert batch.id is not None
        page = _Page(batch.id, self.queue, self.consumer_name)
        page.strict = bool(self._partitioned)
        page.claimed = min(self._ahead(), len(batch)) - 1
        page.chunk = max(1, page.claimed + 1)
        self._page = page
        if self._hb_idle:
            self._hb_wake.set()  # the heartbeat side waits for a page (see _heartbeat_loop)
        acked = False
        try:
            if self.transactional:
                acked = await self._handle_in_transaction(batch, page)
            else:
                deliveries = self._deliveries(batch, page, None)
                units: list[Unit[AsyncDelivery]] | None = None
                if page.strict or self._routes.has_batch():
                    units = group_units(deliveries, _type_of, self._routes, _error_of, contiguous=page.strict)
                    outcomes = await self._run_units(page, units, None)
                else:
                    # every handler takes one message: call i is delivery i (the units group_units
                    # would make are made only if the page needs them, see _finish)
                    outcomes = await self._runner.run(_EachCalls(self, deliveries), page.abandon)
                page.handled_at = time.monotonic()
                if self._dropped(page, outcomes):
                    await self._give_back(page)
                    return
                acked = await self._finish(page, units, outcomes, None)
        finally:
            page.finishing = True
            self._page = None
            self._paced(page)
            _trace.settle(page.deliveries, acked)
            # the page and its deliveries point at each other: break the cycle, so that they are
            # freed now (by reference counting) rather than by the cyclic garbage collector
            page.deliveries = []

    async def _handle_in_transaction(self, batch: AsyncBatch, page: _Page) -> bool:
        try:
            async with self.client.connection() as conn, conn.transaction():
                deliveries = self._deliveries(batch, page, conn)
                units = group_units(deliveries, _type_of, self._routes, _error_of, contiguous=page.strict)
                outcomes = await self._run_units(page, units, conn)
                page.handled_at = time.monotonic()
                if self._runner.left_behind or self._strict_runner.left_behind:
                    # abandoned while a handler still holds the page's connection (a thread cannot
                    # be stopped): cancel its statement and close the connection under its lock,
                    # so the handler cannot write anything more; nothing of the page commits
                    await _concurrency_async.close_busy(conn)
                if self._dropped(page, outcomes):
                    await self._give_back(page)
                    raise _Dropped()
                if not await self._finish(page, units, outcomes, conn):
                    raise _Dropped()
        except _Dropped:
            return False
        return True

    async def _run_units(self, page: _Page, units: list[Unit[AsyncDelivery]], conn: AnyConn | None) -> list[Outcome]:
        """Run the handler calls of a page: at most ``concurrency`` at once; on a partition's page
        (strict) one at a time in page order, the first failure nacked at once and, unless it
        went to the dead-letter queue, acknowledged with the page, the calls after it not made."""
        if not page.strict:
            return await self._runner.run(_Calls(self, units, conn), page.abandon)
        outcomes = [NOT_RUN_OUTCOME] * len(units)
        for i, unit in enumerate(units):
            outcome = outcomes[i] = (await self._strict_runner.run(_Calls(self, [unit], conn), page.abandon))[0]
            if outcome[0] == OK:
                continue
            if outcome[0] == ABANDONED or page.lost:
                break  # dropped unacknowledged (_dropped)
            if await self._nack_now(page, unit, outcome, conn) != "dead":
                break
        return outcomes

    async def _nack_now(
        self, page: _Page, unit: Unit[AsyncDelivery], outcome: Outcome, conn: AnyConn | None
    ) -> str | None:
        """Nack the first event of a failed call of a strict page now; unless it went to the
        dead-letter queue, acknowledge the page in the same transaction (the engine acknowledges
        it up to that event).  The verdict; None when the batch was found lost."""
        d = next(d for d in unit.items if not d.skipped)
        reason, after, policy = self._failure(unit, outcome)
        last = page.deliveries[-1].message
        try:
            async with self.client.connection(conn) as c, c.transaction():
                dead = d.message.decode_error is not None or _rejected(outcome)
                d._verdict = await self.client.nack(d.message, retry_after=_retry_delay(d, after, policy),
                                                    reason=reason, dead=dead, conn=c)
                d._failure = reason
                if d._verdict != "dead":
                    page.finishing = True
                    await _outcomes_async.ack(self, page, last, c, failed=True)
                    page.acked = True
        except StaleBatch:
            page.finishing = False
            page.mark_lost("nack or ack refused")
            return None
        return d._verdict

    def _deliveries(self, batch: AsyncBatch, page: _Page, conn: AnyConn | None) -> list[AsyncDelivery]:
        """The page's deliveries: the messages of ``batch`` (made as deliveries by receive), completed."""
        deliveries: list[AsyncDelivery] = batch.messages  # type: ignore[assignment]
        for i, d in enumerate(deliveries):
            d._page, d._loop, d.conn, d.index = page, self, conn, i
            d._wall = d._t0 = d._ended = 0.0  # time.time() when its handler started (0: not started), monotonic then
            d.running = False
        page.deliveries = deliveries
        return deliveries

    def _starting(self, page: _Page, items: list[AsyncDelivery]) -> int:
        """Note that the unit's events (``items``) start now; the index to mark up to (-1:
        marked already).

        No I/O: the common case (marked already, in a group) costs no await at all."""
        top = items[-1].index if len(items) == 1 else max(d.index for d in items)
        if top > page.started:
            page.started = top  # first: a release (heartbeat side) never moves the frontier below it
        if not page.first_start:
            page.first_start = time.monotonic()
        return top if top > page.claimed or page.releasing else -1

    async def _claim(self, page: _Page, top: int) -> None:
        """Mark the events up to ``top`` started (and a group after it, at the measured pace)."""
        async with page.lock:
            if top <= page.claimed or top >= page.ceded_at:
                return
            t0 = time.monotonic()
            # the events marked last started within half the window: mark twice as many
            quick = self.start_ahead > 0 and t0 - page.claimed_at < self.start_ahead / 2
            page.chunk = max(self._ahead(), page.chunk * 2 if quick else 1)
            upto = min(len(page.deliveries) - 1, max(top, page.started + page.chunk))
            gone = await self.client.mark_started(page.deliveries[upto].message)
            if gone is None:
                page.mark_lost("start refused")
                raise BatchLost(f"batch {page.batch_id} was taken over by another worker")
            page.cancelled.update(gone)
            page.claimed = upto
            page.claimed_at = time.monotonic()
            page.claim_seconds += page.claimed_at - t0

    def _live(self, page: _Page, items: list[AsyncDelivery]) -> list[AsyncDelivery]:
        """The items not cancelled after they were received (those are never started)."""
        live = [d for d in items if d.msg_id not in page.cancelled]
        for d in items:
            if d.msg_id in page.cancelled:
                d.skipped = True
                log.info("%r: message %d was cancelled after it was received: not started", self, d.msg_id)
        return live

    async def _release(self, page: _Page) -> None:
        """Move the start frontier back to what has started when marked events wait too long.

        The wait counts from the page's first handler start, not before: until then the runtime
        is preparing the page (a large page takes a while), and releasing the events that
        receive marked would only have the first handler mark them again (two round trips), and
        make a quick handler look slow (the page size would fall back to ``PAGE_MIN``)."""
        if (
            page.claimed <= page.started
            or not page.first_start
            or time.monotonic() - max(page.claimed_at, page.first_start) < self.start_ahead
        ):
            return
        async with page.lock:
            page.releasing = True  # before reading page.started (see _claim)
            try:
                back = min(page.started, page.claimed)
                if page.claimed <= back or page.finishing or page.lost:
                    return
                to = page.deliveries[back].message if back >= 0 else None
                got = await self.client.mark_started(to, back=True, batch_id=page.batch_id)
                if got is None:
                    page.mark_lost("start refused")
                    return
                page.claimed = back
                page.released = True
                self._pace = self.start_ahead
            finally:
                page.releasing = False

    async def _give_back(self, page: _Page) -> None:
        """An abandoned page (stop(abandon=True)) goes back as never started: the operator
        stopped it, so no failed attempt is counted (a crash or a takeover counts one)."""
        if page.lost or page.claimed < 0:
            return
        with contextlib.suppress(PglogqError, *RECOVERABLE):
            await self.client.mark_started(None, back=True, batch_id=page.batch_id)

    def _dropped(self, page: _Page, outcomes: list[Outcome]) -> bool:
        if page.lost:
            self.stats.lost_pages += 1
            return True
        # the runners give that one tuple for every abandoned call, and only once abandon is set
        # (checked first: a page's outcomes are thousands of tuples to compare)
        if page.abandon.is_set() and ABANDONED_OUTCOME in outcomes:
            self.stats.abandoned_pages += 1
            log.warning("%r: page of batch %d abandoned unacknowledged (it comes back)", self, page.batch_id)
            return True
        return False

    async def _run_unit(self, unit: Unit[AsyncDelivery], conn: AnyConn | None) -> None:
        """One handler call of a page (``conn``: the page's transaction, if transactional)."""
        items = unit.items  # a unit of one makes its list on each read: read it once
        page = items[0]._page
        if page.ceding and not await self._before_start(page, items[0].index):
            _skip(items)
            return
        t0 = time.monotonic()
        if t0 - page.last_beat >= self.heartbeat_interval:
            # never start a message on a batch whose lease was not confirmed lately
            await self._beat(page, force=True)
            t0 = time.monotonic()
        if page.lost:
            raise BatchLost(f"batch {page.batch_id} was taken over by another worker")
        top = self._starting(page, items)
        if top >= 0:
            await self._claim(page, top)
            t0 = time.monotonic()
            if top >= page.ceded_at:  # given back while this unit waited to mark its start
                _skip(items)
                return
        todo = unit
        if page.cancelled:
            live = self._live(page, items)
            if not live:
                return  # cancelled after it was received: acknowledged with the page, never run
            if len(live) < len(items):
                todo = Unit(unit.route, live, unit.error)
                items = live
        wall = time.time()
        for d in items:
            d._wall, d._t0, d.running = wall, t0, True
        try:
            if todo.error is not None:
                raise UndecodableEvent(todo.error)
            route = todo.route
            if route is None:
                raise LookupError(f"no handler for event type {items[0].type!r}")
            if conn is not None:
                async with conn.transaction():
                    await self._call(todo)
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        # leaving the block with an error rolls back to the handler's savepoint
                        raise HandlerLeftTransactionFailed(
                            "the handler returned with its transaction in error (it caught an SQL "
                            "error without rolling back to a savepoint): its work was rolled back"
                        )
            elif route.kind == "batch":
                await route.fn(items)
            else:
                await route.fn(items[0])
        finally:
            end = time.time()
            for d in items:
                d.running = False
                d._ended = end

    async def _call(self, unit: Unit[AsyncDelivery]) -> None:
        assert unit.route is not None
        if unit.route.kind == "batch":
            await unit.route.fn(unit.items)
        else:
            await unit.route.fn(unit.items[0])

    async def _finish(
        self, page: _Page, units: list[Unit[AsyncDelivery]] | None, outcomes: list[Outcome], conn: AnyConn | None
    ) -> bool:
        """Nack the failures and ack the page in one transaction; False when the batch was lost.

        ``units`` None: the page ran through :class:`_EachCalls` (one call per delivery)."""
        failures: list[tuple[AsyncDelivery, str, Any, RetryPolicy | None]] = []
        ok = timed_out = 0
        cancelled = 0
        calls: Iterator[tuple[Unit[AsyncDelivery], Outcome]] = iter(())
        if not page.cancelled and page.ceded_at == NO_CEDE and outcomes.count(OK_OUTCOME) == len(outcomes) == (
            len(page.deliveries) if units is None else len(units)
        ):
            # the common page: every call returned and nothing was cancelled, so every delivery
            # is acknowledged; counted without going through them (only a tracer reads verdicts)
            ok = len(page.deliveries)
            if _trace.tracer is not None:
                for d in page.deliveries:
                    d._verdict = "ack"
        else:
            if units is None:  # the calls of _EachCalls: the units group_units makes of such a page
                units = group_units(page.deliveries, _type_of, self._routes, _error_of)
            calls = zip(units, outcomes, strict=True)
        for unit, outcome in calls:
            if outcome is NOT_RUN_OUTCOME:
                continue  # after the failure that ended a strict page: it comes again
            if outcome[0] == OK:
                for d in unit.items:
                    if d.skipped:
                        cancelled += d.index < page.ceded_at  # a ceded one was counted when ceded
                    else:
                        ok += 1
                        d._verdict = "ack"
                continue
            cancelled += sum(1 for d in unit.items if d.skipped and d.index < page.ceded_at)
            if outcome[0] == TIMEOUT:
                timed_out += len(unit.items)
            if page.strict:  # nacked already (_nack_now): only its first event
                failures.extend((d, d._failure or "", None, None) for d in unit.items if d._verdict is not None)
                continue
            reason, after, policy = self._failure(unit, outcome)
            if _rejected(outcome):
                for d in unit.items:
                    d._reject = True
            failures.extend((d, reason, after, policy) for d in unit.items if not d.skipped)
        page.finishing = True
        verdicts: list[str] = []
        last = page.deliveries[-1].message if page.deliveries else None
        try:
            if page.acked:
                verdicts.extend(d._verdict or "" for d, *_ in failures)
            elif not any(d._verdict is None for d, *_ in failures) and conn is None:
                # nothing to nack: the ack alone, one statement and one round trip (BEGIN and
                # COMMIT around it would be two more)
                verdicts.extend(d._verdict or "" for d, *_ in failures)
                await _outcomes_async.ack(self, page, last, failed=bool(failures))
            else:
                await self._nack_and_ack(page, failures, verdicts, last, conn)
        except StaleBatch:
            page.finishing = False
            page.mark_lost("ack refused")
            self.stats.lost_pages += 1
            return False
        stats = self.stats
        stats.pages += 1
        stats.handled += ok
        stats.cancelled += cancelled
        stats.failed += len(failures)
        stats.timed_out += timed_out
        stats.retried += verdicts.count("retry")
        stats.dead += verdicts.count("dead")
        return True

    async def _nack_and_ack(
        self,
        page: _Page,
        failures: list[tuple[AsyncDelivery, str, Any, RetryPolicy | None]],
        verdicts: list[str],
        last: Message | None,
        conn: AnyConn | None,
    ) -> None:
        """Nack the failures and ack the page in one transaction (``conn``'s when given)."""
        async with self.client.connection(conn) as c, c.transaction():
            for d, reason, after, policy in failures:
                if d._verdict is None:  # else nacked already (a strict page's failure)
                    # a payload or headers Python cannot decode fail the same way on every try:
                    # straight to the dead-letter queue, not max_retries retries first
                    undecodable = d.message.decode_error is not None
                    d._verdict = await self.client.nack(d.message, retry_after=_retry_delay(d, after, policy),
                                                        reason=reason, dead=undecodable or d._reject, conn=c)
                    d._failure = reason
                verdicts.append(d._verdict)
            await _outcomes_async.ack(self, page, last, c, failed=True)

    def _failure(self, unit: Unit[AsyncDelivery], outcome: Outcome) -> tuple[str, Any, RetryPolicy | None]:
        """Log a failed handler call; its nack reason, a Nack's retry_after and the retry policy."""
        exc = outcome[1]
        after: Any = None
        if isinstance(exc, Nack):
            # expected: one line; the traceback only for whoever debugs
            log.warning("%r: nacked %s: %s", self, unit.items, exc.reason)
            log.debug("%r: where the Nack of %s was raised", self, unit.items, exc_info=exc)
            after = exc.retry_after
        elif exc is not None and outcome[0] != TIMEOUT:
            log.warning("%r: handler failed for %s: %s", self, unit.items, failure_reason(outcome, None),
                        exc_info=exc)
        # a Nack's retry_after, else the handler's own policy, else the consumer's (None: the
        # server's rule for the type)
        policy = unit.route.retry_policy if unit.route is not None else None
        return failure_reason(outcome, self.message_timeout), after, policy if policy is not None else self.retry_policy

    # -- heartbeat ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        step = max(0.02, min(self.heartbeat_interval, self.progress_interval, self._watch_every,
                             self.start_ahead if self.start_ahead > 0 else float("inf")) / 2)
        wait: float | None = step
        while not self._hb_stop.is_set():
            await _concurrency_async.wait_event(self._hb_wake, wait)
            self._hb_wake.clear()  # before looking: a poke from now on is seen at the next wait
            # no lease or page: nothing to renew or watch until _handle sets one and pokes (an
            # idle consumer's heartbeat side woke 20 times a second for nothing).  Idle is said
            # before the page is read, and _handle sets the page before it reads idle: either
            # this side sees the page, or _handle sees it idle and pokes.  Pokes only then: one
            # per page would wake it thousands of times a second under load
            self._hb_idle = True
            page = self._page
            self._hb_idle = page is None
            wait = step if page is not None else None
            if page is None or page.finishing or page.lost:
                continue
            try:
                await self._release(page)
                soon = await self._watch(page)
                if soon is not None:
                    wait = max(0.001, min(step, soon))
                await self._beat(page)
            except (PglogqError, *RECOVERABLE) as exc:
                log.warning("%r: heartbeat of batch %d failed: %s", self, page.batch_id, exc)

    async def _beat(self, page: _Page, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - page.last_beat >= self.heartbeat_interval:
            # the lease counts from when a heartbeat was sent, and only once it is confirmed
            if not await self.client.heartbeat(page.batch_id):
                page.mark_lost("heartbeat refused")
                return
            page.last_beat = max(page.last_beat, now)
            running = [d.msg_id for d in page.deliveries if d.running and now - d._t0 >= self.heartbeat_interval]
            if running:
                page.stop_ids.update(await self.client.stop_requests(page.batch_id, running))
        for d in list(page.deliveries):
            if not d.running or page.lost:
                continue
            if (d._pending is not None and now - d._last_write >= self.progress_interval) or (
                not d._reported and now - d._t0 >= self.heartbeat_interval
            ):
                await d._flush()


class ShareSlot(ReceiveLoop):
    """One handler slot of a share consumer (``subscribe(..., share=True)``): a receive loop
    whose pages are leases of its own (worker ``name``), handled one event at a time in lease order.

    Beside what every loop does: an adaptive lease starts at ``LEASE_MIN`` event and grows with
    the measured pace as pages do; when the event being handled has run for the consumer's
    ``cede_after`` seconds, or when the loop is stopped, the events of the lease that have not
    started are given back (``cede``, keeping the last started one) for any idle slot or worker
    to take at once, and the slot acknowledges its lease as it was returned.  A page abandoned
    (``stop(abandon=True)``) is given back whole.  The slots of one consumer wait on one shared
    listener (``wakeup``)."""

    def __init__(
        self,
        consumer: AsyncConsumer,
        client: AsyncClient,
        name: str,
        wakeup: AsyncSharedWakeup,
        group: SlotGroup | None = None,
    ) -> None:
        super().__init__(consumer, client, name)
        self._group = SlotGroup(consumer) if group is None else group
        self._group.join(self)
        self.concurrency = 1  # a slot runs its lease in order, one event at a time
        self._runner = _concurrency_async.Runner(1, self.message_timeout)
        self.cede_after = consumer.cede_after
        self._watch_every = self.cede_after
        self._shared = wakeup
        self._partitioned = False  # a lease runs in order, one event at a time: a partition's too
        self._partition_pages: bool | None = None  # the leases are partitions' pages (never ceded)
        if self.max_messages is None:
            self.page_size = LEASE_MIN

    async def listen(self) -> AnyWakeup:
        self.wakeup = self._shared
        return self._shared

    async def serve(self, stop_when_idle: bool, max_batches: int | None) -> None:
        try:
            await super().serve(stop_when_idle, max_batches)
        finally:
            self._group.leave(self, stop_when_idle)

    async def _receive(self) -> AsyncBatch | None:
        if not self._group.busy(self):
            self.stop()  # the drain is over (every slot found nothing)
            return None
        if self._partition_pages is None:
            self._partition_pages = await self._learn_partitioned()
        return await super()._receive()

    def _idle(self) -> None:
        self._group.idle(self)

    def _drained(self) -> bool:
        """A drain ends only when every slot of the consumer found nothing (none holds a lease that
        could cede events, nothing ceded is waiting): until then an idle slot waits, and takes
        what a busy one gives back."""
        return self._group.drained()

    def stop(self, *, abandon: bool = False) -> None:
        super().stop(abandon=abandon)
        page = self._page
        if page is not None and not abandon:
            page.ceding = True  # start nothing more: the tail is given back (_before_start, _watch)

    def _size_page(self, pace: float | None) -> None:
        """The adaptive lease: as a page (``PAGE_SECONDS`` of handler starts at ``pace``, at most
        four times the last), but from ``LEASE_MIN``, to which it falls back after a slow event."""
        if self.max_messages is not None:
            return
        if pace is None:
            self.page_size = LEASE_MIN
            return
        want = int(PAGE_SECONDS / pace) if pace > 0 else PAGE_MAX
        self.page_size = max(LEASE_MIN, min(PAGE_MAX, want, self.page_size * 4))

    def _paced(self, page: _Page) -> None:
        if page.ceded_at != NO_CEDE:
            self._pace = max(self._pace or 0.0, self.start_ahead)  # a slow event: small leases for a while
            self._size_page(None)
            return
        super()._paced(page)

    def poke(self) -> None:
        """Have the heartbeat side look at the lease now (another slot went idle)."""
        self._hb_wake.set()

    async def _watch(self, page: _Page) -> float | None:
        """Give the lease's tail back when its running event has run for ``cede_after``, or for
        ``IDLE_CEDE_AFTER`` while another slot of the consumer is idle (or at once when stopping);
        the seconds until that time comes."""
        if page.ceded_at != NO_CEDE or self._partition_pages or page.keep_tail:
            return None
        i = page.started
        if i + 1 >= len(page.deliveries):
            return None  # nothing after the event that started last
        if not self._stopping:
            if i < 0:
                return None
            d = page.deliveries[i]
            if not d.running:
                return None
            after, why = self.cede_after, f"cede_after ({self.cede_after:g} s)"
            if after > IDLE_CEDE_AFTER and self._group.others_idle(self):
                after, why = IDLE_CEDE_AFTER, f"{IDLE_CEDE_AFTER * 1000:g} ms while another slot is idle"
            left = after - (time.monotonic() - d._t0)
            if left > 0:
                return left
            await self._cede(page, why)
            return None
        await self._cede(page)
        return None

    async def _before_start(self, page: _Page, index: int) -> bool:
        if self._stopping and index > page.started:
            await self._cede(page)  # stopping: nothing more starts here
        else:
            async with page.lock:
                pass  # a cede under way: wait for it to settle
        return index < page.ceded_at

    async def _cede(self, page: _Page, why: str = "") -> None:
        """Give back the events of the lease after the last one started (``cede``).

        Under the page's lock, with ``releasing`` set before ``started`` is read (the handler side
        writes ``started`` before it reads ``releasing``, see _claim): either the event starting
        now is kept, or it sees the cede and never starts.  The start marks ahead of the kept
        event are moved back first (the engine refuses to cede started events).  Should the cede
        fail, the slot runs the tail itself, and does not try again for this page (a stopping
        slot tried before each start, and warned each time).  A partition's page is never ceded
        (the events after a started one are its keys' next, which wait for it: the engine
        refuses): its slot runs it to its end, as an ordinary consumer's stop finishes its page."""
        if self._partition_pages or page.keep_tail:
            return
        async with page.lock:
            if page.ceded_at != NO_CEDE or page.finishing or page.lost:
                return
            page.ceding = True
            page.releasing = True
            n = len(page.deliveries)
            keep = page.started
            settled = False
            try:
                if keep >= n - 1:
                    return
                page.ceded_at = keep + 1
                to = page.deliveries[keep].message if keep >= 0 else None
                if page.claimed > keep:
                    if await self.client.mark_started(to, back=True, batch_id=page.batch_id) is None:
                        settled = True
                        page.mark_lost("start refused")
                        return
                    page.claimed = keep
                await self.client.cede(page.batch_id, keep=to)
                settled = True
            except (StaleBatch, UnknownBatch):
                settled = True
                page.mark_lost("cede refused")
                return
            except CedeRefused as exc:
                page.keep_tail = True  # the engine's answer for this page: not asked again
                log.warning("%r: could not give back the unstarted events of lease %d (%s): running them here",
                            self, page.batch_id, exc)
                return
            except (PglogqError, *RECOVERABLE) as exc:
                if not page.cede_warned:  # a transient failure: tried again, logged once
                    page.cede_warned = True
                    log.warning("%r: could not give back the unstarted events of lease %d (%s): running them "
                                "here unless a later try succeeds", self, page.batch_id, exc)
                return
            finally:
                if not settled:
                    page.ceded_at = NO_CEDE
                page.releasing = False
        self.stats.ceded += n - keep - 1
        log.info("%r: gave back %d unstarted event(s) of lease %d (%s) for other workers to take",
                 self, n - keep - 1, page.batch_id,
                 "stopping" if self._stopping else f"message {page.deliveries[keep].msg_id} runs longer than {why}")

    async def _give_back(self, page: _Page) -> None:
        """An abandoned lease goes back whole (no failed attempt counted), for another worker to
        take at once rather than after ``dead_interval``."""
        if page.lost:
            return
        with contextlib.suppress(PglogqError, *RECOVERABLE):
            if page.claimed >= 0 and await self.client.mark_started(None, back=True, batch_id=page.batch_id) is None:
                return
            if await self.client.cede(page.batch_id):
                self.stats.ceded += min(page.ceded_at, len(page.deliveries))


class SlotGroup:
    """What the handler slots of one share consumer's run know of each other: which are idle
    (their last receive found nothing, they wait for a wake-up) and which are busy (receiving,
    or handling a lease).  On a cluster the slots of every shard are one group for the end of a
    drain, but a slot gives its tail only to the idle slots of its own shard (a lease holds
    events of one shard: another shard's slot could not take them).

    A drain (``run(stop_when_idle=True)``) ends when every slot still serving is idle: then no
    slot holds a lease that could cede events, and the last receive found nothing ceded either;
    the slot that sees it stops the consumer, which wakes the others.  Until then an idle slot
    waits on the shared listener: a cede notifies it, and it takes the tail.  Its state changes
    without awaiting, under a thread lock (so it serves asyncio tasks as well as threads)."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer
        self._lock = threading.Lock()
        self._slots: list[ShareSlot] = []
        self._idle: set[int] = set()  # ids of the idle slots
        self._gone: set[int] = set()  # ids of the slots whose serve returned
        self.over = False
        """True once a drain found every slot idle: the slots return."""

    def join(self, slot: ShareSlot) -> None:
        with self._lock:
            self._slots.append(slot)

    def busy(self, slot: ShareSlot) -> bool:
        """``slot`` is about to receive: busy until a receive finds nothing.  False when the drain
        is over already (the slot must not take anything more)."""
        with self._lock:
            if self.over:
                return False
            self._idle.discard(id(slot))
            return True

    def idle(self, slot: ShareSlot) -> None:
        """``slot``'s receive found nothing: the busy slots look at once whether to give their
        lease's tail to it (``ShareSlot._watch``)."""
        with self._lock:
            self._idle.add(id(slot))
            busy = [s for s in self._slots
                    if s.shard == slot.shard and id(s) not in self._idle and id(s) not in self._gone]
        for s in busy:
            s.poke()

    def others_idle(self, slot: ShareSlot) -> bool:
        """Whether a slot of ``slot``'s shard other than ``slot`` is idle."""
        with self._lock:
            return any(s is not slot and s.shard == slot.shard and id(s) in self._idle for s in self._slots)

    def _all_idle(self) -> bool:
        return all(id(s) in self._idle or id(s) in self._gone for s in self._slots)

    def drained(self) -> bool:
        """Whether a drain ends (called by an idle slot): every slot is idle or gone."""
        with self._lock:
            if not self.over and self._all_idle():
                self.over = True
            over = self.over
        if over:
            self.consumer.stop()  # wakes the slots waiting on the listener: they return
        return over

    def leave(self, slot: ShareSlot, stop_when_idle: bool) -> None:
        """``slot``'s serve returned (stopped, ``max_batches``, failed): a drain no longer waits
        for it."""
        with self._lock:
            self._gone.add(id(slot))
            self._idle.discard(id(slot))
            end = stop_when_idle and not self.over and self._all_idle() and len(self._gone) < len(self._slots)
            if end:
                self.over = True
        if end:
            self.consumer.stop()


class _EachCalls:
    """The handler calls of a page whose handlers all take one message (no batch handler, not a
    partition's page) for the runner: call ``i`` handles delivery ``i``, as the unit of one
    delivery :func:`group_units` would make for it.

    The usual call (its event marked started already, nothing cancelled on the page, the lease
    confirmed within ``heartbeat_interval``, a handler for its type, a decoded event, no tracer)
    starts the handler here, with no unit and no I/O; any other goes through
    :meth:`ReceiveLoop._run_unit` as before."""

    __slots__ = ("_deliveries", "_loop", "_routes")

    def __init__(self, loop: ReceiveLoop, deliveries: list[AsyncDelivery]) -> None:
        self._loop = loop
        self._deliveries = deliveries
        self._routes: dict[str | None, Route | None] = {}  # the route of each type met on the page

    def __len__(self) -> int:
        return len(self._deliveries)

    async def __call__(self, i: int) -> None:
        d = self._deliveries[i]
        page = d._page
        if page.ceding and not await self._loop._before_start(page, i):
            d.skipped = True
            return  # given back (a share consumer's slot): another worker runs it
        try:
            route = self._routes[d.type]
        except KeyError:
            route = self._routes[d.type] = self._loop._routes.route(d.type)
        t0 = time.monotonic()
        if i > page.started:
            page.started = i  # first: a release (heartbeat side) never moves the frontier below it
        if (
            route is None
            or d.decode_error is not None
            or i > page.claimed
            or page.releasing
            or page.cancelled
            or page.lost
            or not page.first_start
            or t0 - page.last_beat >= self._loop.heartbeat_interval
            or _trace.tracer is not None
        ):
            if d.decode_error is not None:
                unit: Unit[AsyncDelivery] = Unit(None, error=d.decode_error, one=d)
            else:
                unit = Unit(route, one=d)
            await _Calls(self._loop, [unit], None)(0)
            return
        d._wall, d._t0, d.running = time.time(), t0, True
        try:
            await route.fn(d)
        finally:
            d.running = False
            d._ended = time.time()


class _Calls:
    """The handler calls of a page for the runner: ``calls(i)`` makes call ``i`` when the runner
    reaches it (no closure per call: a page's worth of them would be work for the allocator and
    the cyclic garbage collector)."""

    __slots__ = ("_conn", "_loop", "_units")

    def __init__(self, loop: ReceiveLoop, units: list[Unit[AsyncDelivery]], conn: AnyConn | None) -> None:
        self._loop = loop
        self._units = units
        self._conn = conn

    def __len__(self) -> int:
        return len(self._units)

    def __call__(self, i: int) -> _concurrency_async.Result:
        unit = self._units[i]
        if _trace.tracer is None:
            return self._loop._run_unit(unit, self._conn)
        return self._traced(unit)

    async def _traced(self, unit: Unit[AsyncDelivery]) -> None:
        # the handler call in its span (pglogq.contrib.otel)
        with _trace.processing(self._loop, unit.items, unit.route is not None and unit.route.kind == "batch"):
            await self._loop._run_unit(unit, self._conn)


def _skip(items: list[AsyncDelivery]) -> None:
    """The unit's events were given back (cede): never started here."""
    for d in items:
        d.skipped = True


def _rejected(outcome: Outcome) -> bool:
    """Whether a failed call raised ``Nack(dead=True)``: its events go to the dead-letter queue."""
    return isinstance(outcome[1], Nack) and outcome[1].dead


def _retry_delay(d: AsyncDelivery, after: Any, policy: RetryPolicy | None) -> Any:
    """The retry_after of a nack: a Nack's own, else the policy's for the delivery's retry count
    (None: the server's rule)."""
    if after is None and policy is not None:
        return policy.delay(d.retry_count)
    return after


_type_of: Callable[[AsyncDelivery], str | None] = operator.attrgetter("type")
"""A delivery's event type (one C call per event, not a function)."""

_error_of: Callable[[AsyncDelivery], str | None] = operator.attrgetter("decode_error")
"""Why a delivery's event could not be decoded (None: it was)."""
