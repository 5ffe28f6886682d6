"""The asyncio client: the single source of truth of the client API.

``pglogq/client.py`` (the synchronous :class:`Client`) is generated from this file by
``python -m tests.tools.unasync``; a test fails when the two drift.  Write here, never there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from typing_extensions import LiteralString, Self

import pglogq._args as a
import pglogq._codec as v
import pglogq._convert as cv
from pglogq import _collector, _concurrency_async, _trace, schedules, schema
from pglogq import _queries as q
from pglogq import keys as _keys
from pglogq.dsn import resolve_dsn
from pglogq.errors import (
    CannotConnect,
    ClientClosed,
    InvalidArgument,
    InvalidCaptureOption,
    InvalidConfig,
    InvalidDelay,
    InvalidJobsQuery,
    InvalidPayload,
    InvalidProgress,
    InvalidSchedule,
    InvalidStartCount,
    InvalidTypeConfig,
    InvalidUrgentLane,
    MessageNotInBatch,
    UnknownDeadLetter,
    UnknownMessage,
    translate,
)
from pglogq.models import (
    CaptureInfo,
    ConsumerInfo,
    DeadLetter,
    DeadLetterPreview,
    InFlight,
    JobResult,
    JobState,
    Lease,
    Message,
    QueueInfo,
    Schedule,
    SeekPlan,
    TickerHolder,
    TypeConfig,
)
from pglogq.retry import RetryPolicy

AnyConn = psycopg.AsyncConnection[Any]
_DEFAULT_OPTIONS = (None, 100, None, None)
"""send's headers, priority, deliver_at and delay when not given."""


@dataclass
class AsyncBatch:
    """A page of a consumer's batch.  Iterate it, then ``ack()`` (and ``nack(msg)`` failures first).

    ``shard``: the shard of a cluster the page was received from (``AsyncShardedClient.receive``;
    ack and nack go there), None from a single server's client."""

    id: int | None
    queue: str
    consumer: str
    messages: list[Message]
    client: AsyncClient = field(repr=False)
    shard: str | None = None

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def __bool__(self) -> bool:
        return bool(self.messages)

    async def ack(self, *, conn: AnyConn | None = None) -> bool:
        """Acknowledge this page (no-op for an empty batch)."""
        if self.id is None:
            return False
        return await self.client.ack(self.id, last=self.messages[-1], conn=conn)

    async def cede(self, keep: Message | None = None, *, conn: AnyConn | None = None) -> bool:
        """Give back the events of this lease (a share consumer's) after ``keep`` (None: all not
        acknowledged): see :meth:`AsyncClient.cede`.  No-op for an empty batch."""
        if self.id is None:
            return False
        return await self.client.cede(self.id, keep=keep, conn=conn)

    async def nack(
        self,
        msg: Message,
        *,
        retry_after: timedelta | None = None,
        reason: str | None = None,
        dead: bool = False,
        conn: AnyConn | None = None,
    ) -> str:
        """Fail one message: it comes back to this consumer after ``retry_after`` ('retry'),
        or goes to the dead-letter queue after too many tries, or at once with ``dead=True`` ('dead')."""
        return await self.client.nack(msg, retry_after=retry_after, reason=reason, dead=dead, conn=conn)


