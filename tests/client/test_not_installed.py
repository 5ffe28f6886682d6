"""A database without pglogq, and a DSN that cannot work: every call says so at once, and why.

Every public method of ``Client`` and ``AsyncClient`` that talks to the database (found by
introspection, with the arguments of tests/client/test_conn_transaction.py's table) is called on
a fresh database where pglogq was never installed: each raises :class:`pglogq.NotInstalled`
(a :class:`pglogq.SchemaMismatch`) whose hint names ``pglogq schema install`` and
``client.install_schema()``, never a raw ``InvalidSchemaName`` or ``UndefinedFunction``.

A client whose DSN cannot work (nothing listens on the port, the host does not exist, the
database does not exist) raises :class:`pglogq.CannotConnect` with the reason at its first call,
instead of a bare ``PoolTimeout`` after the pool's 30 s.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pglogq
from tests.client.test_conn_transaction import CALLS, Prepared, _prepare
from tests.support.db import with_db

# no SQL, or the calls that work on a database without pglogq
NOT_CALLED = {"close", "conninfo", "connection", "max_size", "install_schema", "schema_versions"}
EXTRA: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "maintain": ((), {}),
    "rotate": (("q",), {}),
    "result": (("q", 1, "c"), {"timeout": 0}),
}


def _methods(cls: type) -> list[str]:
    return sorted(n for n, _ in inspect.getmembers(cls) if not n.startswith("_") and n not in NOT_CALLED)


@pytest.fixture(scope="module")
def empty_dsn(server_dsn: str) -> Iterator[str]:
    name = f"pglogq_empty_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    yield with_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def prepared(server_dsn: str, template_db: str) -> Iterator[Prepared]:
    """Real batches and messages (made where pglogq is installed), as arguments."""
    name = f"pglogq_notinst_src_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        yield _prepare(with_db(server_dsn, name))
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _args(name: str, p: Prepared) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if name in EXTRA:
        return EXTRA[name]
    assert name in CALLS, f"no arguments for Client.{name}: add it to EXTRA"
    return CALLS[name][0].make(p)


def _assert_not_installed(exc: BaseException, where: str) -> None:
    assert isinstance(exc, pglogq.NotInstalled), f"{where}: {type(exc).__name__}: {exc}"
    assert isinstance(exc, pglogq.SchemaMismatch)
    text = str(exc)
    assert "not installed" in text, f"{where}: {text}"
    assert "pglogq schema install" in text and "install_schema()" in text, f"{where}: {text}"
    assert isinstance(exc.__cause__, psycopg.Error), f"{where}: the server's error is not the cause"


@pytest.mark.parametrize("name", _methods(pglogq.Client))
def test_every_call_on_a_database_without_pglogq_says_install_it(
    name: str, empty_dsn: str, prepared: Prepared
) -> None:
    a, kw = _args(name, prepared)
    with pglogq.Client(empty_dsn) as client, pytest.raises(Exception) as info:
        getattr(client, name)(*a, **kw)
    _assert_not_installed(info.value, f"Client.{name}")


@pytest.mark.parametrize("name", _methods(pglogq.AsyncClient))
def test_every_async_call_on_a_database_without_pglogq_says_install_it(
    name: str, empty_dsn: str, prepared: Prepared
) -> None:
    a, kw = _args(name, prepared)

    async def call() -> BaseException:
        async with pglogq.AsyncClient(empty_dsn) as client:
            try:
                await getattr(client, name)(*a, **kw)
            except Exception as exc:
                return exc
        raise AssertionError(f"AsyncClient.{name} did not raise")

    _assert_not_installed(asyncio.run(call()), f"AsyncClient.{name}")


def test_schema_versions_is_empty_and_install_schema_works_there(server_dsn: str) -> None:
    name = f"pglogq_empty_inst_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        with pglogq.Client(with_db(server_dsn, name)) as client:
            assert client.schema_versions() == []
            assert client.install_schema()
            client.create_queue("q")
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- a DSN that cannot work --------------------------------------------------------------------


def _closed_port() -> int:
    """A local port nothing listens on (bound, never listened: connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    _HELD.append(s)
    return port


_HELD: list[socket.socket] = []


def _bad_dsns(server_dsn: str) -> list[tuple[str, str]]:
    return [
        (f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres", "refused"),
        ("postgresql://postgres@no-such-host.invalid:5432/postgres", "no-such-host.invalid"),
        (with_db(server_dsn, "pglogq_no_such_database"), "does not exist"),
    ]


@pytest.mark.timeout(120)
def test_a_client_with_a_dsn_that_cannot_work_says_why_at_the_first_call(server_dsn: str) -> None:
    for dsn, why in _bad_dsns(server_dsn):
        client = pglogq.Client(dsn)
        with pytest.raises(pglogq.CannotConnect) as info:
            client.send("q", {"n": 1})
        assert why in str(info.value).lower(), str(info.value)
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
        assert isinstance(info.value, ConnectionError)  # code retrying on connection errors goes on
        # and again: the client is not left broken, and still says why
        with pytest.raises(pglogq.CannotConnect):
            client.queue_info()
        client.close()


@pytest.mark.timeout(120)
def test_an_async_client_with_a_dsn_that_cannot_work_says_why_at_the_first_call(server_dsn: str) -> None:
    async def main() -> None:
        for dsn, why in _bad_dsns(server_dsn):
            async with pglogq.AsyncClient(dsn) as client:
                with pytest.raises(pglogq.CannotConnect) as info:
                    await client.send("q", {"n": 1})
                assert why in str(info.value).lower(), str(info.value)

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_client_that_loses_its_database_says_why(server_dsn: str, template_db: str) -> None:
    """The database goes away under a working client: once the pool has no connection in time,
    the error names the reason (here: the database does not exist any more), not only a bare
    ``PoolTimeout``; it is still a ``ConnectionError`` for code that retries."""
    name = f"pglogq_lost_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    client = pglogq.Client(with_db(server_dsn, name))
    client._pool_timeout = 2.0  # how long a call waits for a connection (as a sharded client sets it)
    try:
        client.create_queue("q")
        client.send("q", {"n": 1})
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        errors: list[BaseException] = []
        for _ in range(5):  # the first call may meet the connection the server closed
            try:
                client.send("q", {"n": 2})
            except (psycopg.OperationalError, OSError) as exc:
                errors.append(exc)
                if isinstance(exc, pglogq.CannotConnect):
                    break
        last = errors[-1]
        assert isinstance(last, pglogq.CannotConnect), [repr(e) for e in errors]
        assert "does not exist" in str(last) and "no connection in 2 s" in str(last), str(last)
        assert isinstance(last.__cause__, psycopg.OperationalError)
    finally:
        client.close()
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
