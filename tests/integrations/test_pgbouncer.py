"""PgBouncer in transaction pooling mode, through a real pgbouncer (see conftest).

The producers, the consumers and the CLI talk to the database through pgbouncer (a pool of 3
server connections); only the ticker and the consumers' LISTEN connection (``listen_dsn``) are
direct.  Every run checks that nothing is lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.tickerd.engine import Engine, State
from pglogq.tickerd.settings import Settings
from tests.support.cli import js, ok
from tests.support.tickers import Daemon, ticks
from tests.support.waiting import wait_for


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def test_the_fixture_is_a_transaction_pooler(pooled_dsn: str, dsn: str) -> None:
    # two client connections open at once, served by one server process: transaction pooling
    with psycopg.connect(pooled_dsn, autocommit=True) as a, psycopg.connect(pooled_dsn, autocommit=True) as b:
        assert backend_pid(a) == backend_pid(b)
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        assert backend_pid(a) != backend_pid(b)


def shuffle_server_connections(pooled_dsn: str, calls: Callable[[], object], rounds: int = 12) -> None:
    """Run ``calls`` while another client holds a server connection every other round, so the
    pooler serves consecutive calls from different server connections."""
    with psycopg.connect(pooled_dsn, autocommit=True, prepare_threshold=None) as hog:
        for i in range(rounds):
            if i % 2:
                hog.execute("BEGIN")
                hog.execute("SELECT 1")
            calls()
            if i % 2:
                hog.execute("COMMIT")


def test_pooled_client_prepares_nothing_so_the_pooler_cannot_lose_its_statements(pooled_dsn: str) -> None:
    with pglogq.Client(pooled_dsn, pooled=True, min_size=1, max_size=1) as client:
        client.create_queue("q")
        shuffle_server_connections(pooled_dsn, lambda: client.queue_info("q"))
        shuffle_server_connections(pooled_dsn, lambda: client.send("q", {"n": 1}))
    # control: psycopg's default (prepare after 5 runs) breaks behind pgbouncer 1.18 in
    # transaction mode; the test above would fail without pooled=True
    with pglogq.Client(pooled_dsn, min_size=1, max_size=1) as client, pytest.raises(psycopg.Error) as err:
        shuffle_server_connections(pooled_dsn, lambda: client.queue_info("q"))
    assert err.value.sqlstate == "26000", err.value  # prepared statement "_pg3_0" does not exist
    with pytest.raises(pglogq.InvalidArgument):
        pglogq.Client(pooled_dsn, pooled="yes")  # type: ignore[arg-type]


class Recorder:
    """What the handlers saw, from several worker threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.attempts: dict[int, int] = {}
        self.accept_all = False

    def handle(self, msg: pglogq.Delivery) -> None:
        n = int(msg.payload["n"])
        with self.lock:
            self.attempts[n] = self.attempts.get(n, 0) + 1
            fail = not self.accept_all and (
                (n % 5 == 0 and msg.retry_count == 0)  # fails once, then succeeds on retry
                or n % 7 == 0  # fails every time: dead-lettered
            )
            if not fail:
                self.acked.append(n)
        if fail:
            raise RuntimeError(f"event {n} fails")


def start_workers(pooled_dsn: str, direct_dsn: str, recorder: Recorder, count: int = 3) -> list[tuple[
        pglogq.Consumer, threading.Thread]]:
    workers = []
    for i in range(count):
        client = pglogq.Client(pooled_dsn, pooled=True, min_size=0, max_size=3)
        consumer = pglogq.Consumer(client, "q", "c", worker=f"w{i}", max_messages=20, poll_interval=0.3,
                                   listen_dsn=direct_dsn)
        consumer.handler()(recorder.handle)
        t = threading.Thread(target=consumer.run, name=f"worker-{i}", daemon=True)
        t.start()
        workers.append((consumer, t))
    return workers


def stop_workers(workers: list[tuple[pglogq.Consumer, threading.Thread]]) -> None:
    for consumer, _ in workers:
        consumer.stop()
    for consumer, t in workers:
        t.join(30)
        assert not t.is_alive()
        consumer.client.close()


