# generated from pglogq/consumer_async.py by python -m tests.tools.unasync; do not edit
# (change the async source and regenerate)
"""The asyncio consumer runtime: the single source of truth of the consumer.

``pglogq/consumer.py`` (the thread :class:`Consumer`) is generated from this file by
``python -m tests.tools.unasync``; the few real differences (sleeping, events, running handlers
with a timeout, the heartbeat beside the loop) live in the two ``pglogq/_concurrency*.py``
modules (one for asyncio, one for threads).

The consumer is three parts: this module holds the settings, the handlers and ``run``; each
receive loop is a :class:`~pglogq._consumer_loop.ReceiveLoop` (``_consumer_loop.py``),
made when ``run`` starts; a loop waits for ticks with its
:class:`~pglogq._wakeup.Wakeup` (``_wakeup.py``).  On a cluster of shards the
sharded client runs the loops (``pglogq.cluster``): this module knows it only as the abstract
:class:`ClusterClient`.

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

import abc
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pglogq import _concurrency, _outcomes

# what users import from here: the delivery, the page sizes, the idle cede time and the error
# backoff the docstrings name, and the reason a transactional handler's message is nacked with
from pglogq._consumer_loop import ERROR_BACKOFF_MAX as ERROR_BACKOFF_MAX
from pglogq._consumer_loop import IDLE_CEDE_AFTER as IDLE_CEDE_AFTER
from pglogq._consumer_loop import PAGE_MAX as PAGE_MAX
from pglogq._consumer_loop import PAGE_MIN as PAGE_MIN
from pglogq._consumer_loop import PAGE_SECONDS as PAGE_SECONDS
from pglogq._consumer_loop import RECOVERABLE, AnyWakeup, ReceiveLoop, ShareSlot, SlotGroup
from pglogq._consumer_loop import Delivery as Delivery
from pglogq._consumer_loop import HandlerLeftTransactionFailed as HandlerLeftTransactionFailed
from pglogq._runtime import (
    WORKER_NAME_RE,
    NotifyHealth,
    Routes,
    RunStats,
    auto_worker_name,
    host_label,
    loop_names,
    total,
)
from pglogq._wakeup import AsyncSharedWakeup, Wakeup, send_probe
from pglogq.client import Client
from pglogq.errors import ShareModeMismatch
from pglogq.retry import RetryPolicy

log = logging.getLogger("pglogq.consumer")

F = TypeVar("F", bound=Callable[..., Any])

MessageHandler = Callable[[Delivery], _concurrency.Result]
BatchHandler = Callable[[list[Delivery]], _concurrency.Result]


class ClusterClient(abc.ABC):
    """A client of several servers that a consumer can read through: the sharded client of a
    cluster (:class:`~pglogq.ShardedClient`, in ``pglogq.cluster``), which runs the
    consumer's receive loops on its shards.  The consumer knows no more of it than this, so that
    the core of pglogq never imports the cluster layer built on it."""

    pooled: bool
    """Whether its connections go through a pooler in transaction mode."""

    @abc.abstractmethod
    def _run_consumer(
        self, consumer: Consumer, stop_when_idle: bool, max_batches: int | None
    ) -> RunStats:
        """Run ``consumer``'s receive loops on the servers until they end (``consumer.run``);
        the sum of what they did."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connections."""


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
    ``poll_interval`` longest wait for a tick notification (and the first wait after a database
    error: a loop whose database keeps failing logs each failure with its reason and waits twice
    as long after each one in a row, up to ``ERROR_BACKOFF_MAX``, 10 s); ``heartbeat_interval``
    keep it well under the queue's ``dead_interval`` (a third at most); ``transactional`` run the
    handlers of a page in the transaction that acknowledges it (``msg.conn``), each in a savepoint;
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
    refuses ``transactional=True`` (one page transaction at a time), unless ``share=True``.

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

    A **share consumer** (subscribed with ``subscribe(..., share=True)``) is run as handler
    slots: ``workers * concurrency`` of them, each a receive loop (a thread for Consumer, a task
    for Consumer) with a worker name of its own (``f"{base}-{i}"``, ``base`` as for
    ``workers``) that takes a lease of the next events no other worker holds and runs it one
    event at a time, in lease order; so any idle slot takes the next job at once, and a slot busy
    with a long job holds nothing else back.  ``share``: None (the default) learns the mode from
    the subscription when ``run`` starts; True or False say which mode the subscription must have
    (:class:`~pglogq.errors.ShareModeMismatch` when ``run`` finds the other one; a consumer never
    subscribes itself).  A slot's lease is sized like a page (``max_messages``; None: adaptive, but
    from one event, falling back to one after a slow event); when an event has run for
    ``cede_after`` seconds (default 0.2) the lease's events not started yet are given back
    (``cede``) for any idle slot or worker to take at once (after ``IDLE_CEDE_AFTER``, 20 ms, when
    another slot of this consumer is idle), and ``stop()`` lets each slot finish
    the event it runs and gives back the rest of its lease (``stop(abandon=True)`` gives back
    all of it).  A drain (``stop_when_idle``) returns once every slot has found nothing: a slot
    that finds nothing while another runs waits, and takes what that one cedes.  The slots share
    one LISTEN connection (and one client whose pool grows to at most ``2 * slots + 2``
    connections); each slot's heartbeat keeps its lease.  With ``transactional`` (and
    ``share=True``: an ordinary transactional consumer runs one page transaction at a time) each
    slot runs its lease in a transaction of its own on ``msg.conn``, and the lease's outcomes (the
    ack, and the nacks of failed events: a release with the retry delay) commit in it with the
    handlers' writes, or not at all: a crash at any point leaves each event either done with its
    effects or available again without them.  With a sharded client the slots run on every
    shard: ``workers * concurrency`` of them per shard, each shard's slots sharing one LISTEN
    connection to that shard (a lease holds events of one shard; a slot idle on one shard does
    not make the slots of another give their tails back), and a drain returns once every slot
    of every shard has found nothing.
    """

    def __init__(
        self,
        client_or_dsn: Client | ClusterClient | str | None,
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
        share: bool | None = None,
        cede_after: float = 0.2,
        store_result: bool = False,
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
        if transactional and workers != 1 and share is not True:
            raise ValueError("transactional consumers run one page transaction at a time (workers=1); "
                             "a share consumer (share=True) runs a transaction per handler slot")
        if message_timeout is not None and message_timeout <= 0:
            raise ValueError(f"message_timeout must be positive, got {message_timeout}")
        if listen_dsn is not None and (not isinstance(listen_dsn, str) or not listen_dsn.strip()):
            raise ValueError(f"listen_dsn must be a non-empty DSN or None, got {listen_dsn!r}")
        if not isinstance(pooled, bool):
            raise TypeError(f"pooled must be True or False, got {pooled!r}")
        if isinstance(client_or_dsn, (Client, ClusterClient)) and pooled and not client_or_dsn.pooled:
            raise ValueError("pooled=True with a client made without it: make the client with pooled=True")
        if isinstance(client_or_dsn, ClusterClient) and listen_dsn is not None:
            raise ValueError("listen_dsn with a sharded client: each shard's loop LISTENs on its own shard")
        for name, value in (("poll_interval", poll_interval), ("heartbeat_interval", heartbeat_interval),
                            ("progress_interval", progress_interval),
                            ("listen_probe_timeout", listen_probe_timeout)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if isinstance(start_ahead, bool) or not isinstance(start_ahead, (int, float)) or not 0 <= start_ahead <= 60:
            raise ValueError(f"start_ahead must be within 0..60 seconds, got {start_ahead!r}")
        if transactional and concurrency != 1 and share is not True:
            raise ValueError("transactional consumers run one handler at a time (concurrency=1); "
                             "a share consumer (share=True) runs a transaction per handler slot")
        if share is not None and not isinstance(share, bool):
            raise TypeError(f"share must be True, False or None, got {share!r}")
        if (isinstance(cede_after, bool) or not isinstance(cede_after, (int, float))
                or not 0 < cede_after <= 3600):
            raise ValueError(f"cede_after must be within 0..3600 seconds (above 0), got {cede_after!r}")
        if transactional and message_timeout is not None and not _concurrency.CAN_CANCEL:
            raise ValueError(
                "a thread consumer cannot interrupt a handler that holds the page's transaction: "
                "use Consumer, or bound the handler's SQL with statement_timeout"
            )
        # a transaction per page at once (per handler slot of a share consumer), and one more
        # connection for the heartbeats, start marks and cedes beside them
        held = workers * concurrency if share else 1
        if (
            transactional
            and isinstance(client_or_dsn, Client)
            and client_or_dsn.max_size < held + 1
        ):
            raise ValueError(
                f"a transactional consumer holds one connection of its client's pool for each page's "
                f"transaction ({held} at once) and needs another for heartbeats, progress and acks: give it "
                f"a client with max_size >= {held + 1} (this one has {client_or_dsn.max_size}), or a DSN"
            )
        if worker == "auto":
            worker = auto_worker_name()
        if worker is not None and not WORKER_NAME_RE.match(worker):
            raise ValueError(f"invalid worker name {worker!r}: 1 to 63 letters, digits or _.:@-")
        self.workers = workers
        self.share = share
        """The mode the subscription must have (None: learnt from it when ``run`` starts)."""
        self.cede_after = float(cede_after)
        self.shared: bool | None = None
        """Whether the last ``run`` ran as a share consumer (None: not run yet)."""
        self._loop_names = loop_names(worker, workers) if workers > 1 else []
        self._loops: list[ReceiveLoop] = []  # the receive loops while run() runs them
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
        self.store_result = bool(store_result)
        """Keep every message handler's JSON return value as its job's result (a handler's own
        ``store_result`` wins); see docs/how-to/job-history.md."""
        self.start_ahead = float(start_ahead)
        self._pace: float | None = None  # seconds per handler start, measured over pages
        self.listen_dsn = listen_dsn
        self.pooled = pooled or (isinstance(client_or_dsn, (Client, ClusterClient))
                                 and client_or_dsn.pooled)
        self.listen_probe_timeout = listen_probe_timeout
        self.label = worker if worker is not None else host_label()
        self.stats = RunStats()
        self.health = NotifyHealth(notify_miss_limit)
        self._routes = Routes()
        self._client: Client | None = client_or_dsn if isinstance(client_or_dsn, Client) else None
        self._dsn = client_or_dsn if isinstance(client_or_dsn, str) else None
        self._sharded = client_or_dsn if isinstance(client_or_dsn, ClusterClient) else None
        self._own_client = self._client is None and self._sharded is None
        self._running = False
        self._stopping = False
        self._stop_event = _concurrency.Event()
        self.wakeup: AnyWakeup | None = None
        """The wake-up of the last receive loop this consumer ran as itself (``workers`` 1), or
        the listener its share slots shared."""

    def __repr__(self) -> str:
        who = f" worker={self.worker_name!r}" if self.worker_name else ""
        return f"<{type(self).__name__} {self.queue}/{self.consumer_name}{who}>"

    # -- configuration --------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            if self._sharded is not None:
                raise RuntimeError(f"{self!r} reads a cluster: its loops have a client per shard "
                                   "(sharded_client.shard_client(name))")
            size = max(4, self.workers * (self.concurrency + 2) + 1)
            if self.share is not False:
                # share slots: each may receive or ack while its heartbeat runs
                size = max(size, 2 * self.workers * self.concurrency + 2)
            self._client = Client(self._dsn, min_size=1, max_size=size, pooled=self.pooled)
        return self._client

    @property
    def sharded_client(self) -> ClusterClient | None:
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

    def handler(
        self, *types: str | None, retry_policy: RetryPolicy | None = None, store_result: bool | None = None
    ) -> Callable[[F], F]:
        """Register a per-message handler for event ``types`` (none: the default handler)::

            @consumer.handler("order.created")
            def on_order(msg): ...

        ``retry_policy``: the wait before each redelivery of a message this handler failed (it
        wins over the consumer's ``retry_policy``; None: the consumer's, else the server's rule for
        the type, ``set_type_config``, else the queue's ``retry_delay``).  How many times a message
        is retried is the server's ``max_retries`` (of the type, else of the queue).

        ``store_result``: keep the handler's return value (JSON) with the job's outcome, for
        ``client.result`` and ``lookup`` (None: the consumer's ``store_result``); one larger than
        the queue's ``max_result_bytes`` fails the job with :class:`pglogq.ResultTooLarge`.
        """
        store = self.store_result if store_result is None else bool(store_result)
        return self._register(types, "message", retry_policy, store)

    def batch_handler(self, *types: str | None, retry_policy: RetryPolicy | None = None) -> Callable[[F], F]:
        """Register a handler that gets a page's messages of ``types`` as one list; raising fails
        them all (each is nacked, with ``retry_policy`` as for :meth:`handler`)."""
        return self._register(types, "batch", retry_policy)

    def _register(
        self, types: tuple[str | None, ...], kind: str, retry_policy: RetryPolicy | None, store: bool = False
    ) -> Callable[[F], F]:
        if len(types) == 1 and callable(types[0]):
            raise TypeError("use @consumer.handler() with parentheses")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise TypeError(f"retry_policy must be a RetryPolicy or None, got {retry_policy!r}")

        def deco(fn: F) -> F:
            _concurrency.check_handler(fn)
            self._routes.add(list(types) or [None], kind, _outcomes.storing(fn) if store else fn, retry_policy)
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
        for loop in list(self._loops):
            loop.stop(abandon=abandon)

    def close(self) -> None:
        """Close the client if the consumer made it."""
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    def _conninfo(self) -> str:
        return self.client.conninfo()

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
                self.stats = self._sharded._run_consumer(self, stop_when_idle, max_batches)
            elif self._learn_share():
                self.stats = self._run_slots(stop_when_idle, max_batches)
            elif self._stopping:
                self.stats = RunStats()  # stopped while the mode was being learnt
            elif self.workers > 1:
                self.stats = self._run_loops(stop_when_idle, max_batches)
            else:
                self._run_alone(stop_when_idle, max_batches)
        finally:
            self._loops = []
            self._running = False
        return self.stats

    def _learn_share(self) -> bool:
        """Whether the subscription is a share consumer (``consumer_info``), checked against the
        ``share`` setting.  A database that cannot be reached is waited for as by a receive loop;
        False when stopped meanwhile."""
        failures = 0
        while not self._stopping:
            try:
                rows = self.client.consumer_info(self.queue, self.consumer_name)
                break
            except RECOVERABLE as exc:
                # as a receive loop waits (ReceiveLoop._error_wait): doubling up to ERROR_BACKOFF_MAX
                failures += 1
                longest = max(self.poll_interval, ERROR_BACKOFF_MAX)
                wait = min(longest, self.poll_interval * 2.0 ** min(failures - 1, 32))
                log.warning("%r: database error (%s); trying again in %g s", self, " ".join(str(exc).split()), wait)
                _concurrency.wait_event(self._stop_event, wait)
        else:
            return False
        return self._take_mode(bool(rows[0].share))

    def _take_mode(self, shared: bool) -> bool:
        """Run in the subscription's mode ``shared`` (what ``consumer_info`` says), checked
        against the ``share`` setting (:class:`ShareModeMismatch`)."""
        if self.share is not None and self.share != shared:
            what = "a share consumer" if shared else "an ordinary consumer (batches)"
            raise ShareModeMismatch(
                f"consumer {self.consumer_name!r} of queue {self.queue!r} is {what}, and this Consumer was "
                f"made with share={self.share}: leave share unset (None) to run in the subscription's mode, "
                f"or subscribe a consumer of the other mode under another name (a consumer keeps its mode)"
            )
        self.shared = shared
        return shared

    def _run_slots(self, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        """Run a share consumer's ``workers * concurrency`` handler slots, each a receive loop with
        a worker name of its own, all waiting on one listener; the first slot that fails stops
        the others."""
        client = self.client
        names = loop_names(self.worker_name, self.workers * self.concurrency)
        if self.listen_dsn is not None:
            conninfo: str | None = self.listen_dsn
        elif self.pooled:
            conninfo = None
            log.info("%r: pooled DSN and no listen_dsn: polling for ticks every %g s", self, self.poll_interval)
        else:
            conninfo = self._conninfo()
        listener = Wakeup(conninfo, self.queue, self._stop_event, self._send_probe, self.listen_probe_timeout)
        self.wakeup = listener
        shared = AsyncSharedWakeup(listener)
        group = SlotGroup(self)
        slots = [ShareSlot(self, client, name, shared, group) for name in names]
        self._attach(slots)
        try:
            runs = _concurrency.gather(
                [functools.partial(self._run_loop, slot, stop_when_idle, max_batches) for slot in slots]
            )
        finally:
            shared.shut()
        return total(runs)

    def _run_alone(self, stop_when_idle: bool, max_batches: int | None) -> None:
        """Run one receive loop as the consumer itself: its stats, wake-up and notification
        health are the consumer's, and its page sizing carries over to the next run."""
        loop = ReceiveLoop(self, self.client, None, self.health)
        self.stats = loop.stats
        self._attach([loop])
        try:
            self.wakeup = loop.listen()
            loop.serve(stop_when_idle, max_batches)
        finally:
            self.page_size, self._pace, self._partitioned = loop.page_size, loop._pace, loop._partitioned

    def _run_loops(self, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        """Run ``workers`` receive loops at once, each with a worker name of its own and the same
        client and handlers; the first loop that fails stops the others."""
        client = self.client  # made now: the loops share it
        loops = [ReceiveLoop(self, client, name) for name in self._loop_names]
        self._attach(loops)
        runs = _concurrency.gather(
            [functools.partial(self._run_loop, loop, stop_when_idle, max_batches) for loop in loops]
        )
        return total(runs)

    # -- what a runner of loops uses (this module's, and the cluster's) -------------------

    def _attach(self, loops: Sequence[ReceiveLoop]) -> None:
        """Count ``loops`` among the running ones, which ``stop()`` stops (until ``run`` returns)."""
        self._loops.extend(loops)
        if self._stopping:  # stop() came before the loops existed
            for loop in loops:
                loop.stop()

    def _run_loop(self, loop: ReceiveLoop, stop_when_idle: bool, max_batches: int | None) -> RunStats:
        """Serve ``loop``; when it fails, stop the others."""
        try:
            loop.serve(stop_when_idle, max_batches)
        except BaseException:
            self.stop()
            raise
        return loop.stats
