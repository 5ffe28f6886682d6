"""Cooperating workers of one subscription, as real worker processes (``python -m pglogq.worker``).

Every handled message is recorded (msg_id, worker, start, end) by the worker application in
tests/support/consumers.py; the tests check that nothing is lost, that a killed worker's batch
is taken over only after the queue's dead_interval, and that no message is ever handled by two
live workers at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import HANDLED_DDL
from tests.support.paths import REPO
from tests.support.waiting import wait_for

DEAD = "2 seconds"


class Worker:
    def __init__(self, dsn: str, tmp: Path, name: str, **env: str) -> None:
        self.name = name
        self.log_path = tmp / f"worker-{name}.log"
        full = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", T_QUEUE="q", T_CONSUMER="c",
                    T_WORKER=name, **env)
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pglogq.worker", "--dsn", dsn, "tests.support.consumers:make_worker"],
            env=full, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    @property
    def log(self) -> str:
        return self.log_path.read_text()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for w in started:
        if w.proc.poll() is None:
            w.proc.kill()
        w.wait()


def prepare(client: pglogq.Client, dsn: str, ticks: int, per_tick: int) -> list[int]:
    """A queue whose batches hold one tick of ``per_tick`` events each; returns the msg ids."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", per_tick)
    client.set_queue_config("q", "dead_interval", DEAD)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(HANDLED_DDL)
    ids: list[int] = []
    for t in range(ticks):
        ids += client.send_batch("q", [{"tick": t, "n": i} for i in range(per_tick)], type="job")
        client.tick("q", force=True)
    return ids


