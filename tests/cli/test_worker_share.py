"""``pglogq worker --share``: a share consumer's handler slots in a worker process.

The worker application is tests/support/consumers.py's (every handled message is recorded in
table ``handled`` once its handler returned, before the lease is acknowledged)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import HANDLED_DDL
from tests.support.paths import REPO
from tests.support.waiting import wait_for

PGLOGQ = str(Path(sys.executable).with_name("pglogq"))


def worker(dsn: str, tmp: Path, name: str, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"worker-{name}.log"
    full = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", T_QUEUE="q", T_CONSUMER="c",
                T_WORKER=name, **env)
    with open(log, "wb") as out:
        proc = subprocess.Popen([PGLOGQ, "worker", "--dsn", dsn, *args, "tests.support.consumers:make_worker"],
                                env=full, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def prepare(client: pglogq.Client, dsn: str, share: bool, ticks: int, per_tick: int) -> list[int]:
    client.create_queue("q")
    client.subscribe("q", "c", share=share)
    client.set_queue_config("q", "dead_interval", "2 seconds")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(HANDLED_DDL)
    ids: list[int] = []
    for t in range(ticks):
        ids += client.send_batch("q", [{"t": t, "n": i} for i in range(per_tick)], type="job")
        client.tick("q", force=True)
    return ids


def test_share_worker_drains_with_its_slots(client: pglogq.Client, dsn: str, tmp_path: Path) -> None:
    ids = prepare(client, dsn, True, ticks=4, per_tick=25)
    proc, log = worker(dsn, tmp_path, "s", "--share", "--concurrency", "3", "--cede-after", "0.3",
                       "--stop-when-idle", T_PAGE="5")
    assert proc.wait(120) == 0, log.read_text()
    handled = rows(dsn, "SELECT msg_id, worker FROM handled ORDER BY msg_id")
    assert [m for m, _ in handled] == ids  # every event, once
    assert {w for _, w in handled} <= {"s-0", "s-1", "s-2"}
    assert "ceded to other workers" in log.read_text()  # the share summary
    assert len(client.receive("q", "c", worker="late")) == 0


def test_share_flag_refuses_an_ordinary_consumer(client: pglogq.Client, dsn: str, tmp_path: Path) -> None:
    prepare(client, dsn, False, ticks=1, per_tick=3)
    proc, log = worker(dsn, tmp_path, "o", "--share", "--stop-when-idle")
    assert proc.wait(120) == 4, log.read_text()
    assert "share=True" in log.read_text() and "ordinary consumer" in log.read_text()
    assert rows(dsn, "SELECT count(*) FROM handled") == [(0,)]
    # without --share the same worker runs it as the ordinary consumer it is
    proc, log = worker(dsn, tmp_path, "o2", "--stop-when-idle")
    assert proc.wait(120) == 0, log.read_text()
    assert rows(dsn, "SELECT count(*) FROM handled") == [(3,)]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "3601"])
def test_cede_after_is_checked(dsn: str, tmp_path: Path, value: str) -> None:
    proc, log = worker(dsn, tmp_path, "x", "--share", "--cede-after", value, "--stop-when-idle")
    assert proc.wait(120) == 2, log.read_text()
    assert "--cede-after" in log.read_text()


def test_killed_share_worker_loses_only_its_leases(client: pglogq.Client, dsn: str, tmp_path: Path) -> None:
    # leases of one event, two slots per process: a kill -9 takes at most the two events in its
    # slots' hands; the other worker goes on and takes them over after dead_interval
    ids = prepare(client, dsn, True, ticks=4, per_tick=10)
    a, _ = worker(dsn, tmp_path, "A", "--share", "--concurrency", "2", T_PAGE="1", T_SLEEP="0.2")
    try:
        wait_for(lambda: rows(dsn, "SELECT count(*) FROM handled WHERE worker LIKE 'A-%'")[0][0] >= 4,
                 "worker A handled some", timeout=120, interval=0.1)
        a.kill()
        a.wait(60)
        b, b_log = worker(dsn, tmp_path, "B", "--share", "--concurrency", "2", T_PAGE="1")
        wait_for(lambda: rows(dsn, "SELECT count(DISTINCT msg_id) FROM handled")[0][0] >= len(ids),
                 "every event handled", timeout=120, interval=0.1)
        b.terminate()
        assert b.wait(60) == 0, b_log.read_text()
    finally:
        if a.poll() is None:
            a.kill()
    counts = rows(dsn, "SELECT msg_id, count(*) FROM handled GROUP BY msg_id ORDER BY msg_id")
    assert [m for m, _ in counts] == ids  # none lost
    again = [m for m, n in counts if n > 1]
    assert len(again) <= 2, again  # only what A's two slots held when killed ran again
    assert len(client.receive("q", "c", worker="late")) == 0


def test_transactional_share_worker_takes_concurrency(client: pglogq.Client, dsn: str, tmp_path: Path) -> None:
    # a transactional consumer runs one handler at a time, unless it is a share consumer: then
    # --concurrency N is N slots, each with its own transaction (was refused: invalid concurrency)
    from tests.support.consumers import EFFECT_DDL

    client.create_queue("q")
    client.subscribe("q", "c", share=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(EFFECT_DDL)
    ids = client.send_batch("q", [{"n": i} for i in range(10)], type="job")
    client.tick("q", force=True)
    log = tmp_path / "worker-t.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", T_QUEUE="q", T_CONSUMER="c",
               T_WORKER="t", T_SLOTS="1")
    with open(log, "wb") as out:
        proc = subprocess.Popen([PGLOGQ, "worker", "--dsn", dsn, "--concurrency", "3", "--stop-when-idle",
                                 "tests.support.consumers:make_tx_share_worker"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    assert proc.wait(120) == 0, log.read_text()
    rest = client.receive("q", "c", worker="late", max_messages=100)  # what a slot's drain left
    done = rows(dsn, "SELECT msg_id, worker FROM effect ORDER BY msg_id")
    assert sorted([m for m, _ in done] + [m.msg_id for m in rest]) == ids  # each once
    assert {w for _, w in done} <= {"t-0", "t-1", "t-2"}
