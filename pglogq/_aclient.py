"""The asyncio client: the single source of truth of the client API.

``pglogq/_client.py`` (the synchronous :class:`Client`) is generated from this file by
``python -m tests.tools.unasync``; a test fails when the two drift.  Write here, never there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import AsyncConnectionPool
from typing_extensions import LiteralString, Self

from pglogq import _queries as q
from pglogq import schema
from pglogq.dsn import resolve_dsn
from pglogq.errors import translate
from pglogq.models import ConsumerInfo, DeadLetter, InFlight, Message, QueueInfo, SeekPlan

AnyConn = psycopg.AsyncConnection[Any]
T = TypeVar("T")


async def _configure(conn: AnyConn) -> None:
    """Pooled connections parse jsonb with orjson (several times faster than json for receive)."""
    set_json_loads(orjson.loads, conn)


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _info(cls: type[T], row: Sequence[Any]) -> T:
    return cls(*row[: len(fields(cls))])  # type: ignore[arg-type]


def _position(to: str | int | datetime | None) -> str | None:
    if to is None or isinstance(to, str):
        return to
    if isinstance(to, datetime):
        return to.isoformat()
    return str(int(to))


@dataclass
class AsyncBatch:
    """A page of a consumer's batch.  Iterate it, then ``ack()`` (and ``nack(msg)`` failures first)."""

    id: int | None
    queue: str
    consumer: str
    messages: list[Message]
    client: AsyncClient = field(repr=False)

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

    async def nack(
        self,
        msg: Message,
        *,
        retry_after: timedelta | None = None,
        reason: str | None = None,
        conn: AnyConn | None = None,
    ) -> str:
        """Fail one message: it comes back to this consumer after ``retry_after`` ('retry'),
        or goes to the dead-letter queue after too many tries ('dead')."""
        return await self.client.nack(msg, retry_after=retry_after, reason=reason, conn=conn)


