"""pglogq with SQLAlchemy (the ``sqlalchemy`` extra): events in the application's transaction.

:func:`send` and :func:`send_batch` take a ``Session`` or a ``Connection``; :func:`send_async`
and :func:`send_batch_async` an ``AsyncSession`` or an ``AsyncConnection``.  They run
``pglogq.send`` / ``pglogq.send_batch_json`` through that object, with bound parameters, so the
event commits with the session's transaction or not at all (a session begins its transaction
on first use, as for any statement).  Any PostgreSQL driver works: psycopg 3, psycopg2,
asyncpg, psycopg's async mode (the statement casts every parameter; the values are plain JSON
text, ints, strs, datetimes and timedeltas).

Errors raised by pglogq's SQL functions come back as pglogq exceptions (``UnknownQueue``,
``PayloadTooLarge``...; the SQLAlchemy error is their ``__cause__``); like any failed statement
they leave the transaction failed until it is rolled back (use ``session.begin_nested()`` around
the call to keep the transaction usable).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause

from pglogq.contrib import _sqlapi

__all__ = ["send", "send_async", "send_batch", "send_batch_async"]

_SEND: TextClause = text(_sqlapi.send_sql(_sqlapi.colon))
_SEND_BATCH: TextClause = text(_sqlapi.send_batch_sql(_sqlapi.colon))


def send(
    bind: Session | Connection,
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
) -> int:
    """Append one event in ``bind``'s transaction; returns its message id.  Same arguments and
    errors as :meth:`pglogq.Client.send`."""
    with _sqlapi.sending(queue, headers) as span:
        params = _sqlapi.send_params(
            queue, payload, type=type, headers=span.headers, priority=priority,
            idempotency_key=idempotency_key, deliver_at=deliver_at, delay=delay, key=key,
        )
        with _sqlapi.translating(DBAPIError):
            msg_id = int(bind.execute(_SEND, params).scalar_one())
        span.sent((msg_id,))
        return msg_id


def send_batch(
    bind: Session | Connection,
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
) -> list[int]:
    """Append many events in one statement in ``bind``'s transaction; returns their ids in order.
    Same arguments and errors as :meth:`pglogq.Client.send_batch`."""
    events = _sqlapi.payload_list(payloads)
    with _sqlapi.sending(queue, headers, len(events)) as span:
        params = _sqlapi.send_batch_params(
            queue, events, type=type, headers=span.headers, priority=priority,
            idempotency_keys=idempotency_keys, deliver_at=deliver_at, delay=delay, keys=keys,
        )
        with _sqlapi.translating(DBAPIError):
            ids = _sqlapi.ids(bind.execute(_SEND_BATCH, params).scalar_one())
        span.sent(ids)
        return ids


async def send_async(
    bind: AsyncSession | AsyncConnection,
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
) -> int:
    """:func:`send` for an ``AsyncSession`` or ``AsyncConnection``."""
    with _sqlapi.sending(queue, headers) as span:
        params = _sqlapi.send_params(
            queue, payload, type=type, headers=span.headers, priority=priority,
            idempotency_key=idempotency_key, deliver_at=deliver_at, delay=delay, key=key,
        )
        with _sqlapi.translating(DBAPIError):
            msg_id = int((await bind.execute(_SEND, params)).scalar_one())
        span.sent((msg_id,))
        return msg_id


async def send_batch_async(
    bind: AsyncSession | AsyncConnection,
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
) -> list[int]:
    """:func:`send_batch` for an ``AsyncSession`` or ``AsyncConnection``."""
    events = _sqlapi.payload_list(payloads)
    with _sqlapi.sending(queue, headers, len(events)) as span:
        params = _sqlapi.send_batch_params(
            queue, events, type=type, headers=span.headers, priority=priority,
            idempotency_keys=idempotency_keys, deliver_at=deliver_at, delay=delay, keys=keys,
        )
        with _sqlapi.translating(DBAPIError):
            ids = _sqlapi.ids((await bind.execute(_SEND_BATCH, params)).scalar_one())
        span.sent(ids)
        return ids