def rows(dsn: str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


def wait_count(dsn: str, sql: str, target: int, procs: list[Worker] | None = None) -> None:
    """Wait until ``sql`` counts ``target``; fail at once when one of ``procs`` exited."""

    def reached() -> bool:
        for w in procs or []:
            assert w.proc.poll() is None, f"worker {w.name} exited {w.proc.returncode}:\n{w.log}"
        return bool(rows(dsn, sql)[0][0] >= target)

    wait_for(reached, f"{sql} >= {target}", timeout=120, interval=0.1)


def overlaps(dsn: str) -> list[tuple[Any, ...]]:
    """Pairs of handlings of one message by different workers whose intervals overlap."""
    return rows(dsn, """
        SELECT a.msg_id, a.worker, b.worker FROM handled a JOIN handled b
          ON a.msg_id = b.msg_id AND a.ctid < b.ctid
         WHERE tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)""")


def test_four_workers_share_the_subscription(client: pglogq.Client, dsn: str, tmp_path: Path,
                                             workers: list[Worker]) -> None:
    # 8 batches of 5 events at 0.5 s each: a batch takes longer than dead_interval, so only the
    # heartbeat keeps a live worker's batch from being taken over
    ids = prepare(client, dsn, ticks=8, per_tick=5)
    for i in range(4):
        workers.append(Worker(dsn, tmp_path, f"w{i}", T_SLEEP="0.5", T_MODE="thread" if i < 2 else "asyncio"))
    wait_count(dsn, "SELECT count(DISTINCT msg_id) FROM handled", len(ids), procs=workers)
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait() == 0, w.log
    handled = rows(dsn, "SELECT msg_id, worker FROM handled ORDER BY msg_id")
    assert sorted(m for m, _ in handled) == ids  # every event once: no takeover of a live worker
    assert overlaps(dsn) == []
    assert len({w for _, w in handled}) >= 2, "the batches were not shared"
    for w in workers:
        assert "lost to takeover" in w.log and " 0 lost to takeover" in w.log, w.log
    # nothing left open, no progress rows left behind
    assert rows(dsn, "SELECT count(*) FROM pglogq.subscription WHERE batch_id IS NOT NULL") == [(0,)]
    assert rows(dsn, "SELECT count(*) FROM pglogq.progress") == [(0,)]
    assert len(client.receive("q", "c", worker="late")) == 0


def test_killed_worker_batch_is_taken_over_after_dead_interval(
    client: pglogq.Client, dsn: str, tmp_path: Path, workers: list[Worker]
) -> None:
    ids = prepare(client, dsn, ticks=6, per_tick=5)
    a = Worker(dsn, tmp_path, "A", T_SLEEP="0.3")
    workers.append(a)
    wait_count(dsn, "SELECT count(*) FROM handled WHERE worker = 'A'", 2, procs=[a])
    a.proc.kill()  # SIGKILL in the middle of its batch
    a.wait()
    [(a_batch, a_heartbeat)] = rows(
        dsn, "SELECT batch_id, heartbeat_at FROM pglogq.subscription WHERE worker_name = 'A'"
    )
    assert a_batch is not None
    a_msgs = [r[0] for r in rows(dsn, "SELECT msg_id FROM handled WHERE worker = 'A'")]
    b = Worker(dsn, tmp_path, "B", T_SLEEP="0.3")
    workers.append(b)
    wait_count(dsn, "SELECT count(DISTINCT msg_id) FROM handled", len(ids), procs=[b])
    b.signal(signal.SIGTERM)
    assert b.wait() == 0, b.log
    # none lost: every event was handled, A's unacknowledged ones again by B
    assert sorted({r[0] for r in rows(dsn, "SELECT msg_id FROM handled")}) == ids
    a_batch_ids = ids[:5]  # A was alone: it had the first batch
    assert set(a_msgs) <= set(a_batch_ids)
    taken = rows(dsn, "SELECT msg_id, started_at FROM handled WHERE worker = 'B' AND msg_id = ANY(%s)", (a_batch_ids,))
    assert sorted(m for m, _ in taken) == a_batch_ids  # B redid the whole unacknowledged page
    dead_interval = rows(dsn, "SELECT dead_interval FROM pglogq.queue")[0][0]
    assert min(s for _, s in taken) >= a_heartbeat + dead_interval  # never before the interval
    assert rows(dsn, "SELECT batch_id FROM pglogq.subscription WHERE worker_name = 'A'") == [(None,)]
    assert overlaps(dsn) == []


def test_frozen_worker_drops_its_taken_over_batch(
    client: pglogq.Client, dsn: str, tmp_path: Path, workers: list[Worker]
) -> None:
    ids = prepare(client, dsn, ticks=4, per_tick=5)
    a = Worker(dsn, tmp_path, "A", T_SLEEP="0.3")
    workers.append(a)
    wait_count(dsn, "SELECT count(*) FROM handled WHERE worker = 'A'", 1, procs=[a])
    a.signal(signal.SIGSTOP)  # silent, but alive: it will wake up later
    b = Worker(dsn, tmp_path, "B", T_SLEEP="0.1")
    workers.append(b)
    wait_count(dsn, "SELECT count(DISTINCT msg_id) FROM handled", len(ids), procs=[b])
    resumed = rows(dsn, "SELECT clock_timestamp()")[0][0]
    a.signal(signal.SIGCONT)
    # A finds its batch gone at its next heartbeat or ack, drops it and goes on idle
    wait_for(lambda: "dropping it unacknowledged" in a.log, "A to drop its batch", interval=0.1)
    for w in (a, b):
        w.signal(signal.SIGTERM)
        assert w.wait() == 0, w.log
    assert "dropping it unacknowledged" in a.log, a.log
    assert "1 lost to takeover" in a.log, a.log
    # after waking up, A started no message of the batch it had lost but the one it had marked
    # started before it froze: the stop may land between the runtime's mark of a start (the
    # engine's record, which the takeover counts as an attempt) and the handler's first line,
    # where the application reads its clock (seen once beside two CPU burners)
    late = rows(dsn, "SELECT msg_id FROM handled WHERE worker = 'A' AND started_at > %s", (resumed,))
    assert len(late) <= 1, late
    assert sorted({r[0] for r in rows(dsn, "SELECT msg_id FROM handled")}) == ids


def test_dropped_listener_connection_still_drains_by_polling(
    client: pglogq.Client, dsn: str, tmp_path: Path, workers: list[Worker]
) -> None:
    prepare(client, dsn, ticks=0, per_tick=5)
    w = Worker(dsn, tmp_path, "L", T_POLL="0.3")
    workers.append(w)
    dbname = rows(dsn, "SELECT current_database()")[0][0]
    listener_sql = ("SELECT pid FROM pg_stat_activity WHERE datname = %s AND query = 'LISTEN \"pglogq.q\"'"
                    " AND pid <> pg_backend_pid()")
    [(pid,)] = wait_for(lambda: rows(dsn, listener_sql, (dbname,)), "the worker's LISTEN", interval=0.1)
    rows(dsn, "SELECT pg_terminate_backend(%s)", (pid,))
    ids: list[int] = []
    for _ in range(3):
        ids += client.send_batch("q", [{"n": i} for i in range(5)], type="job")
        client.tick("q", force=True)
    wait_count(dsn, "SELECT count(DISTINCT msg_id) FROM handled", len(ids), procs=[w])
    # and the listener comes back
    wait_for(lambda: [r for r in rows(dsn, listener_sql, (dbname,)) if r[0] != pid], "a new LISTEN", interval=0.1)
    w.signal(signal.SIGTERM)
    assert w.wait() == 0
    assert "listener connection of pglogq.q broke" in w.log, w.log


def test_takeover_in_sql(client: pglogq.Client, dsn: str) -> None:
    """A silent worker's batch goes to the next worker that asks; the silent one can no longer
    heartbeat, report progress, nack or ack it, and its progress rows are gone."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 second")
    ids = client.send_batch("q", [{"n": i} for i in range(4)])
    client.tick("q", force=True)
    a = client.receive("q", "c", worker="A", max_messages=2)
    assert a.id is not None and [m.msg_id for m in a] == ids[:2]
    a.ack()  # first page done: the takeover resumes after it
    a = client.receive("q", "c", worker="A", max_messages=2)
    assert client.report_progress(a.id, ids[2], percent=50) is True
    # B asks while A is still alive: nothing for B
    assert len(client.receive("q", "c", worker="B")) == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '2 seconds'"
                      " WHERE worker_name = 'A'")
    b = client.receive("q", "c", worker="B", max_messages=10)
    assert [m.msg_id for m in b] == ids[2:] and b.id != a.id
    assert client.in_flight() == []
    assert client.heartbeat(a.id) is False
    assert client.report_progress(a.id, ids[2], percent=60) is False
    with pytest.raises(pglogq.StaleBatch):
        client.nack(a.messages[0])
    with pytest.raises(pglogq.StaleBatch):
        a.ack()
    assert b.ack() is True
    assert len(client.receive("q", "c", worker="A")) == 0
    assert len(client.receive("q", "c", worker="B")) == 0


def test_sigterm_finishes_the_page_and_a_second_one_abandons_it(
    client: pglogq.Client, dsn: str, tmp_path: Path, workers: list[Worker]
) -> None:
    ids = prepare(client, dsn, ticks=2, per_tick=5)
    # first SIGTERM: the page is finished and acknowledged, then the worker exits
    a = Worker(dsn, tmp_path, "A", T_SLEEP="0.3")
    workers.append(a)
    wait_count(dsn, "SELECT count(*) FROM handled", 1, procs=[a])
    a.signal(signal.SIGTERM)
    assert a.wait() == 0, a.log
    assert sorted(r[0] for r in rows(dsn, "SELECT msg_id FROM handled")) == ids[:5]
    assert rows(dsn, "SELECT batch_id FROM pglogq.subscription WHERE worker_name = 'A'") == [(None,)]
    # two signals: the page is abandoned unacknowledged and comes back whole
    b = Worker(dsn, tmp_path, "B", T_SLEEP="0.3")
    workers.append(b)
    wait_count(dsn, "SELECT count(*) FROM handled WHERE worker = 'B'", 1, procs=[b])
    b.signal(signal.SIGTERM)
    time.sleep(0.1)
    b.signal(signal.SIGTERM)
    assert b.wait() == 0, b.log
    assert "1 abandoned" in b.log, b.log
    partial = [r[0] for r in rows(dsn, "SELECT msg_id FROM handled WHERE worker = 'B'")]
    assert 1 <= len(partial) < 5 and set(partial) <= set(ids[5:])
    [(held,)] = rows(dsn, "SELECT batch_id FROM pglogq.subscription WHERE worker_name = 'B'")
    assert held is not None  # still B's, nothing of it acknowledged
    again = client.receive("q", "c", worker="B", max_messages=10)
    assert again.id == held and [m.msg_id for m in again] == ids[5:]
