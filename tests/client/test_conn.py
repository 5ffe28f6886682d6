"""The client never depends on the caller's connection settings, and an AsyncClient
works across event loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row, namedtuple_row

import pglogq
from tests.support.db import closed_everything

SETTINGS: dict[str, dict[str, Any]] = {
    "dict_row": {"row_factory": dict_row},
    "namedtuple_row": {"row_factory": namedtuple_row},
    "autocommit": {"autocommit": True},
    "prepare_threshold_0": {"prepare_threshold": 0},
    "search_path": {"options": "-c search_path=elsewhere,public"},
    "json_loads": {},  # a connection whose jsonb loader is not json.loads
}


def _prepare(conn: Any, name: str) -> None:
    if name == "json_loads":
        from psycopg.types.json import set_json_loads

        set_json_loads(lambda data: "not what the client wants", conn)


def _every_call(client: Any, conn: Any) -> list[Any]:
    """The calls that take conn=, in an order that works (returns what they gave)."""
    out: list[Any] = []
    out.append(client.create_queue("q2", conn=conn))
    out.append(client.subscribe("q2", "c2", conn=conn))
    out.append(client.send("q", {"id": 2**70 + 1}, conn=conn))
    out.append(client.send_batch("q", [{"n": 1}, {"n": 2}], conn=conn))
    out.append(client.queue_info("q", conn=conn))
    out.append(client.consumer_info("q", "c", conn=conn))
    out.append(client.schema_versions(conn=conn))
    out.append(client.in_flight(conn=conn))
    out.append(client.dlq_inspect("q", conn=conn))
    return out


def _setup(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA elsewhere")
        # a shadowing type and function in the caller's search_path must not be picked up
        conn.execute("CREATE DOMAIN elsewhere.text AS pg_catalog.text CHECK (VALUE <> 'q')")
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
        c.subscribe("q", "c")


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_sync_calls_with_the_callers_connection_ignore_its_settings(dsn: str, setting: str) -> None:
    """Regression: with row_factory=dict_row send(..., conn=) raised KeyError: 0."""
    _setup(dsn)
    client = pglogq.Client(dsn)
    with psycopg.connect(dsn, **SETTINGS[setting]) as conn:
        _prepare(conn, setting)
        out = _every_call(client, conn)
        if not conn.autocommit:
            conn.commit()
        assert out[0] is True and isinstance(out[2], int) and len(out[3]) == 2
        client.tick("q", force=True)
        page = client.receive("q", "c", conn=conn)
        assert [m.payload for m in page] == [{"id": 2**70 + 1}, {"n": 1}, {"n": 2}]
        assert page.ack(conn=conn) is True
        if not conn.autocommit:
            conn.commit()
        assert client.seek_plan("q", "c", to="latest", conn=conn).latest_tick >= 1
    client.close()


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_async_calls_with_the_callers_connection_ignore_its_settings(dsn: str, setting: str) -> None:
    """The same, AsyncClient."""
    _setup(dsn)

    async def main() -> None:
        client = pglogq.AsyncClient(dsn)
        conn = await psycopg.AsyncConnection.connect(dsn, **SETTINGS[setting])
        _prepare(conn, setting)
        try:
            await client.create_queue("q2", conn=conn)
            assert await client.subscribe("q2", "c2", conn=conn) is True
            await client.send("q", {"id": 2**70 + 1}, conn=conn)
            assert len(await client.send_batch("q", [{"n": 1}, {"n": 2}], conn=conn)) == 2
            assert (await client.queue_info("q", conn=conn))[0].queue_name == "q"
            await client.in_flight(conn=conn)
            if not conn.autocommit:
                await conn.commit()
            await client.tick("q", force=True)
            page = await client.receive("q", "c", conn=conn)
            assert [m.payload for m in page] == [{"id": 2**70 + 1}, {"n": 1}, {"n": 2}]
            assert await page.ack(conn=conn) is True
            if not conn.autocommit:
                await conn.commit()
        finally:
            await conn.close()
            await client.close()

    asyncio.run(main())


def _prepared(conn: Any) -> list[str]:
    rows = conn.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'SELECT pglogq.%%'",
                        prepare=False).fetchall()
    return sorted(r[0].split("(")[0] for r in rows)


@pytest.mark.parametrize("pooled", [False, True])
def test_send_follows_the_callers_prepare_threshold_unless_pooled(dsn: str, pooled: bool) -> None:
    """Parsing and planning SELECT pglogq.send(...) on every call of send(conn=)
    cost the server ~15 us; the other calls still prepare nothing on a caller's connection."""
    _setup(dsn)
    client = pglogq.Client(dsn, pooled=pooled)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        client.send("q", 1, conn=conn)
        client.send_batch("q", [1, 2], conn=conn)
        client.queue_info("q", conn=conn)
        client.create_queue("q3", conn=conn)
        expected = [] if pooled else ["SELECT pglogq.send", "SELECT pglogq.send_batch_keyed"]
        assert _prepared(conn) == expected
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        client.send("q", 1, conn=conn)
        assert _prepared(conn) == []
    client.close()


