# generated from pglogq/consumer_async.py by python -m tests.tools.unasync; do not edit
# (change the async source and regenerate)
"""The asyncio consumer runtime: the single source of truth of the consumer.

``pglogq/consumer.py`` (the thread :class:`Consumer`) is generated from this file by
``python -m tests.tools.unasync``; the few real differences (sleeping, events, running handlers
with a timeout, the heartbeat beside the loop) live in the two ``pglogq/_concurrency*.py``
modules (one for asyncio, one for threads).

A consumer reads one page of its subscription's batch at a time (``receive``), routes every
message to the handler registered for its type, runs the handlers (at most ``concurrency`` at
once, each within ``message_timeout``), then in one transaction nacks the failures (with the
retry policy) and acknowledges the page.  While handlers run, a heartbeat keeps the batch;
when the heartbeat finds the batch taken over by another worker, the page is dropped without
acknowledging.  When there is nothing to do it waits for the ticker's NOTIFY, polling every
``poll_interval`` in case notifications never come.

Handler starts are recorded in the database before each handler starts (``mark_started``), so
that ``cancel`` works on events of a page already received and a crash counts a failed attempt
only for the events whose handler started.  To keep quick handlers cheap, the runtime marks
ahead as many events as it expects to start within ``start_ahead / 2`` seconds (measured from
the pace of its pages: a no-op drain marks whole pages in ``receive`` itself, with no extra
round trip); when a marked event has not started ``start_ahead`` seconds after it was marked
(a slow handler before it; counted from the page's first handler start when that came later),
the heartbeat side moves the frontier back to what has started.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import operator
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from pglogq import _collector, _concurrency, _trace
from pglogq._runtime import (
    ABANDONED,
    ABANDONED_OUTCOME,
    NOT_RUN_OUTCOME,
    OK,
    OK_OUTCOME,
    TIMEOUT,
    WORKER_NAME_RE,
    Nack,
    NotifyHealth,
    Outcome,
    Route,
    Routes,
    RunStats,
    Unit,
    auto_worker_name,
    failure_reason,
    group_units,
    host_label,
    loop_names,
    total,
)
from pglogq._wakeup import Wakeup, send_probe
from pglogq.client import Batch, Client
from pglogq.errors import (
    BatchLost,
    ConsumerGated,
    PglogqError,
    ShardUnavailable,
    StaleBatch,
    UndecodableEvent,
    UnknownConsumer,
    UnknownQueue,
)
from pglogq.models import Message
from pglogq.retry import RetryPolicy
from pglogq.sharded_client import ShardedClient

log = logging.getLogger("pglogq.consumer")

AnyConn = psycopg.Connection[Any]
F = TypeVar("F", bound=Callable[..., Any])

PAGE_MIN = 100
"""The adaptive page (``max_messages=None``, the default): the first page, and the smallest."""

PAGE_MAX = 10_000
"""The adaptive page's largest size: beyond it a no-op drain gains nothing measurable (one receive
and one ack per 10,000 events) while the page's memory grows (about 15 MB at 10,000 small events)."""

PAGE_SECONDS = 0.1
"""The adaptive page holds about this many seconds of handler starts at the measured pace."""

_RECOVERABLE = (psycopg.OperationalError, psycopg.InterfaceError, OSError, PoolTimeout)
"""Errors the run loop survives (it waits and tries again): the database is away for a while."""

SHARD_BACKOFF_MAX = 5.0
"""The longest wait (seconds; at least ``poll_interval``) of a shard's loop between two tries
while its shard is down: the wait doubles from ``poll_interval`` at each failure in a row."""

MAP_REFRESH = 30.0
"""Seconds between two reads of the shard map by a sharded consumer that runs (not a drain):
a shard added to the cluster meanwhile gets its loops then."""


class _ShardRun:
    """What the loops of a sharded consumer's run share: how many loops of each shard still run
    (a gated loop of a drain waits while the loops of the move's old shard run)."""

    def __init__(self) -> None:
        self.active: dict[str, int] = {}
        self.served: set[str] = set()


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
        self.abandon = _concurrency.Event()
        self.lost = False
        self.finishing = False
        self.last_beat = time.monotonic()  # receive itself was a heartbeat
        self.deliveries: list[Delivery] = []
        self.lock = _concurrency.Lock()
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

    def mark_lost(self, how: str) -> None:
        if self.lost or self.finishing:
            return
        self.lost = True
        self.abandon.set()
        log.warning(
            "batch %d of %s/%s is no longer this worker's (%s): another worker took it over after this "
            "one was silent for the queue's dead_interval; dropping it unacknowledged",
            self.batch_id, self.queue, self.consumer, how,
        )


class Delivery(Message):
    """One message handed to a handler, with what the handler may report about it.

    Read the message through the attributes (``payload``, ``type``, ``msg_id``, ...: a delivery
    is the received :class:`Message` itself, and ``message`` is the delivery);
    ``msg.progress(42, stage="rendering", counters={"rows": 1200})`` records progress
    (visible in ``pglogq.in_flight``) and is a heartbeat; ``conn`` is the transaction the ack
    will commit in when the consumer is ``transactional`` (else None).  Compared and hashed by
    identity, as one handler call's object (not by its fields, as a Message is).
    """

    # one per event of every page, made by receive (one object per event, not a Message and a
    # delivery: half the objects the cyclic garbage collector goes through), completed by
    # Consumer._deliveries.  What every handler call sets is a slot; what most deliveries
    # never change stays a class default (in the instance's dict only once changed)
    __slots__ = ("__dict__", "__weakref__", "_consumer", "_page", "_t0", "_wall", "conn", "index", "running")
    skipped = False
    _reported = False
    _last_write = 0.0
    _last_stage: str | None = None
    _pending: tuple[float | None, str | None, dict[str, Any] | None] | None = None
    _verdict: str | None = None  # 'ack', 'retry' or 'dead' once the page is finished
    _failure: str | None = None  # why it was nacked
    _span: Any = None  # the tracing span of its handler call (pglogq.contrib.otel)

    # pglogq.Message's own are by field
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    conn: AnyConn | None
    index: int
    running: bool
    _consumer: Consumer
    _page: _Page
    _t0: float
    _wall: float

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
        return self._consumer.label

    @property
    def shard(self) -> str | None:
        """The shard of a cluster the message came from (a consumer of a sharded client), else None."""
        return self._consumer.shard

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

    def progress(
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
            or now - self._last_write >= self._consumer.progress_interval
            or (stage is not None and stage != self._last_stage)
            or (percent is not None and percent >= 100)
        ):
            self._flush()
        if self._page.lost:
            raise BatchLost(f"batch {self.batch_id} was taken over by another worker")
        return not self.cancel_requested

    def heartbeat(self) -> None:
        """Heartbeat the batch now (the runtime does it every ``heartbeat_interval`` anyway).

        Raises :class:`BatchLost` when the batch was taken over by another worker."""
        self._consumer._beat(self._page, force=True)
        if self._page.lost:
            raise BatchLost(f"batch {self.batch_id} was taken over by another worker")

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        percent, stage, counters = pending or (None, None, None)
        self._last_write = time.monotonic()
        self._reported = True
        if stage is not None:
            self._last_stage = stage
        ok = self._consumer.client.report_progress(
            self.batch_id, self.msg_id, percent=percent, stage=stage, counters=counters,
            worker=self._consumer.label, started_at=self.started_at,
        )
        if not ok:
            self._page.mark_lost("progress report refused")