def test_produce_consume_retry_dead_letter_and_replay_through_pgbouncer_lose_nothing(
    pooled_dsn: str, dsn: str
) -> None:
    total = 300
    recorder = Recorder()
    with pglogq.Client(pooled_dsn, pooled=True, max_size=4) as client, pglogq.start_ticker(dsn, idle_interval=0.05):
        client.create_queue("q")
        client.set_queue_config("q", "max_retries", 2)
        client.set_queue_config("q", "retry_delay", "100ms")
        client.subscribe("q", "c")
        workers = start_workers(pooled_dsn, dsn, recorder)
        try:
            # producers through the pooler too: single sends from two threads, and batches
            def produce(numbers: range) -> None:
                for n in numbers:
                    client.send("q", {"n": n})

            threads = [threading.Thread(target=produce, args=(range(k, 100, 2),)) for k in (0, 1)]
            for t in threads:
                t.start()
            for start in range(100, total, 50):
                client.send_batch("q", [{"n": n} for n in range(start, start + 50)])
            for t in threads:
                t.join()
            doomed = {n for n in range(total) if n % 7 == 0}
            wait_for(lambda: set(recorder.acked) == set(range(total)) - doomed, "every event but the doomed")
            wait_for(lambda: len(client.dlq_inspect("q", limit=1000)) == len(doomed), "the dead letters")
            dead = client.dlq_inspect("q", limit=1000)
            assert {int(d.payload["n"]) for d in dead} == doomed
            # the once-failing ones were retried and then handled
            assert all(recorder.attempts[n] >= 2 for n in range(0, total, 5) if n not in doomed)
            # replay the dead letters through the pooler: the handler accepts them now
            with recorder.lock:
                recorder.accept_all = True
            assert client.dlq_replay_all("q") == len(doomed)
            wait_for(lambda: set(recorder.acked) == set(range(total)), "the replayed events")
            assert client.dlq_inspect("q") == []
        finally:
            stop_workers(workers)
    # nothing lost, and nothing handled successfully twice
    assert sorted(recorder.acked) == list(range(total))