def test_a_prepared_send_survives_a_schema_reinstall(dsn: str) -> None:
    _setup(dsn)
    client = pglogq.Client(dsn)
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        first = client.send("q", 1, conn=conn)
        ids = client.send_batch("q", [1, 2], conn=conn)
        assert len(_prepared(conn)) == 2
        conn.execute("DROP SCHEMA pglogq CASCADE")
        client.install_schema(conn=conn)
        client.create_queue("q", conn=conn)
        again = client.send("q", 2, conn=conn)  # the server re-plans the prepared statement
        assert isinstance(first, int) and len(ids) == 2
        assert [again, *client.send_batch("q", [3, 4], conn=conn)] == [1, 2, 3]  # the new schema's ids
        row = conn.execute("SELECT count(*) FROM pglogq.event", prepare=False).fetchone()
        assert row == (3,)
    client.close()


def test_install_schema_on_a_dict_row_connection(dsn: str) -> None:
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        assert pglogq.Client(dsn).install_schema(conn=conn) == []


def test_a_call_in_the_callers_failed_transaction_raises_and_changes_nothing(dsn: str) -> None:
    _setup(dsn)
    client = pglogq.Client(dsn)
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            client.send("q", {"x": 1}, conn=conn)
        conn.rollback()
        client.send("q", {"x": 2}, conn=conn)  # usable again after the caller's rollback
        conn.rollback()
        row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
    assert row is not None and row[0] == 0
    client.close()


@pytest.mark.parametrize("close_in", ["third_loop", "second_loop"])
def test_async_client_used_from_two_event_loops(dsn: str, close_in: str) -> None:
    """Regression: after asyncio.run twice, close() raised "Event loop is closed" and left
    2 connections open.  The pool is re-made for the new loop; close() closes everything."""
    _setup(dsn)
    client = pglogq.AsyncClient(dsn, min_size=2)

    async def use(n: int) -> int:
        await client.send("q", {"n": n})
        return len(await client.queue_info())

    assert asyncio.run(use(1)) == 1
    if close_in == "second_loop":

        async def use_and_close() -> None:
            await use(2)
            await client.close()

        asyncio.run(use_and_close())
    else:
        assert asyncio.run(use(2)) == 1
        asyncio.run(client.close())
    closed_everything(dsn)


def test_async_client_in_use_on_another_running_loop_is_refused(dsn: str) -> None:
    _setup(dsn)
    client = pglogq.AsyncClient(dsn)
    other = asyncio.new_event_loop()
    import threading

    ready = threading.Event()
    finish: list[Callable[[], None]] = []

    def run_other() -> None:
        asyncio.set_event_loop(other)

        async def hold() -> None:
            await client.queue_info()
            stop = asyncio.Event()
            finish.append(lambda: other.call_soon_threadsafe(stop.set))
            ready.set()
            await stop.wait()
            await client.close()

        other.run_until_complete(hold())

    t = threading.Thread(target=run_other)
    t.start()
    ready.wait(30)
    try:

        async def here() -> None:
            with pytest.raises(RuntimeError, match="another running event loop"):
                await client.queue_info()

        asyncio.run(here())
    finally:
        finish[0]()
        t.join(30)
        other.close()
    closed_everything(dsn)