MessageHandler = Callable[[Delivery], _concurrency.Result]
BatchHandler = Callable[[list[Delivery]], _concurrency.Result]


class Consumer:
    """Runs handlers for the events of one subscription (``queue``, ``consumer_name``).

    ``client_or_dsn``: an :class:`Client`, a DSN, or None (the DSN rule: ``PGLOGQ_DSN``, else
    the embedded server; resolved when first needed).

    ``worker``: None runs as the consumer itself (one process at a time); ``"auto"`` or a name runs
    as one of several cooperating workers of the subscription, each taking different batches, a
    silent worker's batch being taken over after the queue's ``dead_interval``.

    ``max_messages`` page size of receive; None (the default) adapts it to the handlers' pace: the
    first page holds ``PAGE_MIN`` (100) events, then each page holds about ``PAGE_SECONDS`` (0.1 s)
    of handler starts at the pace measured so far, from 100 up to ``PAGE_MAX`` (10,000), growing
    at most fourfold from one page to the next and falling back at once when handlers slow down.
    Quick handlers thus drain in large pages (one receive and one ack per page, the cost that
    bounds a drain) and slow ones keep pages of 100, so that ``stop()``, which finishes the page
    first, and a takeover wait no longer than with a fixed page of 100; a number fixes the page;
    ``concurrency`` handler calls at once;
    ``retry_policy`` the ``retry_after`` of nacks (a handler's own ``retry_policy`` wins; None: the
    server's rule, the type's ``set_type_config`` else the queue's ``retry_delay``);
    ``message_timeout`` seconds a handler call may take (then it is nacked);
    ``poll_interval`` longest wait for a tick notification; ``heartbeat_interval`` keep it well
    under the queue's ``dead_interval`` (a third at most); ``transactional`` run the handlers of a
    page in the transaction that acknowledges it (``msg.conn``), each in a savepoint;
    ``start_ahead`` seconds an event may count as started before its handler starts (quick
    handlers are marked started in groups; 0: one round trip before every handler call) - for
    that long (counted from the page's first handler start: the preparation of a large page
    does not count) ``cancel`` may refuse an event that has not started yet.

    On a partitioned queue (``create_queue(..., partitions=N)``, learnt once when ``run`` starts)
    a page holds events of one partition, and its handler calls run one at a time in page order
    whatever ``concurrency`` (the events of one key are never handled at once, nor out of send
    order); the first failure is nacked (with the retry policy) and ends the page: the events
    after it are not handled, the page is acknowledged up to the failed event, and the engine
    delivers that event again after the retry delay, followed by the rest.  A failure that goes
    to the dead-letter queue does not end the page.  A batch handler then gets runs of
    consecutive messages.

    ``workers``: this many receive loops in this process (threads for Consumer, tasks for
    Consumer), each a cooperating worker named ``f"{base}-{i}"`` (``base``: ``worker``, else
    the host label ``host:pid``), each handling at most one page at a time: the partitions of a
    partitioned queue are read in parallel, the batches of an unpartitioned one shared.  Each
    loop has its own heartbeat and listener connection; ``stop()`` stops them all, ``run``
    returns their summed :class:`RunStats` (``max_batches`` counts per loop).  ``workers > 1``
    refuses ``transactional=True`` (one page transaction at a time).

    ``client_or_dsn`` may also be a sharded client (:class:`ShardedClient`, of a cluster): the
    consumer then runs ``workers`` receive loops on every shard of the map (read when ``run``
    starts, and every ``MAP_REFRESH`` seconds while it runs: a shard added meanwhile gets its
    loops), each with its own LISTEN connection to its shard and polling fallback, the handlers
    shared; ``run`` returns the sum over all loops (``max_batches`` counts per loop).  A shard that
    is down stops only its own loops: they try again after ``poll_interval``, doubling up to
    ``SHARD_BACKOFF_MAX`` seconds, while the other shards flow (and while no seed answers when
    ``run`` starts, it waits so for the map).  A shard where the consumer is gated
    by an unfinished move of slots waits until the consumer has finished the move's old shard up
    to the move's fence (its loops there go on meanwhile), then passes the gate and reads; a
    drain (``stop_when_idle``) waits so while the old shard's loops run.  ``listen_dsn`` is refused
    with a sharded client (each loop LISTENs on its own shard; a ``pooled`` one polls).

    Behind a connection pooler in transaction mode (PgBouncer): give a client made with
    ``pooled=True`` (or ``pooled=True`` here with a DSN) and ``listen_dsn``, a direct DSN to
    PostgreSQL for the one connection that LISTENs for ticks (everything else goes through the
    pooler).  Without ``listen_dsn`` a pooled consumer polls every ``poll_interval``.  An
    unpooled consumer LISTENs on its own DSN; either way the listener proves at start that
    notifications arrive (a probe NOTIFY, ``listen_probe_timeout`` seconds) and warns at once,
    then polls, when they cannot (a probe that fails on a broken connection proves nothing: the
    listener tries again).

    Python's cyclic garbage collector is held off while a page is received and handled, until
    it is acknowledged, for 0.25 s (turned on again within another 0.25 s after that, even in the
    middle of a handler call):
    the page's messages all live until then, and the collector only scanned them (a drain's
    client CPU fell by a sixth).  Handlers of a page see ``gc.isenabled()`` false; reference
    counting frees everything as before, only reference cycles wait for the end of the page.
    The collector is turned on again only if it was on: a program that turns it off keeps it
    off (``pglogq._collector``).
    """

    def __init__(
        self,
        client_or_dsn: Client | ShardedClient | str | None,
        queue: str,
        consumer_name: str,
        *,
        worker: str | None = None,
        max_messages: int | None = None,
        concurrency: int = 1,
        retry_policy: RetryPolicy | None = None,
        message_timeout: float | None = None,
        poll_interval: float = 1.0,
        heartbeat_interval: float = 1.0,
        progress_interval: float = 0.5,
        transactional: bool = False,
        notify_miss_limit: int = 3,
        start_ahead: float = 0.1,
        listen_dsn: str | None = None,
        pooled: bool = False,
        listen_probe_timeout: float = 2.0,
        workers: int = 1,
    ) -> None:
        for what, number in (("max_messages", PAGE_MIN if max_messages is None else max_messages),
                             ("concurrency", concurrency), ("notify_miss_limit", notify_miss_limit),
                             ("workers", workers)):
            if isinstance(number, bool) or not isinstance(number, int):
                raise TypeError(f"{what} must be an int or None, got {number!r}" if what == "max_messages"
                                else f"{what} must be an int, got {number!r}")
        if max_messages is not None and not 1 <= max_messages <= 100000:
            raise ValueError(f"max_messages must be within 1..100000, got {max_messages}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not 1 <= workers <= 1024:
            raise ValueError(f"workers must be within 1..1024, got {workers}")
        if transactional and workers != 1:
            raise ValueError("transactional consumers run one page transaction at a time (workers=1)")
        if message_timeout is not None and message_timeout <= 0:
            raise ValueError(f"message_timeout must be positive, got {message_timeout}")
        if listen_dsn is not None and (not isinstance(listen_dsn, str) or not listen_dsn.strip()):
            raise ValueError(f"listen_dsn must be a non-empty DSN or None, got {listen_dsn!r}")
        if not isinstance(pooled, bool):
            raise TypeError(f"pooled must be True or False, got {pooled!r}")
        if isinstance(client_or_dsn, (Client, ShardedClient)) and pooled and not client_or_dsn.pooled:
            raise ValueError("pooled=True with a client made without it: make the client with pooled=True")
        if isinstance(client_or_dsn, ShardedClient) and listen_dsn is not None:
            raise ValueError("listen_dsn with a sharded client: each shard's loop LISTENs on its own shard")
        for name, value in (("poll_interval", poll_interval), ("heartbeat_interval", heartbeat_interval),
                            ("progress_interval", progress_interval),
                            ("listen_probe_timeout", listen_probe_timeout)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if isinstance(start_ahead, bool) or not isinstance(start_ahead, (int, float)) or not 0 <= start_ahead <= 60:
            raise ValueError(f"start_ahead must be within 0..60 seconds, got {start_ahead!r}")
        if transactional and concurrency != 1:
            raise ValueError("transactional consumers run one handler at a time (concurrency=1)")
        if transactional and message_timeout is not None and not _concurrency.CAN_CANCEL:
            raise ValueError(
                "a thread consumer cannot interrupt a handler that holds the page's transaction: "
                "use Consumer, or bound the handler's SQL with statement_timeout"
            )
        if (
            transactional
            and isinstance(client_or_dsn, Client)
            and client_or_dsn.max_size < 2
        ):
            raise ValueError(
                f"a transactional consumer holds one connection of its client's pool for the page's "
                f"transaction and needs another for heartbeats, progress and acks: give it a client "
                f"with max_size >= 2 (this one has {client_or_dsn.max_size}), or a DSN"
            )
        if worker == "auto":
            worker = auto_worker_name()
        if worker is not None and not WORKER_NAME_RE.match(worker):
            raise ValueError(f"invalid worker name {worker!r}: 1 to 63 letters, digits or _.:@-")
        self.workers = workers
        self._loop_names = loop_names(worker, workers) if workers > 1 else []
        self._loops: list[Consumer] = []  # the receive loops while run() runs them (workers > 1)
        self._partitioned: bool | None = None  # learnt when the first receive loop starts
        self.queue = queue
        self.consumer_name = consumer_name
        self.worker_name = worker
        self.max_messages = max_messages
        self.page_size = PAGE_MIN if max_messages is None else max_messages
        """The page size of the next receive (``max_messages``, or where the adaptive default is)."""
        self.concurrency = concurrency
        self.retry_policy = retry_policy
        self.message_timeout = message_timeout
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.progress_interval = progress_interval
        self.transactional = transactional
        self.start_ahead = float(start_ahead)
        self._pace: float | None = None  # seconds per handler start, measured over pages
        self.listen_dsn = listen_dsn
        self.pooled = pooled or (isinstance(client_or_dsn, (Client, ShardedClient))
                                 and client_or_dsn.pooled)
        self.listen_probe_timeout = listen_probe_timeout
        self.label = worker if worker is not None else host_label()
        self.stats = RunStats()
        self.health = NotifyHealth(notify_miss_limit)
        self._routes = Routes()
        self._client: Client | None = client_or_dsn if isinstance(client_or_dsn, Client) else None
        self._dsn = client_or_dsn if isinstance(client_or_dsn, str) else None
        self._sharded = client_or_dsn if isinstance(client_or_dsn, ShardedClient) else None
        self._own_client = self._client is None and self._sharded is None
        self.shard: str | None = None
        """The shard a receive loop of a sharded consumer reads (None: not such a loop)."""
        self._shard_run: _ShardRun | None = None
        self._failures_in_row = 0
        self._page: _Page | None = None
        self._running = False
        self._stopping = False
        self._stop_event = _concurrency.Event()
        self._hb_stop = _concurrency.Event()
        self.wakeup: Wakeup | None = None
        self._runner = _concurrency.Runner(concurrency, message_timeout)
        self._strict_runner = _concurrency.Runner(1, message_timeout)

    def __repr__(self) -> str:
        who = f" worker={self.worker_name!r}" if self.worker_name else ""
        where = f" shard={self.shard!r}" if self.shard is not None else ""
        return f"<{type(self).__name__} {self.queue}/{self.consumer_name}{who}{where}>"

    # -- configuration --------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            if self._sharded is not None:
                raise RuntimeError(f"{self!r} reads a cluster: its loops have a client per shard "
                                   "(sharded_client.shard_client(name))")
            self._client = Client(
                self._dsn, min_size=1, max_size=max(4, self.workers * (self.concurrency + 2) + 1),
                pooled=self.pooled,
            )
        return self._client

    @property
    def sharded_client(self) -> ShardedClient | None:
        """The sharded client the consumer was given (None: a single server's consumer)."""
        return self._sharded

    @property
    def accepts_dsn(self) -> bool:
        """True while :meth:`use_dsn` may be called: the consumer makes its own client (none was
        given) and has not connected yet."""
        return self._own_client and self._client is None

    def use_dsn(self, dsn: str) -> None:
        """Connect to ``dsn`` (the CLI's ``--dsn``); only while :attr:`accepts_dsn`."""
        if not self.accepts_dsn:
            raise RuntimeError("use_dsn() must come before the consumer connects, and not with a given client")
        self._dsn = dsn

    def handler(self, *types: str | None, retry_policy: RetryPolicy | None = None) -> Callable[[F], F]:
        """Register a per-message handler for event ``types`` (none: the default handler)::

            @consumer.handler("order.created")
            def on_order(msg): ...

        ``retry_policy``: the wait before each redelivery of a message this handler failed (it
        wins over the consumer's ``retry_policy``; None: the consumer's, else the server's rule for
        the type, ``set_type_config``, else the queue's ``retry_delay``).  How many times a message
        is retried is the server's ``max_retries`` (of the type, else of the queue).
        """
        return self._register(types, "message", retry_policy)

    def batch_handler(self, *types: str | None, retry_policy: RetryPolicy | None = None) -> Callable[[F], F]:
        """Register a handler that gets a page's messages of ``types`` as one list; raising fails
        them all (each is nacked, with ``retry_policy`` as for :meth:`handler`)."""
        return self._register(types, "batch", retry_policy)

    def _register(self, types: tuple[str | None, ...], kind: str, retry_policy: RetryPolicy | None) -> Callable[[F], F]:
        if len(types) == 1 and callable(types[0]):
            raise TypeError("use @consumer.handler() with parentheses")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise TypeError(f"retry_policy must be a RetryPolicy or None, got {retry_policy!r}")

        def deco(fn: F) -> F:
            _concurrency.check_handler(fn)
            self._routes.add(list(types) or [None], kind, fn, retry_policy)
            return fn

        return deco

    # -- running --------------------------------------------------------------------------

    def stop(self, *, abandon: bool = False) -> None:
        """Ask a running ``run()`` to return.

        By default the page being handled is finished and acknowledged first; with ``abandon``
        handlers not yet started are skipped, running ones are cancelled (asyncio) or left
        behind (threads), and the page is not acknowledged: all of it comes back.  Call it from
        the loop's thread for Consumer (e.g. a signal handler), from any thread for Consumer."""
        self._stopping = True
        self._stop_event.set()
        if abandon:
            page = self._page
            if page is not None:
                page.abandon.set()
        for loop in list(self._loops):
            loop.stop(abandon=abandon)

    def close(self) -> None:
        """Close the client if the consumer made it."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def _conninfo(self) -> str:
        return self.client.conninfo()

    def _wakeup(self) -> Wakeup:
        if self.listen_dsn is not None:
            conninfo: str | None = self.listen_dsn
        elif self.pooled:
            conninfo = None
            log.info("%r: pooled DSN and no listen_dsn: polling for ticks every %g s", self, self.poll_interval)
        else:
            conninfo = self._conninfo()
        return Wakeup(conninfo, self.queue, self._stop_event, self._send_probe, self.listen_probe_timeout)

    def _send_probe(self, channel: str) -> None:
        send_probe(self.client, channel)

    def run(self, *, stop_when_idle: bool = False, max_batches: int | None = None) -> RunStats:
        """Handle events until ``stop()``; returns what this run did.

        ``stop_when_idle``: return as soon as a receive finds nothing (drain a backlog);
        ``max_batches``: return after that many pages."""
        if not self._routes:
            raise RuntimeError(f"{self!r} has no handler: register one with @consumer.handler()")
        if self._running:
            raise RuntimeError(f"{self!r} is running already")
        self._running = True
        self._stopping = False
        self._stop_event.clear()
        try:
            if self._sharded is not None:
                self.stats = self._run_shards(stop_when_idle, max_batches)
            elif self.workers > 1:
                self.stats = self._run_loops(stop_when_idle, max_batches)
            else:
                self._serve(stop_when_idle, max_batches)
        finally:
            self._running = False
        return self.stats

    def _run_loops(self, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        """Run ``workers`` receive loops at once, each a copy of this consumer with a worker name
        of its own and the same client and handlers; the first loop that fails stops the others."""
        client = self.client  # made now: the loops share it
        loops = [self._loop_consumer(name, client) for name in self._loop_names]
        self._loops = loops
        if self._stopping:  # stop() came before the loops existed
            for loop in loops:
                loop.stop()
        try:
            runs = _concurrency.gather(
                [functools.partial(self._loop_run, loop, stop_when_idle, max_batches) for loop in loops]
            )
        finally:
            self._loops = []
        return total(runs)

    def _run_shards(self, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        """Run ``workers`` receive loops on every shard of the sharded client's map (the first
        loop that fails stops the others); while not a drain, a watcher reads the map every
        ``MAP_REFRESH`` seconds and starts the loops of shards added meanwhile."""
        assert self._sharded is not None
        need = self.workers * (self.concurrency + 2)
        if self._sharded.max_size < need:
            log.warning("%r: the sharded client's pools hold %d connections per shard; %d loops of concurrency %d "
                        "on each shard may need %d (make the client with max_size=%d)", self,
                        self._sharded.max_size, self.workers, self.concurrency, need, need)
        early = RunStats()  # the map cannot be read while no seed answers: wait, as a loop would
        while True:
            try:
                shard_map = self._sharded.refresh_map()
                break
            except ShardUnavailable as exc:
                early.errors += 1
                wait = float(min(max(self.poll_interval, SHARD_BACKOFF_MAX), self.poll_interval * 2.0 ** early.errors))
                log.warning("%r: cannot read the shard map (%s); trying again in %g s", self, exc, wait)
                if _concurrency.wait_event(self._stop_event, wait):
                    return early
        run = _ShardRun()
        try:
            runs = self._serve_shards(run, list(shard_map.shard_names), stop_when_idle, max_batches)
        finally:
            self._loops = []
        return total([early, *runs])

    def _serve_shards(
        self, run: _ShardRun, shards: list[str], stop_when_idle: bool, max_batches: int | None
    ) -> list[RunStats]:
        """The loops of ``shards`` (and, unless a drain, the watcher of the map), until they end."""
        assert self._sharded is not None
        loops: list[Consumer] = []
        names: list[str | None] = [*self._loop_names] or [self.worker_name]
        for shard in shards:
            client = self._sharded.shard_client(shard)
            run.served.add(shard)
            run.active[shard] = run.active.get(shard, 0) + len(names)
            for name in names:
                loop = self._loop_consumer(name, client)
                loop.shard, loop._shard_run = shard, run
                loops.append(loop)
        self._loops.extend(loops)
        if self._stopping:  # stop() came before the loops existed
            for loop in loops:
                loop.stop()
        fns: list[Callable[[], Any]] = [
            functools.partial(self._loop_run, loop, stop_when_idle, max_batches) for loop in loops
        ]
        if not stop_when_idle and max_batches is None:
            fns.append(functools.partial(self._watch_map, run))
        runs = _concurrency.gather(fns)
        out: list[RunStats] = []
        for r in runs:
            out.extend(r if isinstance(r, list) else [r])
        return out

    def _watch_map(self, run: _ShardRun) -> list[RunStats]:
        """Read the shard map every ``MAP_REFRESH`` seconds until stopped (or every loop ended); a
        shard that is new gets its loops (and this watcher goes on beside them)."""
        assert self._sharded is not None
        read_at = time.monotonic() + MAP_REFRESH
        while any(run.active.values()) and not _concurrency.wait_event(self._stop_event, 0.5):
            if time.monotonic() < read_at:
                continue
            read_at = time.monotonic() + MAP_REFRESH
            try:
                shard_map = self._sharded.refresh_map()
            except (PglogqError, *_RECOVERABLE) as exc:
                log.warning("%r: cannot read the shard map (%s); trying again in %g s", self, exc, MAP_REFRESH)
                continue
            new = [s for s in shard_map.shard_names if s not in run.served]
            if new:
                log.info("%r: shard(s) %s joined the cluster: starting their loops", self, ", ".join(new))
                return self._serve_shards(run, new, False, None)
        return []

    def _loop_run(self, loop: Consumer, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        try:
            loop._serve(stop_when_idle, max_batches)
        except BaseException:
            self.stop()
            raise
        finally:
            run = loop._shard_run
            if run is not None and loop.shard is not None:
                run.active[loop.shard] -= 1
        return loop.stats

    def _loop_consumer(self, name: str | None, client: Client) -> Consumer:
        """A receive loop of this consumer: a shallow copy with its own worker name and run state."""
        loop = copy.copy(self)
        loop.workers = 1
        if name is not None:
            loop.worker_name = loop.label = name
        loop._client, loop._own_client = client, False
        loop._loops, loop._loop_names = [], []
        loop._page, loop.wakeup = None, None
        loop._stopping = False
        loop._stop_event, loop._hb_stop = _concurrency.Event(), _concurrency.Event()
        loop.stats = RunStats()
        loop.health = NotifyHealth(self.health.limit)
        loop._pace = None
        return loop

    def _serve(self, stop_when_idle: bool, max_batches: int | None) -> None:
        """The receive loop of ``run`` (one worker): pages until stopped, idle or ``max_batches``."""
        self._hb_stop.clear()
        self.stats = stats = RunStats()
        self._runner = _concurrency.Runner(self.concurrency, self.message_timeout)
        self._strict_runner = _concurrency.Runner(1, self.message_timeout)
        wake = self.wakeup = self._wakeup()
        beat = _concurrency.Background(self._heartbeat_loop, name=f"pglogq-heartbeat-{self.label}")
        polled = False
        last_look = False  # a drain's gated loop looked at the fence after the old shard's loops ended
        try:
            while not self._stopping:
                if max_batches is not None and stats.pages >= max_batches:
                    break
                gated: ConsumerGated | None = None
                try:
                    # the page's objects live until it is acknowledged: the collector would only
                    # scan them (pglogq._collector)
                    with _collector.held_off():
                        if self._partitioned is None:
                            self._partitioned = self._learn_partitioned()
                        try:
                            batch = self.client._receive(
                                self.queue, self.consumer_name, max_messages=self.page_size, worker=self.worker_name,
                                start_first=self._ahead(), conn=None, cls=Delivery,
                            )
                        except ConsumerGated as exc:
                            if self._sharded is None or self.shard is None:
                                raise
                            if self._sharded.pass_gate(self.queue, self.consumer_name, self.shard, exc):
                                log.info("%r: passed the gate of move %s (the old shard %s is done up to its fence)",
                                         self, exc.move_id, exc.from_shard)
                                continue
                            gated = exc
                            batch = Batch(None, self.queue, self.consumer_name, [], self.client)
                        self._failures_in_row = 0
                        if batch:
                            if polled and self.health.found_by_polling():
                                log.warning(
                                    "no tick notification arrived on channel %s for %d polls that found events: "
                                    "LISTEN does not work on this connection (a transaction-mode pooler?) or the "
                                    "listener was dropped; reconnecting it and polling every %g s meanwhile",
                                    wake.channel, self.health.misses, self.poll_interval,
                                )
                                wake.reconnect()
                            polled = False
                            self._handle(batch)
                            del batch  # its messages are freed before the collector is back
                            continue
                except (UnknownQueue, UnknownConsumer) as exc:
                    if self.shard is None:
                        raise
                    # a shard that joined the cluster lately: create_queue and subscribe make them
                    stats.errors += 1
                    wait = self._error_wait()
                    log.warning("%r: %s on shard %s (create_queue and subscribe through the sharded client "
                                "make them on every shard); trying again in %g s", self, exc, self.shard, wait)
                    _concurrency.wait_event(self._stop_event, wait)
                    continue
                except _RECOVERABLE as exc:
                    stats.errors += 1
                    wait = self._error_wait()
                    log.warning("%r: database error (%s); trying again in %g s", self, exc, wait)
                    _concurrency.wait_event(self._stop_event, wait)
                    continue
                if stop_when_idle:
                    if gated is None or (not self._old_shard_runs(gated) and last_look):
                        break
                    # gated: wait while the old shard's loops run, then look at the fence once more
                    last_look = not self._old_shard_runs(gated)
                if wake.wait(self.poll_interval):
                    self.health.notified()
                    polled = False
                else:
                    polled = True
        finally:
            self._runner.close()
            self._strict_runner.close()
            self._hb_stop.set()
            beat.join()
            wake.close()

    def _learn_partitioned(self) -> bool:
        """Whether the queue is partitioned (asked once per run)."""
        rows = self.client.queue_info(self.queue)
        if not rows and self.shard is not None:
            raise UnknownQueue(f'unknown queue "{self.queue}"')
        return rows[0].partitions > 1

    def _error_wait(self) -> float:
        """The wait after a database error: ``poll_interval``; on a shard's loop, doubling at each
        failure in a row up to ``SHARD_BACKOFF_MAX`` (the other shards flow meanwhile)."""
        if self.shard is None:
            return self.poll_interval
        self._failures_in_row += 1
        longest = max(self.poll_interval, SHARD_BACKOFF_MAX)
        return float(min(longest, self.poll_interval * 2.0 ** (self._failures_in_row - 1)))

    def _old_shard_runs(self, gated: ConsumerGated) -> bool:
        """True while loops of this run still read the old shard of the move that gates this loop
        (a drain's gated loop waits for them: they may pass the fence)."""
        run = self._shard_run
        return run is not None and gated.from_shard is not None and run.active.get(gated.from_shard, 0) > 0

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

    def _handle(self, batch: Batch) -> None:
        assert batch.id is not None
        page = _Page(batch.id, self.queue, self.consumer_name)
        page.strict = bool(self._partitioned)
        page.claimed = min(self._ahead(), len(batch)) - 1
        page.chunk = max(1, page.claimed + 1)
        self._page = page
        acked = False
        try:
            if self.transactional:
                acked = self._handle_in_transaction(batch, page)
            else:
                deliveries = self._deliveries(batch, page, None)
                units: list[Unit[Delivery]] | None = None
                if page.strict or self._routes.has_batch():
                    units = group_units(deliveries, _type_of, self._routes, _error_of, contiguous=page.strict)
                    outcomes = self._run_units(page, units, None)
                else:
                    # every handler takes one message: call i is delivery i (the units group_units
                    # would make are made only if the page needs them, see _finish)
                    outcomes = self._runner.run(_EachCalls(self, deliveries), page.abandon)
                page.handled_at = time.monotonic()
                if self._dropped(page, outcomes):
                    self._give_back(page)
                    return
                acked = self._finish(page, units, outcomes, None)
        finally:
            page.finishing = True
            self._page = None
            self._paced(page)
            _trace.settle(page.deliveries, acked)
            # the page and its deliveries point at each other: break the cycle, so that they are
            # freed now (by reference counting) rather than by the cyclic garbage collector
            page.deliveries = []

    def _handle_in_transaction(self, batch: Batch, page: _Page) -> bool:
        try:
            with self.client.connection() as conn, conn.transaction():
                deliveries = self._deliveries(batch, page, conn)
                units = group_units(deliveries, _type_of, self._routes, _error_of, contiguous=page.strict)
                outcomes = self._run_units(page, units, conn)
                page.handled_at = time.monotonic()
                if self._runner.left_behind or self._strict_runner.left_behind:
                    # abandoned while a handler still holds the page's connection (a thread cannot
                    # be stopped): cancel its statement and close the connection under its lock,
                    # so the handler cannot write anything more; nothing of the page commits
                    _concurrency.close_busy(conn)
                if self._dropped(page, outcomes):
                    self._give_back(page)
                    raise _Dropped()
                if not self._finish(page, units, outcomes, conn):
                    raise _Dropped()
        except _Dropped:
            return False
        return True

    def _run_units(self, page: _Page, units: list[Unit[Delivery]], conn: AnyConn | None) -> list[Outcome]:
        """Run the handler calls of a page: at most ``concurrency`` at once; on a partition's page
        (strict) one at a time in page order, the first failure nacked at once and, unless it
        went to the dead-letter queue, acknowledged with the page, the calls after it not made."""
        if not page.strict:
            return self._runner.run(_Calls(self, units, conn), page.abandon)
        outcomes = [NOT_RUN_OUTCOME] * len(units)
        for i, unit in enumerate(units):
            outcome = outcomes[i] = (self._strict_runner.run(_Calls(self, [unit], conn), page.abandon))[0]
            if outcome[0] == OK:
                continue
            if outcome[0] == ABANDONED or page.lost:
                break  # dropped unacknowledged (_dropped)
            if self._nack_now(page, unit, outcome, conn) != "dead":
                break
        return outcomes

    def _nack_now(
        self, page: _Page, unit: Unit[Delivery], outcome: Outcome, conn: AnyConn | None
    ) -> str | None:
        """Nack the first event of a failed call of a strict page now; unless it went to the
        dead-letter queue, acknowledge the page in the same transaction (the engine acknowledges
        it up to that event).  The verdict; None when the batch was found lost."""
        d = next(d for d in unit.items if not d.skipped)
        reason, after, policy = self._failure(unit, outcome)
        last = page.deliveries[-1].message
        try:
            with self.client.connection(conn) as c, c.transaction():
                d._verdict = self.client.nack(d.message, retry_after=_retry_delay(d, after, policy),
                                                    reason=reason, dead=d.message.decode_error is not None, conn=c)
                d._failure = reason
                if d._verdict != "dead":
                    page.finishing = True
                    self.client.ack(page.batch_id, last=last, conn=c)
                    page.acked = True
        except StaleBatch:
            page.finishing = False
            page.mark_lost("nack or ack refused")
            return None
        return d._verdict

    def _deliveries(self, batch: Batch, page: _Page, conn: AnyConn | None) -> list[Delivery]:
        """The page's deliveries: the messages of ``batch`` (made as deliveries by receive), completed."""
        deliveries: list[Delivery] = batch.messages  # type: ignore[assignment]
        for i, d in enumerate(deliveries):
            d._page, d._consumer, d.conn, d.index = page, self, conn, i
            d._wall = d._t0 = 0.0  # time.time() when its handler started (0: not started), monotonic then
            d.running = False
        page.deliveries = deliveries
        return deliveries

    def _starting(self, page: _Page, items: list[Delivery]) -> int:
        """Note that the unit's events (``items``) start now; the index to mark up to (-1:
        marked already).

        No I/O: the common case (marked already, in a group) costs no at all."""
        top = items[-1].index if len(items) == 1 else max(d.index for d in items)
        if top > page.started:
            page.started = top  # first: a release (heartbeat side) never moves the frontier below it
        if not page.first_start:
            page.first_start = time.monotonic()
        return top if top > page.claimed or page.releasing else -1

    def _claim(self, page: _Page, top: int) -> None:
        """Mark the events up to ``top`` started (and a group after it, at the measured pace)."""
        with page.lock:
            if top <= page.claimed:
                return
            t0 = time.monotonic()
            # the events marked last started within half the window: mark twice as many
            quick = self.start_ahead > 0 and t0 - page.claimed_at < self.start_ahead / 2
            page.chunk = max(self._ahead(), page.chunk * 2 if quick else 1)
            upto = min(len(page.deliveries) - 1, max(top, page.started + page.chunk))
            gone = self.client.mark_started(page.deliveries[upto].message)
            if gone is None:
                page.mark_lost("start refused")
                raise BatchLost(f"batch {page.batch_id} was taken over by another worker")
            page.cancelled.update(gone)
            page.claimed = upto
            page.claimed_at = time.monotonic()
            page.claim_seconds += page.claimed_at - t0

    def _live(self, page: _Page, items: list[Delivery]) -> list[Delivery]:
        """The items not cancelled after they were received (those are never started)."""
        live = [d for d in items if d.msg_id not in page.cancelled]
        for d in items:
            if d.msg_id in page.cancelled:
                d.skipped = True
                log.info("%r: message %d was cancelled after it was received: not started", self, d.msg_id)
        return live

    def _release(self, page: _Page) -> None:
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
        with page.lock:
            page.releasing = True  # before reading page.started (see _claim)
            try:
                back = min(page.started, page.claimed)
                if page.claimed <= back or page.finishing or page.lost:
                    return
                to = page.deliveries[back].message if back >= 0 else None
                got = self.client.mark_started(to, back=True, batch_id=page.batch_id)
                if got is None:
                    page.mark_lost("start refused")
                    return
                page.claimed = back
                page.released = True
                self._pace = self.start_ahead
            finally:
                page.releasing = False

    def _give_back(self, page: _Page) -> None:
        """An abandoned page (stop(abandon=True)) goes back as never started: the operator
        stopped it, so no failed attempt is counted (a crash or a takeover counts one)."""
        if page.lost or page.claimed < 0:
            return
        with contextlib.suppress(PglogqError, *_RECOVERABLE):
            self.client.mark_started(None, back=True, batch_id=page.batch_id)

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

    def _run_unit(self, unit: Unit[Delivery], conn: AnyConn | None) -> None:
        """One handler call of a page (``conn``: the page's transaction, if transactional)."""
        items = unit.items  # a unit of one makes its list on each read: read it once
        page = items[0]._page
        t0 = time.monotonic()
        if t0 - page.last_beat >= self.heartbeat_interval:
            # never start a message on a batch whose lease was not confirmed lately
            self._beat(page, force=True)
            t0 = time.monotonic()
        if page.lost:
            raise BatchLost(f"batch {page.batch_id} was taken over by another worker")
        top = self._starting(page, items)
        if top >= 0:
            self._claim(page, top)
            t0 = time.monotonic()
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
                with conn.transaction():
                    self._call(todo)
                    if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
                        # leaving the block with an error rolls back to the handler's savepoint
                        raise HandlerLeftTransactionFailed(
                            "the handler returned with its transaction in error (it caught an SQL "
                            "error without rolling back to a savepoint): its work was rolled back"
                        )
            elif route.kind == "batch":
                route.fn(items)
            else:
                route.fn(items[0])
        finally:
            for d in items:
                d.running = False

    def _call(self, unit: Unit[Delivery]) -> None:
        assert unit.route is not None
        if unit.route.kind == "batch":
            unit.route.fn(unit.items)
        else:
            unit.route.fn(unit.items[0])

    def _finish(
        self, page: _Page, units: list[Unit[Delivery]] | None, outcomes: list[Outcome], conn: AnyConn | None
    ) -> bool:
        """Nack the failures and ack the page in one transaction; False when the batch was lost.

        ``units`` None: the page ran through :class:`_EachCalls` (one call per delivery)."""
        failures: list[tuple[Delivery, str, Any, RetryPolicy | None]] = []
        ok = timed_out = 0
        cancelled = 0
        calls: Iterator[tuple[Unit[Delivery], Outcome]] = iter(())
        if not page.cancelled and outcomes.count(OK_OUTCOME) == len(outcomes) == (
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
                        cancelled += 1
                    else:
                        ok += 1
                        d._verdict = "ack"
                continue
            cancelled += sum(1 for d in unit.items if d.skipped)
            if outcome[0] == TIMEOUT:
                timed_out += len(unit.items)
            if page.strict:  # nacked already (_nack_now): only its first event
                failures.extend((d, d._failure or "", None, None) for d in unit.items if d._verdict is not None)
                continue
            reason, after, policy = self._failure(unit, outcome)
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
                self.client.ack(page.batch_id, last=last)
            else:
                self._nack_and_ack(page, failures, verdicts, last, conn)
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

    def _nack_and_ack(
        self,
        page: _Page,
        failures: list[tuple[Delivery, str, Any, RetryPolicy | None]],
        verdicts: list[str],
        last: Message | None,
        conn: AnyConn | None,
    ) -> None:
        """Nack the failures and ack the page in one transaction (``conn``'s when given)."""
        with self.client.connection(conn) as c, c.transaction():
            for d, reason, after, policy in failures:
                if d._verdict is None:  # else nacked already (a strict page's failure)
                    # a payload or headers Python cannot decode fail the same way on every try:
                    # straight to the dead-letter queue, not max_retries retries first
                    undecodable = d.message.decode_error is not None
                    d._verdict = self.client.nack(d.message, retry_after=_retry_delay(d, after, policy),
                                                        reason=reason, dead=undecodable, conn=c)
                    d._failure = reason
                verdicts.append(d._verdict)
            self.client.ack(page.batch_id, last=last, conn=c)

    def _failure(self, unit: Unit[Delivery], outcome: Outcome) -> tuple[str, Any, RetryPolicy | None]:
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

    def _heartbeat_loop(self) -> None:
        step = max(0.02, min(self.heartbeat_interval, self.progress_interval,
                             self.start_ahead if self.start_ahead > 0 else float("inf")) / 2)
        while not self._hb_stop.is_set():
            _concurrency.wait_event(self._hb_stop, step)
            page = self._page
            if page is None or page.finishing or page.lost:
                continue
            try:
                self._release(page)
                self._beat(page)
            except (PglogqError, *_RECOVERABLE) as exc:
                log.warning("%r: heartbeat of batch %d failed: %s", self, page.batch_id, exc)

    def _beat(self, page: _Page, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - page.last_beat >= self.heartbeat_interval:
            # the lease counts from when a heartbeat was sent, and only once it is confirmed
            if not self.client.heartbeat(page.batch_id):
                page.mark_lost("heartbeat refused")
                return
            page.last_beat = max(page.last_beat, now)
            running = [d.msg_id for d in page.deliveries if d.running and now - d._t0 >= self.heartbeat_interval]
            if running:
                page.stop_ids.update(self.client.stop_requests(page.batch_id, running))
        for d in list(page.deliveries):
            if not d.running or page.lost:
                continue
            if (d._pending is not None and now - d._last_write >= self.progress_interval) or (
                not d._reported and now - d._t0 >= self.heartbeat_interval
            ):
                d._flush()


class _EachCalls:
    """The handler calls of a page whose handlers all take one message (no batch handler, not a
    partition's page) for the runner: call ``i`` handles delivery ``i``, as the unit of one
    delivery :func:`group_units` would make for it.

    The usual call (its event marked started already, nothing cancelled on the page, the lease
    confirmed within ``heartbeat_interval``, a handler for its type, a decoded event, no tracer)
    starts the handler here, with no unit and no I/O; any other goes through
    :meth:`Consumer._run_unit` as before."""

    __slots__ = ("_consumer", "_deliveries", "_routes")

    def __init__(self, consumer: Consumer, deliveries: list[Delivery]) -> None:
        self._consumer = consumer
        self._deliveries = deliveries
        self._routes: dict[str | None, Route | None] = {}  # the route of each type met on the page

    def __len__(self) -> int:
        return len(self._deliveries)

    def __call__(self, i: int) -> None:
        d = self._deliveries[i]
        try:
            route = self._routes[d.type]
        except KeyError:
            route = self._routes[d.type] = self._consumer._routes.route(d.type)
        page = d._page
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
            or t0 - page.last_beat >= self._consumer.heartbeat_interval
            or _trace.tracer is not None
        ):
            if d.decode_error is not None:
                unit: Unit[Delivery] = Unit(None, error=d.decode_error, one=d)
            else:
                unit = Unit(route, one=d)
            _Calls(self._consumer, [unit], None)(0)
            return
        d._wall, d._t0, d.running = time.time(), t0, True
        try:
            route.fn(d)
        finally:
            d.running = False


class _Calls:
    """The handler calls of a page for the runner: ``calls(i)`` makes call ``i`` when the runner
    reaches it (no closure per call: a page's worth of them would be work for the allocator and
    the cyclic garbage collector)."""

    __slots__ = ("_conn", "_consumer", "_units")

    def __init__(self, consumer: Consumer, units: list[Unit[Delivery]], conn: AnyConn | None) -> None:
        self._consumer = consumer
        self._units = units
        self._conn = conn

    def __len__(self) -> int:
        return len(self._units)

    def __call__(self, i: int) -> _concurrency.Result:
        unit = self._units[i]
        if _trace.tracer is None:
            return self._consumer._run_unit(unit, self._conn)
        return self._traced(unit)

    def _traced(self, unit: Unit[Delivery]) -> None:
        # the handler call in its span (pglogq.contrib.otel)
        with _trace.processing(self._consumer, unit.items, unit.route is not None and unit.route.kind == "batch"):
            self._consumer._run_unit(unit, self._conn)


def _retry_delay(d: Delivery, after: Any, policy: RetryPolicy | None) -> Any:
    """The retry_after of a nack: a Nack's own, else the policy's for the delivery's retry count
    (None: the server's rule)."""
    if after is None and policy is not None:
        return policy.delay(d.retry_count)
    return after


_type_of: Callable[[Delivery], str | None] = operator.attrgetter("type")
"""A delivery's event type (one C call per event, not a function)."""

_error_of: Callable[[Delivery], str | None] = operator.attrgetter("decode_error")
"""Why a delivery's event could not be decoded (None: it was)."""
