"""pglogq.contrib.sqlalchemy against real SQLAlchemy, sync and async, with several drivers.

Every test runs with each driver: psycopg 3 and psycopg2 (sync), asyncpg and psycopg 3 (async).
The application's SQL and ``send`` go through the same Session / Connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pglogq
from pglogq.contrib.sqlalchemy import send, send_async, send_batch, send_batch_async

SYNC_DRIVERS = ["psycopg", "psycopg2"]
ASYNC_DRIVERS = ["asyncpg", "psycopg_async"]


def url(dsn: str, driver: str) -> URL:
    p = conninfo_to_dict(dsn)
    host = str(p.get("host") or "")
    query = {"host": host} if host.startswith("/") else {}
    if driver == "psycopg_async":
        driver = "psycopg"
    return URL.create(
        f"postgresql+{driver}", username=p.get("user"), password=p.get("password"),
        host=None if query else (host or None), port=int(p["port"]) if p.get("port") else None,
        database=p.get("dbname"), query=query,
    )


def prepare(dsn: str) -> None:
    with pglogq.Client(dsn) as c:
        c.create_queue("orders")
        c.subscribe("orders", "mailer")
        with c.connection() as conn:
            conn.execute("CREATE TABLE shop_order (id int PRIMARY KEY, total int NOT NULL)")


def delivered(dsn: str) -> list[Any]:
    with pglogq.Client(dsn) as c:
        c.tick("orders", force=True)
        batch = c.receive("orders", "mailer")
        batch.ack()
        return [m.payload for m in batch]


INSERT = text("INSERT INTO shop_order VALUES (:id, :total) ON CONFLICT (id) DO NOTHING")


# -- sync ---------------------------------------------------------------------------------------


@pytest.fixture(params=SYNC_DRIVERS)
def engine(request: pytest.FixtureRequest, dsn: str) -> Iterator[Engine]:
    prepare(dsn)
    eng = create_engine(url(dsn, request.param))
    yield eng
    eng.dispose()


def place_order(engine: Engine, order_id: int, total: int, key: str | None = None) -> int:
    """A request handler: the order and its event in one Session transaction."""
    with Session(engine) as session, session.begin():
        session.execute(INSERT, {"id": order_id, "total": total})
        msg_id = send(session, "orders", {"order_id": order_id}, type="order.created", idempotency_key=key)
        if total < 0:
            raise ValueError("negative total")
        return msg_id


def test_sync_commit_delivers(engine: Engine, dsn: str) -> None:
    msg_id = place_order(engine, 1, 25)
    with pglogq.Client(dsn) as c:
        c.tick("orders", force=True)
        [m] = c.receive("orders", "mailer")
    assert (m.msg_id, m.payload, m.type) == (msg_id, {"order_id": 1}, "order.created")


def test_sync_rollback_drops_the_event(engine: Engine, dsn: str) -> None:
    with pytest.raises(ValueError):
        place_order(engine, 2, -5)
    assert delivered(dsn) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM shop_order")).scalar_one() == 0


def test_sync_idempotency_key_dedupes_a_retried_request(engine: Engine, dsn: str) -> None:
    first = place_order(engine, 3, 40, key="order-3")
    assert place_order(engine, 3, 40, key="order-3") == first
    assert delivered(dsn) == [{"order_id": 3}]


def test_sync_connection_batch_and_savepoint(engine: Engine, dsn: str) -> None:
    with engine.begin() as conn:
        ids = send_batch(conn, "orders", [{"n": 1}, {"n": 2}], idempotency_keys=["a", None], priority=5)
        nested = conn.begin_nested()
        send(conn, "orders", {"n": 3})
        nested.rollback()
    with engine.begin() as conn:
        again = send_batch(conn, "orders", [{"n": 4}, {"n": 5}], idempotency_keys=["a", "b"])
    assert again[0] == ids[0] and again[1] not in ids
    assert delivered(dsn) == [{"n": 5}, {"n": 1}, {"n": 2}]  # priority 100 before priority 5


def test_sync_errors(engine: Engine, dsn: str) -> None:
    with Session(engine) as session:
        with pytest.raises(pglogq.UnknownQueue, match="nope") as info:
            send(session, "nope", {"n": 1})
        assert isinstance(info.value.__cause__, DBAPIError)
        session.rollback()
        with pytest.raises(pglogq.InvalidPayload):  # refused before any SQL
            send(session, "orders", {"x": float("nan")})
        with pytest.raises(pglogq.InvalidPayload):  # refused by the server (PQ007)
            send(session, "orders", 1, headers=[1, 2])  # type: ignore[arg-type]
        session.rollback()
        with pytest.raises(pglogq.PayloadTooLarge):
            send_batch(session, "orders", ["x" * 2_000_000])
        session.rollback()
        send(session, "orders", {"ok": True})
        session.commit()
    assert delivered(dsn) == [{"ok": True}]


# -- async --------------------------------------------------------------------------------------


@pytest.fixture(params=ASYNC_DRIVERS)
def aengine_url(request: pytest.FixtureRequest, dsn: str) -> URL:
    prepare(dsn)
    return url(dsn, request.param)


def run(coro_fn: Any, u: URL) -> Any:
    async def main() -> Any:
        eng = create_async_engine(u)
        try:
            return await coro_fn(eng)
        finally:
            await eng.dispose()

    return asyncio.run(main())


async def aplace_order(engine: AsyncEngine, order_id: int, total: int, key: str | None = None) -> int:
    async with AsyncSession(engine) as session, session.begin():
        await session.execute(INSERT, {"id": order_id, "total": total})
        msg_id = await send_async(session, "orders", {"order_id": order_id}, idempotency_key=key)
        if total < 0:
            raise ValueError("negative total")
        return msg_id


def test_async_commit_delivers(aengine_url: URL, dsn: str) -> None:
    msg_id = run(lambda e: aplace_order(e, 1, 25), aengine_url)
    with pglogq.Client(dsn) as c:
        c.tick("orders", force=True)
        [m] = c.receive("orders", "mailer")
    assert (m.msg_id, m.payload) == (msg_id, {"order_id": 1})


def test_async_rollback_drops_the_event(aengine_url: URL, dsn: str) -> None:
    with pytest.raises(ValueError):
        run(lambda e: aplace_order(e, 2, -5), aengine_url)
    assert delivered(dsn) == []


def test_async_idempotency_key_dedupes_a_retried_request(aengine_url: URL, dsn: str) -> None:
    async def twice(e: AsyncEngine) -> tuple[int, int]:
        return await aplace_order(e, 3, 40, "order-3"), await aplace_order(e, 3, 40, "order-3")

    first, retried = run(twice, aengine_url)
    assert first == retried
    assert delivered(dsn) == [{"order_id": 3}]


def test_async_connection_batch_and_errors(aengine_url: URL, dsn: str) -> None:
    async def work(e: AsyncEngine) -> list[int]:
        async with e.begin() as conn:
            ids = await send_batch_async(conn, "orders", [{"n": 1}, {"n": 2}], idempotency_keys=["a", None])
        async with e.connect() as conn:
            with pytest.raises(pglogq.UnknownQueue, match="nope"):
                await send_async(conn, "nope", 1)
            await conn.rollback()
            with pytest.raises(pglogq.InvalidArgument):
                await send_batch_async(conn, "orders", [1], idempotency_keys=["a", "b", ""])
            await conn.rollback()
        return ids

    ids = run(work, aengine_url)
    assert len(ids) == 2
    assert delivered(dsn) == [{"n": 1}, {"n": 2}]


# -- every option and the server's refusals, through every driver --------------------------------

HOUR = timedelta(hours=1)


def refusals(now: datetime) -> list[tuple[dict[str, Any], type[Exception]]]:
    """Arguments the server refuses (each its own SQLSTATE, translated whatever the driver), with
    the exception ``Client.send`` raises for them."""
    return [
        ({"queue": "nope"}, pglogq.UnknownQueue),
        ({"queue": None}, pglogq.UnknownQueue),
        ({"queue": ""}, pglogq.UnknownQueue),
        ({"priority": -1}, pglogq.InvalidArgument),
        ({"priority": 32768}, pglogq.InvalidArgument),
        ({"type": ""}, pglogq.InvalidPayload),
        ({"headers": [1]}, pglogq.InvalidPayload),
        ({"delay": -HOUR}, pglogq.InvalidDelay),
        ({"delay": HOUR, "deliver_at": now}, pglogq.InvalidDelay),
        ({"deliver_at": now + timedelta(days=3700 * 2)}, pglogq.InvalidDelay),
        ({"idempotency_key": ""}, pglogq.InvalidArgument),
        ({"payload": "x" * 2_000_000}, pglogq.PayloadTooLarge),
    ]


def test_sync_options_and_refusals(engine: Engine, dsn: str) -> None:
    now = datetime.now(timezone.utc)
    with Session(engine) as session, session.begin():
        send(session, "orders", {"n": "later"}, delay=HOUR)
        send(session, "orders", {"n": "tomorrow"}, deliver_at=now + timedelta(days=1))
        send(session, "orders", {"n": "past"}, deliver_at=now - HOUR, priority=0, type="t", headers={"h": "é"})
        send_batch(session, "orders", [{"n": "b"}], delay=HOUR, type="t", headers={"a": 1}, priority=32767)
        for args, exc in refusals(now):
            kwargs = {"queue": "orders", "payload": {"n": 0}, **args}
            with pytest.raises(exc), session.begin_nested():  # the savepoint rolls back, the session goes on
                send(session, kwargs.pop("queue"), kwargs.pop("payload"), **kwargs)
    with pglogq.Client(dsn) as c:
        c.tick("orders", force=True)
        [m] = c.receive("orders", "mailer")
        [info] = c.queue_info("orders")
    assert (m.payload, m.type, m.priority, m.headers) == ({"n": "past"}, "t", 0, {"h": "é"})
    assert info.delayed == 3


def test_async_options_and_refusals(aengine_url: URL, dsn: str) -> None:
    now = datetime.now(timezone.utc)

    async def work(e: AsyncEngine) -> None:
        async with AsyncSession(e) as session, session.begin():
            await send_async(session, "orders", {"n": "later"}, delay=HOUR)
            await send_async(session, "orders", {"n": "tomorrow"}, deliver_at=now + timedelta(days=1))
            await send_async(session, "orders", {"n": "past"}, deliver_at=now - HOUR, priority=0, type="t",
                             headers={"h": "é"})
            await send_batch_async(session, "orders", [{"n": "b"}], delay=HOUR, type="t", headers={"a": 1})
            for args, exc in refusals(now):
                kwargs = {"queue": "orders", "payload": {"n": 0}, **args}
                with pytest.raises(exc):
                    async with session.begin_nested():
                        await send_async(session, kwargs.pop("queue"), kwargs.pop("payload"), **kwargs)

    run(work, aengine_url)
    with pglogq.Client(dsn) as c:
        c.tick("orders", force=True)
        [m] = c.receive("orders", "mailer")
        [info] = c.queue_info("orders")
    assert (m.payload, m.type, m.priority, m.headers) == ({"n": "past"}, "t", 0, {"h": "é"})
    assert info.delayed == 3