class AsyncClient:
    """pglogq client for asyncio.  ``AsyncClient(dsn)``; ``dsn=None`` follows the DSN rule.

    Every call can take ``conn=``: the caller's connection, whose transaction the call then
    joins (nothing is committed for the caller).  Otherwise a pooled autocommit connection runs
    the call in its own transaction.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        min_size: int = 1,
        max_size: int = 8,
        pool: AsyncConnectionPool[Any] | None = None,
    ) -> None:
        self.dsn = resolve_dsn(dsn) if pool is None else None
        self._pool = pool
        self._own_pool = pool is None
        self._min_size = min_size
        self._max_size = max_size

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._pool is not None and self._own_pool:
            await self._pool.close()
            self._pool = None

    async def _get_pool(self) -> AsyncConnectionPool[Any]:
        if self._pool is None:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                self.dsn or "",
                min_size=self._min_size,
                max_size=self._max_size,
                kwargs={"autocommit": True},
                configure=_configure,
                open=False,
            )
            await pool.open()
            self._pool = pool
        return self._pool

    @asynccontextmanager
    async def connection(self, conn: AnyConn | None = None) -> AsyncIterator[AnyConn]:
        """The caller's connection if given, else a pooled autocommit one."""
        if conn is not None:
            yield conn
            return
        pool = await self._get_pool()
        async with pool.connection() as c:
            yield c

    async def _rows(self, sql: LiteralString, params: Sequence[Any], conn: AnyConn | None) -> list[TupleRow]:
        try:
            async with self.connection(conn) as c:
                cur = await c.execute(sql, params)
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
            async with self.connection(conn) as c, c.transaction():
                await c.execute(q.SCHEMA_LOCK)
                cur = await c.execute(q.SCHEMA_EXISTS)
                row = await cur.fetchone()
                done: set[int] = set()
                if row and row[0]:
                    cur = await c.execute(q.SCHEMA_VERSIONS)
                    done = {r[0] for r in await cur.fetchall()}
                for label, sql in schema.plan(done):
                    await c.execute(sql.encode())
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

    async def create_queue(self, queue: str, *, conn: AnyConn | None = None) -> bool:
        """Create a queue; False if it existed already."""
        return bool(await self._value(q.CREATE_QUEUE, (queue,), conn))

    async def drop_queue(self, queue: str, *, force: bool = False, conn: AnyConn | None = None) -> bool:
        """Drop a queue and all its events; refuses while consumers exist unless ``force``."""
        return bool(await self._value(q.DROP_QUEUE, (queue, force), conn))

    async def set_queue_config(self, queue: str, param: str, value: object, *, conn: AnyConn | None = None) -> str:
        """Change one queue setting (see ``pglogq.set_queue_config``); returns the new value."""
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return str(await self._value(q.SET_QUEUE_CONFIG, (queue, param, text), conn))

    async def subscribe(self, queue: str, consumer: str, *, conn: AnyConn | None = None) -> bool:
        """Register a consumer; it receives events ticked from now on.  False if it existed."""
        return bool(await self._value(q.SUBSCRIBE, (queue, consumer), conn))

    async def unsubscribe(self, queue: str, consumer: str, *, conn: AnyConn | None = None) -> bool:
        return bool(await self._value(q.UNSUBSCRIBE, (queue, consumer), conn))

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
        conn: AnyConn | None = None,
    ) -> int:
        """Append one event; returns its message id.  With ``conn=`` it commits with the caller."""
        return int(
            await self._value(
                q.SEND,
                (queue, Jsonb(payload), type, _json(headers), priority, idempotency_key, deliver_at, delay),
                conn,
            )
        )

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
        conn: AnyConn | None = None,
    ) -> list[int]:
        """Append many events in one statement; returns their ids in order."""
        keys = list(idempotency_keys) if idempotency_keys is not None else None
        ids = await self._value(
            q.SEND_BATCH,
            (queue, Jsonb(list(payloads)), type, _json(headers), priority, keys, deliver_at, delay),
            conn,
        )
        return [int(i) for i in ids or []]

    async def cancel(self, queue: str, msg_id: int, *, conn: AnyConn | None = None) -> bool:
        """Cancel an event no consumer has received yet; False if one already has."""
        return bool(await self._value(q.CANCEL, (queue, msg_id), conn))

    # -- ticking and maintenance ----------------------------------------------------------

    async def tick(self, queue: str | None = None, *, force: bool = False, conn: AnyConn | None = None) -> int:
        """Tick queues whose thresholds say so (``force``: tick ``queue`` now).  Returns ticks made."""
        if force:
            if queue is None:
                raise ValueError("force=True needs a queue name")
            await self._value(q.FORCE_TICK, (queue,), conn)
            return 1
        return int(await self._value(q.TICKER, (queue,), conn))

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
        rotated = bool(await self._value(q.ROTATE_STEP1, (queue, force), None))
        await self._value(q.ROTATE_STEP2, (queue,), None)
        return rotated

    # -- consuming ------------------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        consumer: str,
        *,
        max_messages: int = 100,
        worker: str | None = None,
        conn: AnyConn | None = None,
    ) -> AsyncBatch:
        """The current page of the consumer's batch (the same page until it is acknowledged)."""
        rows = await self._rows(q.RECEIVE, (queue, consumer, max_messages, worker), conn)
        msgs = [Message(*r) for r in rows]
        return AsyncBatch(msgs[0].batch_id if msgs else None, queue, consumer, msgs, self)

    async def ack(self, batch_id: int, *, last: Message | None = None, conn: AnyConn | None = None) -> bool:
        """Acknowledge the page of ``batch_id`` that receive returned last.

        ``last``: the page's last message.  Pass it (``Batch.ack`` does): the ack is then refused
        with :class:`StaleBatch` if that page was acknowledged already by another process using
        the same consumer or worker name, instead of acknowledging a page this one never saw."""
        params = (batch_id, last.msg_id if last else None, last.txid if last else None)
        return bool(await self._value(q.ACK, params, conn))

    async def nack(
        self,
        msg: Message,
        *,
        retry_after: timedelta | None = None,
        reason: str | None = None,
        conn: AnyConn | None = None,
    ) -> str:
        """Fail one received message: 'retry' (it comes back to this consumer) or 'dead'."""
        return str(await self._value(q.NACK, (msg.batch_id, msg.msg_id, retry_after, reason, msg.txid), conn))

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
        rows = await self._rows(q.SEEK_PLAN, (queue, consumer, _position(to), by_events), conn)
        return _info(SeekPlan, rows[0])

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
        rows = await self._rows(q.SEEK, (queue, consumer, _position(to), by_events, force), conn)
        return _info(SeekPlan, rows[0])

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
        rows = await self._rows(q.DLQ_INSPECT, (queue, consumer, limit, type, older_than), conn)
        return [_info(DeadLetter, r) for r in rows]

    async def dlq_replay(self, dead_id: int, *, conn: AnyConn | None = None) -> int:
        """Send a dead letter back to the consumer that dead-lettered it; returns its msg_id."""
        return int(await self._value(q.DLQ_REPLAY, (dead_id,), conn))

    async def dlq_replay_all(
        self,
        queue: str,
        consumer: str | None = None,
        *,
        type: str | None = None,
        older_than: timedelta | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """Replay every matching dead letter, each to its own consumer; returns how many."""
        return int(await self._value(q.DLQ_REPLAY_ALL, (queue, consumer, type, older_than), conn))

    async def dlq_purge(
        self,
        queue: str,
        older_than: timedelta | None = None,
        *,
        consumer: str | None = None,
        type: str | None = None,
        conn: AnyConn | None = None,
    ) -> int:
        """Delete dead letters for good (those older than ``older_than``; all when None)."""
        return int(await self._value(q.DLQ_PURGE, (queue, older_than, consumer, type), conn))

    # -- monitoring -----------------------------------------------------------------------

    async def queue_info(self, queue: str | None = None, *, conn: AnyConn | None = None) -> list[QueueInfo]:
        return [_info(QueueInfo, r) for r in await self._rows(q.QUEUE_INFO, (queue,), conn)]

    async def consumer_info(
        self, queue: str | None = None, consumer: str | None = None, *, conn: AnyConn | None = None
    ) -> list[ConsumerInfo]:
        return [_info(ConsumerInfo, r) for r in await self._rows(q.CONSUMER_INFO, (queue, consumer), conn)]

    async def in_flight(
        self, queue: str | None = None, consumer: str | None = None, *, conn: AnyConn | None = None
    ) -> list[InFlight]:
        """Events being handled right now, with their progress (the view ``pglogq.in_flight``)."""
        rows = await self._rows(q.IN_FLIGHT, (queue, queue, consumer, consumer), conn)
        return [_info(InFlight, r) for r in rows]

    # -- workers: heartbeat and progress ---------------------------------------------------

    async def heartbeat(self, batch_id: int, *, conn: AnyConn | None = None) -> bool:
        """Say the batch is still being handled; False when it is no longer ours (drop it)."""
        return bool(await self._value(q.HEARTBEAT, (batch_id,), conn))

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
        return bool(
            await self._value(
                q.REPORT_PROGRESS,
                (batch_id, msg_id, percent, stage, _json(counters), worker, started_at),
                conn,
            )
        )
