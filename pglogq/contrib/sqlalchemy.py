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
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import TextClause
from typing_extensions import Unpack

from pglogq._args import SendBatchOptions, SendOptions
from pglogq.contrib import _sqlapi

__all__ = ["send", "send_async", "send_batch", "send_batch_async"]

_SEND: TextClause = text(_sqlapi.send_sql(_sqlapi.colon))
_SEND_BATCH: TextClause = text(_sqlapi.send_batch_sql(_sqlapi.colon))


def send(
    bind: Session | Connection,
    queue: str,
    payload: Any,
    **options: Unpack[SendOptions],
) -> int:
    """Append one event in ``bind``'s transaction; returns its message id.  Same arguments and
    errors as :meth:`pglogq.Client.send`."""
    _sqlapi.known_options("send", options, _sqlapi.SEND_OPTIONS)
    with _sqlapi.sending(queue, options.get("headers")) as span:
        params = _sqlapi.send_params(queue, payload, options, span.headers)
        with _sqlapi.translating(DBAPIError):
            msg_id = int(bind.execute(_SEND, params).scalar_one())
        span.sent((msg_id,))
        return msg_id


def send_batch(
    bind: Session | Connection,
    queue: str,
    payloads: Sequence[Any],
    **options: Unpack[SendBatchOptions],
) -> list[int]:
    """Append many events in one statement in ``bind``'s transaction; returns their ids in order.
    Same arguments and errors as :meth:`pglogq.Client.send_batch`."""
    _sqlapi.known_options("send_batch", options, _sqlapi.SEND_BATCH_OPTIONS)
    events = _sqlapi.payload_list(payloads)
    with _sqlapi.sending(queue, options.get("headers"), len(events)) as span:
        params = _sqlapi.send_batch_params(queue, events, options, span.headers)
        with _sqlapi.translating(DBAPIError):
            ids = _sqlapi.ids(bind.execute(_SEND_BATCH, params).scalar_one())
        span.sent(ids)
        return ids


async def send_async(
    bind: AsyncSession | AsyncConnection,
    queue: str,
    payload: Any,
    **options: Unpack[SendOptions],
) -> int:
    """:func:`send` for an ``AsyncSession`` or ``AsyncConnection``."""
    _sqlapi.known_options("send_async", options, _sqlapi.SEND_OPTIONS)
    with _sqlapi.sending(queue, options.get("headers")) as span:
        params = _sqlapi.send_params(queue, payload, options, span.headers)
        with _sqlapi.translating(DBAPIError):
            msg_id = int((await bind.execute(_SEND, params)).scalar_one())
        span.sent((msg_id,))
        return msg_id


async def send_batch_async(
    bind: AsyncSession | AsyncConnection,
    queue: str,
    payloads: Sequence[Any],
    **options: Unpack[SendBatchOptions],
) -> list[int]:
    """:func:`send_batch` for an ``AsyncSession`` or ``AsyncConnection``."""
    _sqlapi.known_options("send_batch_async", options, _sqlapi.SEND_BATCH_OPTIONS)
    events = _sqlapi.payload_list(payloads)
    with _sqlapi.sending(queue, options.get("headers"), len(events)) as span:
        params = _sqlapi.send_batch_params(queue, events, options, span.headers)
        with _sqlapi.translating(DBAPIError):
            ids = _sqlapi.ids((await bind.execute(_SEND_BATCH, params)).scalar_one())
        span.sent(ids)
        return ids