def test_pooled_consumer_without_listen_dsn_polls(pooled_dsn: str, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    with pglogq.Client(pooled_dsn, pooled=True) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        client.send_batch("q", [{"n": n} for n in range(10)])
        client.tick("q", force=True)
        seen: list[int] = []
        consumer = pglogq.Consumer(client, "q", "c", poll_interval=0.1)
        consumer.handler()(lambda m: seen.append(m.payload["n"]))
        with caplog.at_level(logging.INFO, logger="pglogq.consumer"):
            consumer.run(max_batches=1)
        assert seen == list(range(10))
        assert consumer.wakeup is not None and consumer.wakeup.deaf
        assert "no listen_dsn: polling" in caplog.text


def test_listener_through_the_pooler_warns_at_once_then_polls(
    pooled_dsn: str, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer not told that its DSN is pooled LISTENs through pgbouncer: the probe finds that
    notifications cannot arrive and says so at the first wait, before any poll."""
    with pglogq.Client(dsn) as direct:
        direct.create_queue("q")
        direct.subscribe("q", "c")
        direct.send_batch("q", [{"n": n} for n in range(3)])
        direct.tick("q", force=True)
    seen: list[int] = []
    client = pglogq.Client(pooled_dsn, pooled=True)
    # the mistake: the pooled DSN given as listen_dsn (the same happens to a consumer given the
    # pooled DSN without pooled=True: it LISTENs on it)
    consumer = pglogq.Consumer(client, "q", "c", poll_interval=0.1, listen_probe_timeout=1.0, listen_dsn=pooled_dsn)
    consumer.handler()(lambda m: seen.append(m.payload["n"]))
    stop = threading.Timer(3.0, consumer.stop)
    with caplog.at_level(logging.WARNING, logger="pglogq.consumer"):
        stop.start()
        consumer.run()
    client.close()
    assert seen == [0, 1, 2]  # polling still delivers
    assert consumer.wakeup is not None and consumer.wakeup.deaf
    assert "tick notifications cannot arrive" in caplog.text and "listen_dsn" in caplog.text


def test_listener_on_a_direct_connection_passes_its_probe_and_is_woken(
    pooled_dsn: str, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with pglogq.Client(pooled_dsn, pooled=True) as client:
        client.create_queue("q")
        client.subscribe("q", "c")
        seen: list[int] = []
        consumer = pglogq.Consumer(client, "q", "c", poll_interval=30.0, listen_dsn=dsn)
        consumer.handler()(lambda m: seen.append(m.payload["n"]))
        t = threading.Thread(target=consumer.run, daemon=True)
        with caplog.at_level(logging.WARNING, logger="pglogq.consumer"):
            t.start()
            wait_for(lambda: consumer.wakeup is not None and consumer.wakeup.listening, "listener")
            client.send("q", {"n": 1})
            client.tick("q", force=True)  # the ticker's NOTIFY wakes the consumer long before its 30 s poll
            wait_for(lambda: seen == [1], "the notified event", timeout=10)
            consumer.stop()
            t.join(10)
        assert consumer.wakeup is not None and not consumer.wakeup.deaf
        assert "cannot arrive" not in caplog.text


def test_consumer_rejects_pooled_flag_with_an_unpooled_client(dsn: str) -> None:
    with pglogq.Client(dsn) as client, pytest.raises(ValueError):
        pglogq.Consumer(client, "q", "c", pooled=True)
    with pytest.raises(ValueError):
        pglogq.Consumer(dsn, "q", "c", listen_dsn="  ")


def test_ticker_refuses_a_dsn_through_the_pooler(pooled_dsn: str, dsn: str) -> None:
    async def behind(target: str) -> bool:
        engine = Engine(target, Settings(dsns=(target,)))
        conn = await engine._connect("test")
        try:
            return await engine._behind_pooler(conn)
        finally:
            await conn.close()

    assert asyncio.run(behind(pooled_dsn)) is True
    assert asyncio.run(behind(dsn)) is False
    with pglogq.start_ticker(pooled_dsn) as handle:
        wait_for(lambda: handle.state == State.REFUSED, "the refusal", timeout=30)
        assert "direct connection" in handle.stats.detail
    with pglogq.start_ticker(dsn) as handle:
        assert handle.wait_active(30)


def test_cli_through_pgbouncer(pooled_dsn: str, dsn: str) -> None:
    ok(pooled_dsn, "queue", "create", "q")
    for n in range(3):
        ok(pooled_dsn, "send", "q", f'{{"n": {n}}}')
    assert [r["queue_name"] for r in js(pooled_dsn, "queue", "list")] == ["q"]
    with pglogq.Client(dsn) as client:
        client.tick("q", force=True)  # tail starts after these three

    # tail repeats its statements on one connection (more than psycopg's prepare threshold)
    # while a producer makes the pooler shuffle server connections
    def produce() -> None:
        with pglogq.Client(pooled_dsn, pooled=True) as client:
            time.sleep(1.0)
            for n in range(5):
                client.send("q", {"n": n})
                time.sleep(0.1)

    t = threading.Thread(target=produce)
    t.start()
    r = ok(pooled_dsn, "tail", "q", "--max", "5", "--for", "30s", "--poll", "50ms", "--tick", "--json")
    t.join()
    assert [json.loads(line)["payload"] for line in r.stdout.splitlines()] == [{"n": n} for n in range(5)]
    assert "notifications cannot arrive" in r.stderr  # its LISTEN went through the pooler: said at once
    with pglogq.Client(dsn) as client:
        assert client.consumer_info("q") == []  # the throw-away consumer was removed


def test_every_ticker_entry_point_refuses_the_pooler_alike(pooled_dsn: str, dsn: str, tmp_path: Path) -> None:
    # the daemon, pglogq-ticker --once and pglogq ticker run --once all refuse a pooled DSN with
    # the same words; the one-pass commands exit 3 (refused) and tick nothing
    with pglogq.Client(dsn) as client:
        client.create_queue("q")
        client.send("q", {"n": 1})
    before = ticks(dsn, "q")
    daemon = Daemon(tmp_path / "daemon.log", "--dsn", pooled_dsn)
    try:
        wait_for(lambda: daemon.logged("refused"), "the daemon's refusal", timeout=60)
    finally:
        assert daemon.terminate() == 0
        daemon.close()
    refusal = next(e for e in daemon.events() if e.get("event") == "refused")["msg"]
    assert "connection pooler in transaction mode" in refusal

    commands = {
        "pglogq-ticker --once": [sys.executable, "-m", "pglogq.tickerd"],
        "pglogq ticker run --once": [sys.executable, "-c", "from pglogq.cli import main; main()", "ticker", "run"],
    }
    for name, argv in commands.items():
        done = subprocess.run([*argv, "--once", "--log-format", "json", "--dsn", pooled_dsn],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, (name, done.returncode, done.stderr)
        events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
        said = [e["msg"] for e in events if e.get("event") == "refused"]
        assert len(said) == 1, (name, done.stderr)
        # the daemon adds only when it looks again
        assert refusal.startswith(said[0] + ";"), (name, said[0], refusal)
        assert not any(e.get("event") == "pass_done" for e in events), (name, done.stderr)
    assert ticks(dsn, "q") == before