class AsyncClient:
    """pglogq client for asyncio.  ``AsyncClient(dsn)``; ``dsn=None`` follows the DSN rule.

    ``client.dsn`` is the DSN the client uses, after the DSN rule (``None`` for a client made on
    your own ``pool=``): pass it to ``psycopg.connect`` for your application's connection.

    Every call can take ``conn=``: the caller's connection, whose transaction the call then
    joins (nothing is committed or rolled back for the caller, and nothing runs on another
    connection); an error from the server leaves that transaction failed, as a failed statement
    of the caller's would.  On a connection in autocommit each call commits on its own (one
    transaction for a call of several statements).  Otherwise a pooled autocommit connection
    runs the call in its own transaction.

    ``pooled=True``: the DSN leads through a connection pooler in transaction mode (PgBouncer):
    the client's connections never prepare statements (psycopg would after five runs, and the
    pooler may run the next one on a server connection that never saw it).  The client keeps no
    other session state, so nothing else changes.

    On a caller's connection (``conn=``) the client prepares nothing, except ``send`` and
    ``send_batch``, which follow that connection's ``prepare_threshold`` (psycopg's default:
    after five runs) unless the client is ``pooled=True``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 8,
        pool: AsyncConnectionPool[Any] | None = None,
        pooled: bool = False,
    ) -> None:
        self.dsn = resolve_dsn(dsn) if pool is None else None
        self.pooled = a.flag(pooled, "pooled")
        self._pool = pool
        self._own_pool = pool is None
        self._min_size = min_size
        self._max_size = max_size
        self._opened = False
        self._closed = False
        self._lock = threading.Lock()  # never held across an await
        self._loop: object | None = None  # the event loop the pool works on (asyncio only)
        self._pool_timeout = 30.0  # seconds a call waits for a connection (a sharded client's is shorter)
        self._probing = False  # a caller is trying the first connection (see _first_connection)

    @property
    def max_size(self) -> int:
        """The largest number of connections this client's pool opens."""
        return self._pool.max_size if self._pool is not None else self._max_size

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the pool (if the client made it).  Calls after this raise :class:`ClientClosed`."""
        with self._lock:
            self._closed = True
            pool = self._pool if self._own_pool else None
            if pool is not None:
                self._pool = None
            stale = pool is not None and not _concurrency_async.same_loop(self._loop)
        if pool is not None:
            if stale:  # made on an event loop that is gone: close its connections without it
                _concurrency_async.discard_pool(pool)
            else:
                await pool.close()

    async def _get_pool(self) -> AsyncConnectionPool[Any]:
        stale: AsyncConnectionPool[Any] | None = None
        with self._lock:
            if self._closed:
                raise ClientClosed(f"{type(self).__name__} is closed")
            pool = self._pool
            if pool is not None and self._opened and not _concurrency_async.same_loop(self._loop):
                # asyncio: the pool belongs to another event loop (asyncio.run called twice)
                if not self._own_pool:
                    raise RuntimeError(
                        "the connection pool given to AsyncClient works on another event loop: "
                        "give each event loop its own pool (or let the client make it)"
                    )
                if _concurrency_async.loop_running_elsewhere(self._loop):
                    raise RuntimeError(
                        "this AsyncClient is in use on another running event loop: use one client per loop"
                    )
                stale, pool, self._pool, self._opened = pool, None, None, False
            if pool is None:
                pool = AsyncConnectionPool(
                    self.dsn or "",
                    min_size=self._min_size,
                    max_size=self._max_size,
                    kwargs=({"autocommit": True, "prepare_threshold": None} if self.pooled
                            else {"autocommit": True}),
                    open=False,
                    timeout=self._pool_timeout,
                )
                self._pool = pool
            ready = self._opened
            # one caller tries the first connection; callers meanwhile open the pool as they did
            probe = not ready and self._own_pool and not self._probing
            if probe:
                self._probing = True
        if stale is not None:
            _concurrency_async.discard_pool(stale)
        if not ready:
            if probe:
                try:
                    await self._first_connection()
                finally:
                    with self._lock:
                        self._probing = False
            await pool.open()  # safe when another caller opened it meanwhile
            with self._lock:
                self._opened = True
                self._loop = _concurrency_async.current_loop()
        return pool

    async def _first_connection(self) -> None:
        """Connect once before the pool opens: a DSN that cannot work (connection refused, unknown
        host, no such database, bad password) fails here at once with its reason, where the pool
        would retry in the background and raise a bare ``PoolTimeout`` after its timeout."""
        extra: dict[str, Any] = {}
        if "connect_timeout" not in conninfo_to_dict(self.dsn or ""):
            extra["connect_timeout"] = max(2, int(self._pool_timeout))
        try:
            c = await psycopg.AsyncConnection.connect(self.dsn or "", autocommit=True, **extra)
        except psycopg.OperationalError as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise CannotConnect(f"cannot connect to the database: {reason}") from exc
        await c.close()

    async def _no_connection(self, timeout: PoolTimeout) -> Exception:
        """Why the pool had no connection in time: when a new connection fails too (the server
        went away, the database was dropped), a :class:`CannotConnect` naming the reason; else
        (every connection busy) the ``PoolTimeout`` itself."""
        if not self._own_pool or not self.dsn:
            return timeout
        try:
            await self._first_connection()
        except CannotConnect as exc:
            why = exc.message.removeprefix("cannot connect to the database: ")
            err = CannotConnect(f"cannot connect to the database (no connection in {self._pool_timeout:g} s): {why}")
            err.__cause__ = exc.__cause__  # psycopg's OperationalError; the PoolTimeout is the context
            return err
        return timeout

    async def conninfo(self) -> str:
        """The connection string this client connects with: its DSN, or the given pool's
        ``conninfo`` (e.g. for a separate LISTEN connection to the same database)."""
        if self.dsn:
            return self.dsn
        pool = await self._get_pool()
        return str(pool.conninfo)

    @asynccontextmanager
    async def connection(self, conn: AnyConn | None = None) -> AsyncIterator[AnyConn]:
        """The caller's connection if given, else a pooled autocommit one."""
        if conn is not None:
            yield conn
            return
        pool = await self._get_pool()
        try:
            async with pool.connection() as c:
                yield c
        except PoolTimeout as exc:
            # no connection in time: say why when the server cannot be reached (a PoolTimeout of a
            # call nested in this block is judged the same way)
            raise await self._no_connection(exc)  # noqa: B904 - its cause is set: the connection error

    @asynccontextmanager
    async def _atomic(self, conn: AnyConn | None) -> AsyncIterator[AnyConn]:
        """The connection a call of several statements runs on, all or nothing.

        A pooled connection, or the caller's in autocommit: a transaction of its own (a savepoint
        inside the caller's ``transaction()`` block).  The caller's connection outside autocommit:
        the caller's transaction, as it is, with no block of the client's: psycopg's
        ``transaction()`` on a connection with no transaction open yet would begin one and COMMIT
        it, committing for the caller (and whatever the caller does next in the same transaction
        would then run in another).  The caller's transaction already makes the call all or
        nothing: a failed statement leaves it failed, to be rolled back, as one of its own would."""
        async with self.connection(conn) as c:
            if conn is not None and not c.autocommit:
                yield c
                return
            async with c.transaction():
                yield c

    async def _rows(
        self, sql: LiteralString, params: Sequence[Any], conn: AnyConn | None, *, hot: bool = False,
        binary: bool = False,
    ) -> list[TupleRow]:
        # an own cursor with tuple rows: the caller's row factory, loaders and prepare threshold
        # must not change what the client reads (prepare=False: a caller's prepared statements
        # would outlive a schema re-install).  ``hot``: send and send_batch, the calls an
        # application makes on every request, follow the caller's prepare threshold instead
        # unless the client is ``pooled`` (a prepared SELECT pglogq.send(...) is re-planned by the
        # server after a re-install and returns the same type; parsing and planning it again on
        # every call cost ~15 us of the server's time).  ``binary``: results in binary (an int8[]
        # of a thousand ids is read twice as fast).
        try:
            if conn is not None:
                async with conn.cursor(row_factory=tuple_row) as cur:
                    await cur.execute(sql, params, prepare=None if hot and not self.pooled else False,
                                      binary=binary)
                    return await cur.fetchall()
            async with self.connection() as c, c.cursor(row_factory=tuple_row) as cur:
                await cur.execute(sql, params, binary=binary)
                return await cur.fetchall()
        except psycopg.Error as exc:
            raise translate(exc) from exc

    async def _value(self, sql: LiteralString, params: Sequence[Any], conn: AnyConn | None) -> Any:
        rows = await self._rows(sql, params, conn)
        return rows[0][0] if rows else None

    # -- schema ---------------------------------------------------------------------------

    async def install_schema(self, *, conn: AnyConn | None = None) -> list[str]:
        """Install or upgrade the schema (idempotent, under an advisory lock).

        Returns the labels of the migrations applied (empty when already up to date)."""
        applied: list[str] = []
        try:
            async with self._atomic(conn) as c, c.cursor(row_factory=tuple_row) as cur:
                await cur.execute(q.SCHEMA_LOCK, prepare=False)
                await cur.execute(q.SCHEMA_EXISTS, prepare=False)
                row = await cur.fetchone()
                done: set[int] = set()
                if row and row[0]:
                    await cur.execute(q.SCHEMA_VERSIONS, prepare=False)
                    done = {r[0] for r in await cur.fetchall()}
                for label, sql in schema.plan(done):
                    await cur.execute(sql.encode(), prepare=False)
                    if label.startswith("migration"):
                        applied.append(label)
        except psycopg.Error as exc:
            raise translate(exc) from exc
        return applied

    async def schema_versions(self, *, conn: AnyConn | None = None) -> list[int]:
        """Migrations applied to this database (empty when pglogq is not installed)."""
        if not await self._value(q.SCHEMA_EXISTS, (), conn):
            return []
        return [r[0] for r in await self._rows(q.SCHEMA_VERSIONS, (), conn)]

    # -- queues and consumers -------------------------------------------------------------

    async def create_queue(
        self, queue: str, *, partitions: int = 1, urgent_lane: bool = False, conn: AnyConn | None = None
    ) -> bool:
        """Create a queue; False if it existed already (nothing changed, whatever its partitions).

        ``partitions``: 1 (default) one ordered log; 2..1024 the events are spread over that many
        partitions by their ``key`` (see :func:`pglogq.key_partition`), each consumer reads the
        partitions as streams of their own, in send order per key, and its cooperating workers
        share them (one worker per partition at a time).  The count changes later only at rest:
        ``set_queue_config(queue, "partitions", n)`` raises :class:`InvalidUrgentLane` while
        anything is in flight.  Anything but an int within 1..1024 raises
        :class:`InvalidPartitions`.

        ``urgent_lane``: True makes every event sent with a priority above 100 urgent: each
        consumer gets it at its next receive, ahead of a waiting backlog of ordinary events (which
        still get a page whenever they have waited a second).  Only with ``partitions=1``; not a
        bool, or True with partitions, raises :class:`InvalidUrgentLane`."""
        name = a.name(queue, "queue")
        parts = _keys.check_partitions(partitions)
        if not isinstance(urgent_lane, bool) or (urgent_lane and parts != 1):
            raise InvalidUrgentLane(f"invalid urgent_lane {urgent_lane!r}: True or False, and True only "
                                    "on a queue of one partition")
        if parts == 1 and not urgent_lane:
            return bool(await self._value(q.CREATE_QUEUE, (name,), conn))
        # the layout is set while the queue is new: in the same transaction as its creation
        async with self._atomic(conn) as c:
            created = bool(await self._value(q.CREATE_QUEUE, (name,), c))
            if created:
                await self._value(q.SET_QUEUE_CONFIG, (name, "partitions", str(parts)), c)
                await self._value(q.SET_QUEUE_CONFIG, (name, "urgent_lane", str(urgent_lane).lower()), c)
        return created

    async def drop_queue(self, queue: str, *, force: bool = False, conn: AnyConn | None = None) -> bool:
        """Drop a queue and all its events; refuses while consumers exist unless ``force``."""
        return bool(await self._value(q.DROP_QUEUE, (a.name(queue, "queue"), a.flag(force, "force")), conn))

    async def set_queue_config(self, queue: str, param: str, value: object, *, conn: AnyConn | None = None) -> str:
        """Change one queue setting (see ``pglogq.set_queue_config``); returns the new value."""
        text = str(value).lower() if isinstance(value, bool) else str(value)
        params = (a.name(queue, "queue"), a.text(param, "setting", InvalidConfig), a.text(text, "value", InvalidConfig))
        return str(await self._value(q.SET_QUEUE_CONFIG, params, conn))

    async def set_type_config(
        self, queue: str, type: str, param: str, value: object, *, conn: AnyConn | None = None
    ) -> str | None:
        """Override one setting for the events of ``type`` (see ``pglogq.set_type_config``).

        ``param``: ``max_retries`` (int >= 0), ``retry_delay``, ``retry_cap`` (timedelta),
        ``retry_factor`` (number >= 1), ``retry_jitter`` (bool), or ``retry_policy`` with a
        :class:`RetryPolicy` (sets the four ``retry_`` settings in one transaction).  ``value``
        None removes the override (the queue's setting applies again).  Returns the new value as
        text (for ``retry_policy``: the policy's settings, comma-separated)."""
        name = a.name(queue, "queue")
        kind = a.text(type, "event type", InvalidTypeConfig, null=False)
        if param == "retry_policy":
            if value is not None and not isinstance(value, RetryPolicy):
                raise InvalidTypeConfig(f"invalid value for retry_policy: a RetryPolicy or None, got {value!r}")
            settings = [
                ("retry_delay", None if value is None else value.base),
                ("retry_factor", None if value is None else value.factor),
                ("retry_cap", None if value is None or value.cap >= timedelta(days=365) else value.cap),
                ("retry_jitter", None if value is None else value.jitter),
            ]
            async with self._atomic(conn) as c:
                out = [await self._value(q.SET_TYPE_CONFIG, (name, kind, p, _setting_text(x)), c)
                       for p, x in settings]
            return None if value is None else ", ".join(f"{p}={o}" for (p, _), o in zip(settings, out, strict=True))
        params = (name, kind, a.text(param, "parameter", InvalidTypeConfig, null=False), _setting_text(value))
        result = await self._value(q.SET_TYPE_CONFIG, params, conn)
        return None if result is None else str(result)

    async def type_config(self, queue: str, *, conn: AnyConn | None = None) -> list[TypeConfig]:
        """The per-type overrides of ``queue`` (see :meth:`set_type_config`), by type."""
        return [cv.info(TypeConfig, r) for r in await self._rows(q.TYPE_CONFIG, (a.name(queue, "queue"),), conn)]

    async def subscribe(self, queue: str, consumer: str, *, share: bool = False, lanes: bool = False,
                        conn: AnyConn | None = None) -> bool:
        """Register a consumer; it receives events ticked from now on.  False if it existed (in the same mode).

        ``share=True``: a share consumer.  Its workers (``receive(..., worker=...)``, a name per
        process or handler slot; required) each get a *lease* of the next events of the
        consumer's batches that no worker holds, of at most ``max_messages`` events, so any idle
        worker takes the next events and none waits behind another worker's slow event; a
        silent worker's lease alone is taken over after the queue's ``dead_interval``.  On a
        partitioned queue a lease is one partition's page, at most one out per partition (a key's
        events never run at once, and start in send order); on a queue with an urgent lane,
        urgent events are leased first.  A consumer keeps its mode (:class:`AlreadyExists` for
        the other one).  On a sharded queue each shard's consumer is a share consumer of its
        own (``ShardedClient.subscribe(..., share=True)``).  Its in-flight window:
        :meth:`set_share_window`.

        ``lanes=True`` (a share consumer of a queue with one partition): its workers cut their
        leases on eight lanes side by side (events spread over the lanes by id) instead of one
        after another from one frontier: the throughput of many workers with small leases, at
        the price of hand-out order, kept within a lane only (urgent events still go first).
        :class:`LanesRefused` for an ordinary consumer or a partitioned queue.  Without lanes
        (the default) events are handed out in order, one acquisition at a time.
        """
        if not isinstance(share, bool):
            raise InvalidArgument(f"share must be True or False, not {share!r}")
        if not isinstance(lanes, bool):
            raise InvalidArgument(f"lanes must be True or False, not {lanes!r}")
        return bool(await self._value(q.SUBSCRIBE, (a.name(queue, "queue"), a.name(consumer, "consumer"), share,
                                                     lanes), conn))

    async def set_share_window(self, queue: str, consumer: str, size: int | None, *,
                               conn: AnyConn | None = None) -> int | None:
        """Set a share consumer's in-flight window: at most ``size`` events (1..100,000,000) handed
        out from the first event of its oldest open lease on; None: no limit (the default).

        While the window is full its workers get nothing new (an empty page) until the oldest
        lease ends.  Returns the window now in force.  :class:`NotAShareConsumer` for an ordinary
        consumer, :class:`InvalidArgument` for a size out of range; nothing changes then."""
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                 or not 1 <= size <= 100_000_000):
            raise InvalidArgument(f"share window must be 1..100000000 events or None, not {size!r}")
        got = await self._value(q.SET_SHARE_WINDOW, (a.name(queue, "queue"), a.name(consumer, "consumer"), size),
                                conn)
        return None if got is None else int(got)

    async def unsubscribe(self, queue: str, consumer: str, *, conn: AnyConn | None = None) -> bool:
        return bool(await self._value(q.UNSUBSCRIBE, (a.name(queue, "queue"), a.name(consumer, "consumer")), conn))

    # -- producing ------------------------------------------------------------------------

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        type: str | None = None,
        headers: dict[str, Any] | None = None,
        priority: int = 100,
        idempotency_key: str | None = None,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
        key: str | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """Append one event; returns its message id.  With ``conn=`` it commits with the caller.

        ``key``: 1 to 255 UTF-8 bytes (else :class:`InvalidKey`), or None.  On a partitioned
        queue every event of one key goes to one partition, so each consumer handles them one at
        a time in send order; the key is stored on any queue."""
        if (type is None and headers is None and idempotency_key is None and deliver_at is None and delay is None
                and key is None and priority.__class__ is int and priority == 100 and _trace.tracer is None):
            # the usual send, with nothing to check but its queue name and payload (the path
            # below gives the same statement and arguments, through the options' checks)
            args = (a.name(queue, "queue"), v.jsonb(payload))
            return int((await self._rows(q.SEND_PLAIN, args, conn, hot=True))[0][0])
        with _trace.sending(queue, headers) as span:
            params = (
                a.name(queue, "queue"), v.jsonb(payload),
                *a.event_options(type, span.headers, priority, deliver_at, delay),
            )
            idem = a.text(idempotency_key, "idempotency key")
            ev_key = None if key is None else _keys.check_key(key)
            if ev_key is not None:
                sql, args = q.SEND_KEYED, (*params[:2], ev_key, *params[2:5], idem, *params[5:])
            elif params[3:] == _DEFAULT_OPTIONS and idem is None:  # the short statement
                sql, args = (q.SEND_PLAIN, params[:2]) if params[2] is None else (q.SEND_TYPED, params[:3])
            else:
                sql, args = q.SEND, (*params[:5], idem, *params[5:])
            msg_id = int((await self._rows(sql, args, conn, hot=True))[0][0])
            span.sent((msg_id,))
            return msg_id

    async def send_batch(
        self,
        queue: str,
        payloads: Sequence[Any],
        *,
        type: str | None = None,
        headers: dict[str, Any] | None = None,
        priority: int = 100,
        idempotency_keys: Sequence[str | None] | None = None,
        deliver_at: datetime | None = None,
        delay: timedelta | None = None,
        keys: Sequence[str] | None = None,
        conn: AnyConn | None = None,
    ) -> list[int]:
        """Append many events in one statement; returns their ids in order.

        ``keys``: one event key per payload (see :meth:`send`'s ``key``; a sequence, not a str,
        of as many keys as payloads, none of them None; else :class:`InvalidKey`), or None."""
        idem = a.idempotency_keys(idempotency_keys)
        events = a.payload_list(payloads)
        ev_keys = None if keys is None else _keys.check_keys(keys, len(events))
        with _trace.sending(queue, headers, len(events)) as span:
            params = (
                a.name(queue, "queue"), v.jsonb(events),
                *a.event_options(type, span.headers, priority, deliver_at, delay),
            )
            rows = await self._rows(q.SEND_BATCH, (*params[:2], ev_keys, *params[2:5], idem, *params[5:]), conn,
                                    hot=True, binary=True)
            ids = rows[0][0] or []  # a new list of int, unless the connection loads arrays or int8 otherwise
            if ids.__class__ is not list or (ids and ids[0].__class__ is not int):
                ids = list(map(int, ids))
            span.sent(ids)
            return ids

    async def cancel(
        self, queue: str, msg_id: int, *, running: bool = False, conn: AnyConn | None = None
    ) -> bool:
        """Cancel an event on which no consumer's handler has started: True when it will never
        start (also when it is in a page a consumer runtime received already); False when a
        handler started on it, or it is done, dead or gone.

        ``running``: when a handler has started on it, ask that handler to stop
        (:meth:`request_stop`, seen as ``msg.cancel_requested``); True then means "it will not
        start, or its running handler was asked to stop"."""
        name = a.name(queue, "queue")
        mid = a.integer(
            msg_id, "message id", a.INT8, lambda n: UnknownMessage(f'unknown message {n} on queue "{queue}"')
        )
        if bool(await self._value(q.CANCEL, (name, mid), conn)):
            return True
        if a.flag(running, "running"):
            return bool(await self._value(q.REQUEST_STOP, (name, mid), conn))
        return False

    async def request_stop(self, queue: str, msg_id: int, *, conn: AnyConn | None = None) -> bool:
        """Ask the handler running an event to stop; True when a handler has started on it and
        its page is not acknowledged yet (the request is recorded), False otherwise."""
        mid = a.integer(
            msg_id, "message id", a.INT8, lambda n: UnknownMessage(f'unknown message {n} on queue "{queue}"')
        )
        return bool(await self._value(q.REQUEST_STOP, (a.name(queue, "queue"), mid), conn))

    # -- jobs: lookup and lists -----------------------------------------------------------

    async def lookup(self, queue: str, msg_id: int, *, conn: AnyConn | None = None) -> list[JobState]:
        """What happened to event ``msg_id``, one :class:`JobState` per consumer of ``queue``
        (see ``pglogq.lookup``: waiting, in-flight, retry, dead, cancelled, done, skipped, gone)."""
        mid = a.integer(
            msg_id, "message id", a.INT8, lambda n: UnknownMessage(f'unknown message {n} on queue "{queue}"'),
            null=False,
        )
        rows = await self._rows(q.LOOKUP, (mid, a.name(queue, "queue"), mid), conn)
        return [cv.job_state(r) for r in rows]

    async def jobs(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        state: str | None = None,
        limit: int = 100,
        after: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        conn: AnyConn | None = None,
    ) -> list[JobState]:
        """One page of the events of ``queue`` that are not done: per consumer (by name), in-flight,
        then retry, dead and waiting (``state`` picks one).  Pass the last row's ``cursor`` as
        ``after`` for the next page; fewer than ``limit`` rows means the list is complete.

        Finished jobs come from the consumers' outcome logs: ``state="finished"`` (every outcome)
        or one outcome (``done``, ``failed``, ``cancelled``, ``stopped``, ``skipped``), newest
        first, ``since`` / ``until`` bounding when they finished (see ``pglogq.jobs``)."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"), a.text(type, "event type"),
            a.text(state, "state", InvalidJobsQuery),
            a.integer(limit, "limit", a.INT4, lambda n: InvalidJobsQuery(f"invalid limit {n}: use 1..100000"),
                      null=False),
            a.text(after, "cursor", InvalidJobsQuery),
            a.moment(since, "since", InvalidJobsQuery), a.moment(until, "until", InvalidJobsQuery),
        )
        return [cv.job_state(r) for r in await self._rows(q.JOBS, params, conn)]

    async def result(
        self, queue: str, msg_id: int, consumer: str, *, timeout: float | timedelta = 30.0,
    ) -> JobResult | None:
        """Wait until the handler of ``consumer`` finished event ``msg_id`` for good, and return
        how (:class:`JobResult`: ``outcome`` done, dead, cancelled or stopped, with the handler's
        stored ``result``); None when that did not happen within ``timeout`` (seconds, or a
        timedelta; 0: look once).

        Waits on a connection of its own that LISTENs for the outcomes of the queue (no
        polling): ``NOTIFY "pglogq.outcome.<queue>"`` at each page a consumer runtime
        acknowledges, with the consumer and the page's least and greatest id; it looks again
        only when ``msg_id`` is in that range.  Needs a direct connection (not a pooler in
        transaction mode)."""
        name = a.name(queue, "queue")
        cons = a.name(consumer, "consumer")
        mid = a.integer(
            msg_id, "message id", a.INT8, lambda n: UnknownMessage(f'unknown message {n} on queue "{queue}"'),
            null=False,
        )
        wait = a.interval(timeout, "timeout", InvalidArgument) if isinstance(timeout, timedelta) else None
        seconds = wait.total_seconds() if wait is not None else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 366 * 86400:
            raise InvalidArgument(f"invalid timeout {timeout!r}: use 0 .. 366 days (seconds or a timedelta)")
        assert name is not None and cons is not None and mid is not None
        deadline = time.monotonic() + seconds
        try:
            listener = await psycopg.AsyncConnection.connect(await self.conninfo(), autocommit=True)
        except psycopg.OperationalError as exc:
            raise CannotConnect(f"cannot connect to the database: {exc}") from exc
        async with listener:
            try:
                # LISTEN first, then look: an outcome committed in between is seen by the look
                await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pglogq.outcome.{name}")))
            except psycopg.Error as exc:
                raise translate(exc) from exc
            while True:
                rows = await self._rows(q.RESULT, (name, cons, mid), listener)
                if rows and rows[0][1]:
                    return cv.job_result(name, cons, mid, rows[0])
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                async for note in listener.notifies(timeout=left):
                    if cv.outcome_note(note.payload, cons, mid):
                        break

    # -- schedules -------------------------------------------------------------------------

    async def schedule_add(
        self,
        queue: str,
        name: str,
        cron: str,
        payload: Any,
        *,
        type: str | None = None,
        headers: dict[str, Any] | None = None,
        priority: int = 100,
        missed: str = "skip",
        conn: AnyConn | None = None,
    ) -> bool:
        """Send ``payload`` to ``queue`` at every due time of the five-field ``cron`` expression
        (UTC), from the ticker.  ``missed``: 'skip' (default) or 'catch_up' for due times missed
        while no ticker ran.  The expression is checked with cronsim first
        (:class:`InvalidSchedule`).  False when the same schedule exists already."""
        expr = schedules.check_cron(cron)
        params = (
            a.name(queue, "queue"), a.text(name, "schedule name", InvalidSchedule, null=False), expr,
            v.jsonb(payload), *a.event_options(type, headers, priority, None, None)[:3],
            a.text(missed, "missed policy", InvalidSchedule),
        )
        return bool(await self._value(q.SCHEDULE_ADD, params, conn))

    async def schedule_remove(self, queue: str, name: str, *, conn: AnyConn | None = None) -> bool:
        """Stop a schedule (:class:`UnknownSchedule` when there is none of that name)."""
        params = (a.name(queue, "queue"), a.text(name, "schedule name", InvalidSchedule, null=False))
        return bool(await self._value(q.SCHEDULE_REMOVE, params, conn))

    async def schedule_list(
        self, queue: str | None = None, *, max_rows: int | None = None, conn: AnyConn | None = None
    ) -> list[Schedule]:
        """The schedules of ``queue`` (None: of every queue), with their next due time, by queue
        and name; with ``max_rows`` (1..100000, else :class:`InvalidArgument`) only that many,
        the soonest due first (those not planned yet last)."""
        params = (
            a.name(queue, "queue"),
            a.integer(max_rows, "max_rows", a.INT4, lambda n: InvalidArgument(f"invalid max_rows {n}: use 1..100000")),
        )
        return [cv.schedule(r) for r in await self._rows(q.SCHEDULE_LIST, params, conn)]

    # -- change capture -------------------------------------------------------------------

    async def capture_table(
        self,
        table: str,
        queue: str,
        *,
        include_columns: Sequence[str] | None = None,
        exclude_columns: Sequence[str] | None = None,
        key_columns: Sequence[str] | None = None,
        old_values: str = "changed",
        only_if: dict[str, Any] | None = None,
        conn: AnyConn | None = None,
    ) -> bool:
        """Append one event to ``queue`` per row inserted, updated or deleted in ``table`` (and one
        per TRUNCATE), in the writer's transaction.  True if newly captured, False if an existing
        capture into this queue was replaced.  See ``pglogq.capture_table`` for the options and
        the event's shape; the caller needs pglogq_writer and the TRIGGER privilege on the table.
        A ``table`` that is not a table name as SQL writes one (``schema.table``, double quotes
        where needed) raises :class:`InvalidArgument` and changes nothing."""
        params = (
            a.text(table, "table name", InvalidArgument, null=False), a.name(queue, "queue"),
            a.columns(include_columns, "include_columns"), a.columns(exclude_columns, "exclude_columns"),
            a.columns(key_columns, "key_columns"), a.text(old_values, "old_values", InvalidCaptureOption),
            a.only_if(only_if),
        )
        return bool(await self._table_call(q.CAPTURE_TABLE, params, conn))

    async def uncapture_table(self, table: str, queue: str | None = None, *, conn: AnyConn | None = None) -> int:
        """Stop capturing ``table`` into ``queue`` (None: every queue); returns how many captures
        were removed (0: it was not captured).  The caller must own the table."""
        params = (a.text(table, "table name", InvalidArgument, null=False), a.name(queue, "queue"))
        return int(await self._table_call(q.UNCAPTURE_TABLE, params, conn))

    async def _table_call(self, sql: LiteralString, params: Sequence[Any], conn: AnyConn | None) -> Any:
        """``_value`` of a statement whose first parameter is a table name cast to regclass.

        The cast runs before the function, so a name PostgreSQL cannot parse (invalid name
        syntax 42602, too many dotted names 42601, a database's name 0A000) comes back as its
        own error, with no context; it is the caller's bad argument, so it is
        :class:`InvalidArgument` like every other bad name.  Errors raised inside the function
        carry a context and are left as they are."""
        try:
            return await self._value(sql, params, conn)
        except (psycopg.errors.InvalidName, psycopg.errors.SyntaxError,
                psycopg.errors.FeatureNotSupported) as exc:
            if exc.diag.context:
                raise
            why = exc.diag.message_primary or str(exc)
            raise InvalidArgument(
                f"invalid table name {params[0]!r}: {why}",
                hint="name it as in SQL: table or schema.table, in double quotes where needed",
            ) from exc

    async def captured_tables(self, queue: str | None = None, *, conn: AnyConn | None = None) -> list[CaptureInfo]:
        """The captured tables (of one queue, or of all)."""
        return [cv.capture_info(r) for r in await self._rows(q.CAPTURED_TABLES, (a.name(queue, "queue"),), conn)]

    # -- ticking and maintenance ----------------------------------------------------------

    async def tick(self, queue: str | None = None, *, force: bool = False, conn: AnyConn | None = None) -> int:
        """Tick queues whose thresholds say so (``force``: tick ``queue`` now).  Returns ticks made."""
        if a.flag(force, "force"):
            if queue is None:
                raise ValueError("force=True needs a queue name")
            await self._value(q.FORCE_TICK, (a.name(queue, "queue"),), conn)
            return 1
        return int(await self._value(q.TICKER, (a.name(queue, "queue"),), conn))

    async def maintain(self) -> dict[str, int]:
        """Run every maintenance step that is due, each in its own transaction."""
        done: dict[str, int] = {}
        for op, queue in await self._rows(q.MAINT_OPERATIONS, (), None):
            result = int(await self._value(q.MAINT_RUN, (op, queue), None) or 0)
            key = f"{op}:{queue}" if queue else op
            done[key] = result
        return done

    async def rotate(self, queue: str, *, force: bool = True) -> bool:
        """Rotation step 1 then step 2, in separate transactions.  True if tables rotated."""
        name = a.name(queue, "queue")
        rotated = bool(await self._value(q.ROTATE_STEP1, (name, a.flag(force, "force")), None))
        await self._value(q.ROTATE_STEP2, (name,), None)
        return rotated

    # -- consuming ------------------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        consumer: str,
        *,
        max_messages: int = 100,
        worker: str | None = None,
        start_first: int | None = None,
        ack: AsyncBatch | None = None,
        conn: AnyConn | None = None,
    ) -> AsyncBatch:
        """The current page of the consumer's batch (the same page until it is acknowledged).

        ``start_first``: None (default), every event of the page counts as started by a handler
        once returned (cancel refuses them); a number, the caller marks starts itself with
        :meth:`mark_started` and the first ``start_first`` events count as started now.

        ``ack``: the page this consumer (or worker) received last, acknowledged in the same
        statement and transaction as the receive (SQL ``pglogq.ack_receive``): one round trip
        and one commit instead of two, for a loop of short jobs.  All or nothing: an ack that is
        refused (:class:`StaleBatch`, :class:`UnknownBatch`, or a page of another holder)
        receives nothing.  An empty page acknowledges nothing."""
        size = a.integer(
            max_messages, "max_messages", a.INT4,
            lambda n: InvalidArgument(f"invalid max_messages {n}: use 1..100000"),
        )
        first = None if start_first is None else a.integer(
            start_first, "start_first", a.INT4,
            lambda n: InvalidStartCount(f"invalid start_first {n}: use 0..100000, or None"),
        )
        if ack is not None and not isinstance(ack, AsyncBatch):
            raise InvalidArgument(f"ack must be a page that receive returned, not {ack!r}")
        done = ack if ack is not None and ack.messages else None
        t = _trace.tracer
        if t is None:
            return await self._receive(queue, consumer, max_messages=size, worker=worker, start_first=first,
                                       conn=conn, cls=Message, ack=done)
        started = time.time_ns()
        batch = await self._receive(queue, consumer, max_messages=size, worker=worker, start_first=first, conn=conn,
                                    cls=Message, ack=done)
        if batch.messages:  # a span for a page (a lease), none for an empty poll
            t.received(queue, consumer, worker, batch.messages, started)
        return batch

    async def _receive(
        self, queue: str, consumer: str, *, max_messages: int | None, worker: str | None, start_first: int | None,
        conn: AnyConn | None, cls: type[Message], ack: AsyncBatch | None = None,
    ) -> AsyncBatch:
        """:meth:`receive`, its messages made as ``cls`` (a subclass of Message: the consumer's
        deliveries, one object per event), ``max_messages`` and ``start_first`` checked already
        by the caller."""
        params: tuple[Any, ...] = (a.name(queue, "queue"), a.name(consumer, "consumer"), max_messages,
                                   a.name(worker, "worker"), start_first)
        query = q.RECEIVE
        if ack is not None:
            # the page to acknowledge first, in the same statement (ack_receive)
            last = ack.messages[-1]
            params = (ack.id, last.msg_id, last.txid, *params)
            query = q.ACK_RECEIVE
        # binary results: the int8, smallint and timestamptz columns of a page load about a quarter
        # faster than parsed from text (the same values; timestamps in the session's time zone).
        # The rows are loaded and made into messages with the cyclic collector held off (see
        # pglogq._collector); the statement is as _rows runs it (prepare=False on a caller's
        # connection), the wait for the server outside the pause.
        try:
            async with self.connection(conn) as c, c.cursor(row_factory=tuple_row) as cur:
                await cur.execute(query, params, prepare=False if conn is not None else None, binary=True)
                with _collector.held_off():
                    msgs = cv.messages(await cur.fetchall(), cls)
        except psycopg.Error as exc:
            raise translate(exc) from exc
        return AsyncBatch(msgs[0].batch_id if msgs else None, queue, consumer, msgs, self)

    async def ack(self, batch_id: int, *, last: Message | None = None, conn: AnyConn | None = None) -> bool:
        """Acknowledge the page of ``batch_id`` that receive returned last.

        ``last``: the page's last message.  Pass it (``Batch.ack`` does): the ack is then refused
        with :class:`StaleBatch` if that page was acknowledged already by another process using
        the same consumer or worker name, instead of acknowledging a page this one never saw."""
        batch_id, last = a.ack_args(batch_id, last)  # type: ignore[assignment]
        params = (batch_id, last.msg_id if last else None, last.txid if last else None)
        return bool(await self._value(q.ACK, params, conn))

    async def cede(self, batch_id: int, *, keep: Message | None = None, conn: AnyConn | None = None) -> bool:
        """Give back the events of a share consumer's lease that this worker has not started.

        ``keep``: the last event the worker keeps (one of the page, at or after the last one
        counted as started: receive with ``start_first`` and :meth:`mark_started` say which);
        None: keep nothing not acknowledged yet (the lease ends).  The rest of the lease goes to
        the next worker that asks, before any new event; this worker acknowledges its page as
        it was returned, and its ceded events' nacks and progress reports are refused.  False
        when nothing follows ``keep``.  :class:`CedeRefused` for a batch that is not a lease or
        for started events."""
        batch_id, keep = a.ack_args(batch_id, keep)  # type: ignore[assignment]
        params = (batch_id, keep.msg_id if keep else None, keep.txid if keep else None)
        return bool(await self._value(q.CEDE, params, conn))

    async def nack(
        self,
        msg: Message,
        *,
        retry_after: timedelta | None = None,
        reason: str | None = None,
        dead: bool = False,
        conn: AnyConn | None = None,
    ) -> str:
        """Fail one received message: 'retry' (it comes back to this consumer) or 'dead'.

        ``dead=True``: to the dead-letter queue at once, whatever retries are left (a failure no
        retry can mend, such as a payload that cannot be decoded)."""
        if not isinstance(msg, Message):
            raise InvalidArgument(f"nack takes a received Message, got {type(msg).__name__}")
        params = (
            a.checked_batch_id(msg.batch_id),
            a.integer(msg.msg_id, "message id", a.INT8,
                      lambda n: MessageNotInBatch(f"message {n} is not in the page of batch {msg.batch_id}")),
            a.interval(retry_after, "retry_after", InvalidDelay),
            a.text(reason, "reason"),
            a.text(msg.txid, "txid"),
            a.flag(dead, "dead"),
        )
        return str(await self._value(q.NACK, params, conn))

    # -- seeking --------------------------------------------------------------------------

    async def seek_plan(
        self,
        queue: str,
        consumer: str,
        *,
        to: str | int | datetime | None = None,
        by_events: int | None = None,
        conn: AnyConn | None = None,
    ) -> SeekPlan:
        """Where a seek would move the consumer, changing nothing.

        ``to``: 'earliest', 'latest', a tick id, a timestamp (or text such as '10 minutes ago');
        or ``by_events``: about this many events back (negative) or forward."""
        rows = await self._rows(q.SEEK_PLAN, a.seek_args(queue, consumer, to, by_events), conn)
        return cv.info(SeekPlan, rows[0])

    async def seek(
        self,
        queue: str,
        consumer: str,
        *,
        to: str | int | datetime | None = None,
        by_events: int | None = None,
        force: bool = False,
        conn: AnyConn | None = None,
    ) -> SeekPlan:
        """Move the consumer's cursor (see :meth:`seek_plan`); returns the plan applied.

        Refuses while a batch of the consumer or its workers is open unless ``force``."""
        rows = await self._rows(q.SEEK, (*a.seek_args(queue, consumer, to, by_events), a.flag(force, "force")), conn)
        return cv.info(SeekPlan, rows[0])

    # -- dead letters ---------------------------------------------------------------------

    async def dlq_inspect(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        limit: int = 100,
        type: str | None = None,
        older_than: timedelta | None = None,
        conn: AnyConn | None = None,
    ) -> list[DeadLetter]:
        """Dead letters of a queue (or of one consumer), oldest first; filter by type or age."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"),
            a.text(type, "type"), a.interval(older_than, "older_than", InvalidArgument),
            a.integer(limit, "max_rows", a.INT4, lambda n: InvalidArgument(f"invalid max_rows {n}: use 1..100000")),
        )
        return [cv.dead_letter(r) for r in await self._rows(q.DLQ_INSPECT, params, conn)]

    async def dlq_replay(self, dead_id: int, *, conn: AnyConn | None = None) -> int:
        """Send a dead letter back to the consumer that dead-lettered it; returns its msg_id."""
        did = a.integer(dead_id, "dead letter id", a.INT8, lambda n: UnknownDeadLetter(f"unknown dead letter {n}"))
        return int(await self._value(q.DLQ_REPLAY, (did,), conn))

    async def dlq_replay_all(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        older_than: timedelta | None = None,
        max_rows: int | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """Replay every matching dead letter, each to its own consumer; returns how many.

        ``max_rows``: at most this many, oldest first (None: all; at least 1, else
        :class:`InvalidArgument`).  A dead letter replayed meanwhile by another call is skipped,
        so fewer than ``max_rows`` may be replayed while more match."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"), a.text(type, "type"),
            a.interval(older_than, "older_than", InvalidArgument),
            a.integer(
                max_rows, "max_rows", a.INT4, lambda n: InvalidArgument(f"invalid max_rows {n}: use 1..{a.INT4[1]}")
            ),
        )
        return int(await self._value(q.DLQ_REPLAY_ALL, params, conn))

    async def dlq_purge(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        older_than: timedelta | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """Delete dead letters for good (those older than ``older_than``; all when None)."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"), a.text(type, "type"),
            a.interval(older_than, "older_than", InvalidArgument),
        )
        return int(await self._value(q.DLQ_PURGE, params, conn))

    async def dlq_count(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        older_than: timedelta | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """How many dead letters the filters match now (what dlq_replay_all or dlq_purge would touch)."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"), a.text(type, "type"),
            a.interval(older_than, "older_than", InvalidArgument),
        )
        return int(await self._value(q.DLQ_COUNT, params, conn))

    async def dlq_search(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        older_than: timedelta | None = None,
        search: str | None = None,
        msg_id: int | None = None,
        before: int | None = None,
        limit: int = 50,
        preview_chars: int | None = 2000,
        conn: AnyConn | None = None,
    ) -> list[DeadLetterPreview]:
        """One page of dead letters, newest first, payload and headers as pretty JSON cut to a preview.

        ``search``: text the type, reason, payload or headers contain (ignoring case); ``msg_id``:
        only this message's; ``before``: only dead ids below this (the next page); ``preview_chars``:
        where the JSON texts are cut (None: whole)."""
        params = (
            a.name(queue, "queue"), a.name(consumer, "consumer"), a.text(type, "type"),
            a.interval(older_than, "older_than", InvalidArgument), a.text(search, "search"),
            a.integer(msg_id, "message id", a.INT8, lambda n: InvalidArgument(f"invalid message id {n}"), null=True),
            a.integer(before, "before", a.INT8, lambda n: InvalidArgument(f"invalid before {n}"), null=True),
            a.integer(limit, "max_rows", a.INT4, lambda n: InvalidArgument(f"invalid max_rows {n}: use 1..1000")),
            a.integer(preview_chars, "preview_chars", a.INT4,
                      lambda n: InvalidArgument(f"invalid preview_chars {n}: use 1..1000000"), null=True),
        )
        return [cv.info(DeadLetterPreview, r) for r in await self._rows(q.DLQ_SEARCH, params, conn)]

    async def dlq_text(self, dead_id: int, *, conn: AnyConn | None = None) -> tuple[str, str | None]:
        """The whole payload and headers of one dead letter as pretty JSON text (headers None when absent)."""
        did = a.integer(dead_id, "dead letter id", a.INT8, lambda n: UnknownDeadLetter(f"unknown dead letter {n}"))
        rows = await self._rows(q.DLQ_TEXT, (did,), conn)
        return str(rows[0][0]), rows[0][1]

    # -- monitoring -----------------------------------------------------------------------

    async def queue_info(self, queue: str | None = None, *, conn: AnyConn | None = None) -> list[QueueInfo]:
        return [cv.info(QueueInfo, r) for r in await self._rows(q.QUEUE_INFO, (a.name(queue, "queue"),), conn)]

    async def consumer_info(
        self, queue: str | None = None, consumer: str | None = None, *, conn: AnyConn | None = None
    ) -> list[ConsumerInfo]:
        """One row per consumer (of ``queue``, or named ``consumer``; None: all), for monitoring.

        Raises :class:`~pglogq.errors.UnknownQueue` for a queue that does not exist and
        :class:`~pglogq.errors.UnknownConsumer` for a consumer that does not exist (on ``queue``,
        or on any queue when ``queue`` is None): a typo is an error, not an empty list.
        """
        params = (a.name(queue, "queue"), a.name(consumer, "consumer"))
        return [cv.info(ConsumerInfo, r) for r in await self._rows(q.CONSUMER_INFO, params, conn)]

    async def in_flight(
        self, queue: str | None = None, consumer: str | None = None, *, conn: AnyConn | None = None
    ) -> list[InFlight]:
        """Events being handled right now, with their progress (the view ``pglogq.in_flight``)."""
        queue, consumer = a.name(queue, "queue"), a.name(consumer, "consumer")
        rows = await self._rows(q.IN_FLIGHT, (queue, queue, consumer, consumer), conn)
        return [cv.in_flight(r) for r in rows]

    async def leases(
        self, queue: str | None = None, consumer: str | None = None, *, conn: AnyConn | None = None
    ) -> list[Lease]:
        """The leases the workers of share consumers hold now (of ``queue``, or of ``consumer``;
        None: all): who holds what, until when, and how often its events were delivered (the
        function ``pglogq.leases``).  An ordinary consumer has none: an empty list.

        Raises :class:`~pglogq.errors.UnknownQueue` and :class:`~pglogq.errors.UnknownConsumer`
        as :meth:`consumer_info` does."""
        params = (a.name(queue, "queue"), a.name(consumer, "consumer"))
        return [cv.info(Lease, r) for r in await self._rows(q.LEASES, params, conn)]

    async def stored_events(self, queue: str, *, conn: AnyConn | None = None) -> int:
        """How many event rows the queue's tables hold now (counted: see ``pglogq.stored_events``)."""
        return int(await self._value(q.STORED_EVENTS, (a.name(queue, "queue"),), conn))

    async def ticker_last_run(self, *, conn: AnyConn | None = None) -> datetime | None:
        """When a ticker last recorded its restore check in this database (None: never)."""
        value: datetime | None = await self._value(q.TICKER_INFO, (), conn)
        return value

    async def ticker_holder(self, *, conn: AnyConn | None = None) -> TickerHolder | None:
        """The session that is this database's active ticker now (None when no ticker is active)."""
        rows = await self._rows(q.TICKER_HOLDER, (), conn)
        return cv.info(TickerHolder, rows[0]) if rows else None

    # -- workers: heartbeat and progress ---------------------------------------------------

    async def mark_started(
        self, msg: Message | None, *, back: bool = False, batch_id: int | None = None, conn: AnyConn | None = None
    ) -> list[int] | None:
        """Record that handlers start on the events of ``msg``'s page up to ``msg`` (for a page
        received with ``start_first``).  Returns the ids among the newly marked events that were
        cancelled meanwhile (never start them), or None when the batch is no longer ours.

        ``back=True``: handlers have started only up to ``msg`` (or, with ``msg=None`` and
        ``batch_id``, on none of the page): cancel may take the others again."""
        if msg is None:
            if not back or batch_id is None:
                raise InvalidArgument("mark_started(None) needs back=True and batch_id")
            params: tuple[Any, ...] = (a.checked_batch_id(batch_id), None, None, True)
        else:
            if not isinstance(msg, Message):
                raise InvalidArgument(f"mark_started takes a received Message, got {type(msg).__name__}")
            params = (a.checked_batch_id(msg.batch_id), msg.msg_id, msg.txid, a.flag(back, "back"))
        got = await self._value(q.MARK_STARTED, params, conn)
        return None if got is None else [int(i) for i in got]

    async def stop_requests(
        self, batch_id: int, msg_ids: Sequence[int], *, conn: AnyConn | None = None
    ) -> list[int]:
        """Which of ``msg_ids`` (events of the batch's page) were asked to stop (:meth:`request_stop`)."""
        ids = [a.integer(i, "message id", a.INT8, lambda n: InvalidArgument(f"invalid message id {n}"))
               for i in msg_ids]
        rows = await self._rows(q.STOP_REQUESTS, (a.checked_batch_id(batch_id), ids), conn)
        return [int(r[0]) for r in rows]

    async def heartbeat(self, batch_id: int, *, conn: AnyConn | None = None) -> bool:
        """Say the batch is still being handled; False when it is no longer ours (drop it)."""
        return bool(await self._value(q.HEARTBEAT, (a.checked_batch_id(batch_id),), conn))

    async def report_progress(
        self,
        batch_id: int,
        msg_id: int,
        *,
        percent: float | None = None,
        stage: str | None = None,
        counters: dict[str, Any] | None = None,
        worker: str | None = None,
        started_at: datetime | None = None,
        conn: AnyConn | None = None,
    ) -> bool:
        """Record the progress of one running event (also a heartbeat of its batch).

        ``None`` keeps the last reported value.  False when the batch is no longer ours."""
        if percent is not None and (isinstance(percent, bool) or not isinstance(percent, (int, float, Decimal))):
            raise InvalidProgress(f"invalid percent {percent!r}: a number within 0..100 is expected")
        try:
            counts = v.jsonb_or_none(counters, "counters")
        except InvalidPayload as exc:
            raise InvalidProgress(exc.message) from exc
        params = (
            a.checked_batch_id(batch_id),
            a.integer(msg_id, "message id", a.INT8,
                      lambda n: MessageNotInBatch(f"message {n} is not in the page of batch {batch_id}")),
            percent, a.text(stage, "stage", InvalidProgress), counts, a.text(worker, "worker label", InvalidProgress),
            a.moment(started_at, "started_at", InvalidProgress),
        )
        return bool(await self._value(q.REPORT_PROGRESS, params, conn))


def _setting_text(value: object) -> str | None:
    """A type setting as the text set_type_config parses (None: remove the override)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{value.total_seconds()!r} seconds"
    if isinstance(value, (int, float, Decimal, str)):
        return str(value)
    raise InvalidTypeConfig(f"invalid value {value!r}: a number, a timedelta, a bool or text is expected")
