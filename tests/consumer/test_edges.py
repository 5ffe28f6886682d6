"""Consumer runtime edges an outside review found: pool sizes, abandon, savepoints."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import MODES, Spec, run_once, running
from tests.support.paths import REPO
from tests.support.waiting import wait_for


def setup_queue(client: pglogq.Client, n: int = 3) -> list[int]:
    client.create_queue("q")
    client.subscribe("q", "c")
    ids: list[int] = client.send_batch("q", [{"n": i} for i in range(n)], type="t")
    client.tick("q", force=True)
    return ids


@pytest.mark.parametrize("mode", MODES)
def test_transactional_consumer_refuses_a_one_connection_pool(mode: str, client: pglogq.Client, dsn: str) -> None:
    """Regression: with max_size=1 the page's transaction and the handlers' heartbeats competed
    for the only connection (handled=1, failed=2).  Refused at construction with a clear error."""
    small: Any = pglogq.Client(dsn, max_size=1) if mode == "thread" else pglogq.AsyncClient(dsn, max_size=1)
    cls: Any = pglogq.Consumer if mode == "thread" else pglogq.AsyncConsumer
    with pytest.raises(ValueError, match="max_size >= 2"):
        cls(small, "q", "c", transactional=True)
    cls(small, "q", "c")  # not transactional: one connection is enough


@pytest.mark.parametrize("mode", MODES)
def test_transactional_consumer_with_a_two_connection_pool_handles_everything(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    """Regression: the smallest pool allowed works, though every handler waits past a heartbeat."""
    setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE done (n int)")

    def handle(msg: Any) -> Any:
        time.sleep(0.3)  # past heartbeat_interval: the next handler first heartbeats the batch
        if mode == "thread":
            msg.conn.execute("INSERT INTO done VALUES (%s)", (msg.payload["n"],))
            return None
        return msg.conn.execute("INSERT INTO done VALUES (%s)", (msg.payload["n"],))

    if mode == "thread":
        c = pglogq.Consumer(pglogq.Client(dsn, max_size=2), "q", "c", transactional=True, heartbeat_interval=0.1)
        c.handler("t")(handle)
        stats = c.run(stop_when_idle=True)
        c.client.close()
    else:

        async def main() -> pglogq.RunStats:
            ac = pglogq.AsyncClient(dsn, max_size=2)
            c = pglogq.AsyncConsumer(ac, "q", "c", transactional=True, heartbeat_interval=0.1)

            @c.handler("t")
            async def ahandle(msg: Any) -> None:
                await asyncio.sleep(0.3)
                await msg.conn.execute("INSERT INTO done VALUES (%s)", (msg.payload["n"],))

            try:
                return await c.run(stop_when_idle=True)
            finally:
                await ac.close()

        stats = asyncio.run(main())
    assert (stats.handled, stats.failed) == (3, 0)
    with psycopg.connect(dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM done ORDER BY n")] == [0, 1, 2]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
def test_abandon_returns_at_once_while_a_handler_runs(
    mode: str, transactional: bool, client: pglogq.Client, dsn: str
) -> None:
    """Regression: stop(abandon=True) did not cancel the running handler; run() waited for it."""
    ids = setup_queue(client)
    started = threading.Event()
    release = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"transactional": transactional})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        started.set()
        if mode == "thread":
            release.wait(120)  # a thread cannot be interrupted: it is left behind
            return None
        return asyncio.sleep(120)  # cancelled

    with running(mode, spec) as r:
        assert started.wait(30)
        r.stop(abandon=True)
        stats = r.join(timeout=30)  # well before the handler's 120 s
    release.set()
    assert (stats.pages, stats.handled, stats.abandoned_pages) == (0, 0, 1)
    assert [m.msg_id for m in client.receive("q", "c")] == ids  # all of it comes back


@pytest.mark.parametrize("mode", MODES)
def test_transactional_abandon_cancels_the_handlers_sql(mode: str, client: pglogq.Client, dsn: str) -> None:
    """Regression: an abandoned transactional handler blocked in SQL is cancelled; nothing commits."""
    ids = setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE done (n int)")
    started = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"transactional": True})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        sql = "INSERT INTO done VALUES (1); SELECT pg_sleep(120)"
        started.set()
        if mode == "thread":
            try:
                msg.conn.execute(sql)
            finally:
                msg.conn.execute("INSERT INTO done VALUES (2)") if not msg.conn.closed else None
            return None
        return msg.conn.execute(sql)

    with running(mode, spec) as r:
        assert started.wait(30)
        time.sleep(0.2)  # let the statement reach the server
        r.stop(abandon=True)
        stats = r.join(timeout=60)
    assert stats.abandoned_pages == 1 and stats.pages == 0
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM done").fetchone()
        sleeping = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%pg_sleep(120)%%' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None and row[0] == 0
    assert sleeping is not None and sleeping[0] == 0
    assert [m.msg_id for m in client.receive("q", "c")] == ids


@pytest.mark.parametrize("mode", MODES)
def test_a_handler_that_swallows_its_sql_error_does_not_break_the_next_one(
    mode: str, client: pglogq.Client, dsn: str
) -> None:
    """Regression: the next message failed with InFailedSqlTransaction before its handler ran.
    Each handler's savepoint is restored; the swallowing one is nacked (its work was undone)."""
    ids = setup_queue(client, 3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE done (n int PRIMARY KEY)")
    spec = Spec(dsn, "q", "c", kwargs={"transactional": True})

    @spec.handler("t")
    def handle(msg: Any) -> Any:
        n = msg.payload["n"]
        if mode == "thread":
            msg.conn.execute("INSERT INTO done VALUES (%s)", (n,))
            if n == 0:
                with contextlib.suppress(psycopg.errors.DivisionByZero):  # swallowed, no savepoint
                    msg.conn.execute("SELECT 1/0")
            return None

        async def work() -> None:
            await msg.conn.execute("INSERT INTO done VALUES (%s)", (n,))
            if n == 0:
                with contextlib.suppress(psycopg.errors.DivisionByZero):
                    await msg.conn.execute("SELECT 1/0")

        return work()

    stats = run_once(mode, spec, stop_when_idle=True)
    assert (stats.handled, stats.failed, stats.retried) == (2, 1, 1)
    with psycopg.connect(dsn) as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM done ORDER BY n")] == [1, 2]
        row = conn.execute("SELECT msg_id, reason FROM pglogq.retry").fetchone()
    assert row is not None and row[0] == ids[0] and "HandlerLeftTransactionFailed" in row[1]


WORKER_APP = """
import asyncio, os, time
import psycopg
import pglogq

DSN = os.environ["PGLOGQ_DSN"]


def started():
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute("INSERT INTO started VALUES (1)")


if os.environ["T_MODE"] == "asyncio":
    consumer = pglogq.AsyncConsumer(DSN, "wq", "wc")

    @consumer.handler()
    async def handle(msg):
        started()
        await asyncio.sleep(300)
else:
    consumer = pglogq.Consumer(DSN, "wq", "wc")

    @consumer.handler()
    def handle(msg):
        started()
        time.sleep(300)
"""


@pytest.mark.parametrize("mode", MODES)
def test_worker_exits_promptly_on_a_second_sigterm(
    mode: str, client: pglogq.Client, dsn: str, tmp_path: Path
) -> None:
    """Regression: `pglogq worker` did not exit on a second SIGTERM while a handler ran."""
    client.create_queue("wq")
    client.subscribe("wq", "wc")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE started (n int)")
    client.send("wq", {"n": 1})
    client.tick("wq", force=True)
    (tmp_path / "worker_app.py").write_text(WORKER_APP)
    env = dict(os.environ, PGLOGQ_DSN=dsn, T_MODE=mode,
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", ""), str(REPO)]))
    proc = subprocess.Popen([sys.executable, "-m", "pglogq.worker", "worker_app:consumer"], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT count(*) FROM started").fetchone() != (0,), "the handler to run")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)  # the handler would sleep 300 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "abandoning" in out and "1 abandoned" in out
    assert len(client.receive("wq", "wc")) == 1  # the page comes back


def test_accepts_dsn_only_while_the_consumer_makes_its_own_unconnected_client(dsn: str) -> None:
    """``pglogq worker --dsn`` asks ``accepts_dsn`` (public) instead of reading the consumer's
    private fields: true for a consumer without a client until it connects, never with a given one."""
    own = pglogq.Consumer(None, "q", "c")
    assert own.accepts_dsn
    own.use_dsn(dsn)
    assert own.client.dsn == dsn  # the client is made now
    assert not own.accepts_dsn
    with pytest.raises(RuntimeError, match="use_dsn"):
        own.use_dsn(dsn)
    own.close()
    with pglogq.Client(dsn) as client:
        given = pglogq.Consumer(client, "q", "c")
        assert not given.accepts_dsn
        with pytest.raises(RuntimeError, match="use_dsn"):
            given.use_dsn(dsn)
