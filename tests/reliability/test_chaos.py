"""The chaos harness in CI: a short run with a fixed seed must lose nothing and invent nothing.

The run starts its own embedded PostgreSQL (it crashes and restarts it), so it is
``embedded_only``: it runs once, not again against the shared server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.harness import child_env
from tests.harness.chaos.checker import check
from tests.harness.chaos.history import Recorder
from tests.harness.chaos.nemesis import MEAN_INTERVAL, MODE_INTERVAL, schedule

SEED = 7
DURATION = 75


@pytest.mark.embedded_only
def test_short_chaos_run_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.chaos", "--seed", str(SEED), "--duration", str(DURATION),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, env=child_env(),
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["drained"], report
    assert report["cursor_regressions"] == []
    subs = report["subscribers"]
    assert set(subs) == {"c1", "c2", "c3"}
    for name, s in subs.items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["poison_not_dead"] == 0, (name, s)
        assert s["delivered_ids"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the run did what it claims: many sends, every kind of fault, unknown outcomes included
    assert report["sends"]["ok"] > 1000
    assert report["sends"]["indeterminate"] > 0
    faults = report["faults"]
    for kind in MEAN_INTERVAL:
        assert faults.get(kind, 0) > 0, kind
    assert faults.get("proxy_drop_after_commit", 0) > 0
    assert faults.get("idle_in_transaction_timeout", 0) > 0


@pytest.mark.embedded_only
def test_short_chaos_run_with_retention_and_reinstalls_loses_only_what_retention_skipped(tmp_path: Path) -> None:
    """issue 12 #17: the retention mode re-installs the schema and runs retention with
    max_consumer_lag = 2 s while everything runs.  Events retention made a consumer skip are
    recorded and not lost; nothing ticked within the limit is skipped (issue 12 #2)."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.harness.chaos", "--seed", str(SEED), "--duration", "45", "--mode", "retention",
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=280, env=child_env(),
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "retention"
    assert report["drained"], report
    assert report["cursor_regressions"] == []
    for name, s in report["subscribers"].items():
        assert s["lost"] == 0, (name, s["examples"])
        assert s["unexpected"] == 0, (name, s["examples"])
        assert s["skipped_within_limit"] == 0, (name, s["examples"])
        assert s["delivered_ids"] + s["skipped"] >= report["sends"]["ok"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    faults = report["faults"]
    for kind in MODE_INTERVAL["retention"]:
        assert faults.get(kind, 0) > 0, kind


def test_schedule_is_a_function_of_the_seed() -> None:
    assert schedule(3, 60) == schedule(3, 60)
    assert schedule(3, 60) != schedule(4, 60)
    assert {k for _, k in schedule(3, 20)} == set(MEAN_INTERVAL)


def test_checker_finds_lost_unexpected_and_duplicates(tmp_path: Path) -> None:
    p = Recorder(tmp_path / "producer-p1.log")
    for i in range(1, 6):
        p.write("invoke", f"p1:{i}")
    p.write_many([("ok", "p1:1"), ("ok", "p1:2"), ("fail", "p1:3"), ("info", "p1:4")])  # p1:5 killed
    c = Recorder(tmp_path / "consumer-c1.log")
    c.write_many([
        ("deliver", "p1:1", 1, "c1", "-", 0),
        ("deliver", "p1:1", 2, "c1", "-", 0),   # redelivered: duplicate
        ("deliver", "p1:3", 2, "c1", "-", 0),   # a failed send delivered: unexpected
        ("deliver", "p1:5", 2, "c1", "-", 0),   # indeterminate (producer killed): fine
        ("deliver", "zz:1", 2, "c1", "-", 0),   # never sent: unexpected
    ])
    report = check(tmp_path, ["c1"], {}, set())
    s = report["subscribers"]["c1"]
    assert report["sends"] == {"attempted": 5, "ok": 2, "failed": 1, "indeterminate": 2,
                               "indeterminate_reported": 1}
    assert s["lost"] == 1 and s["examples"]["lost"] == ["p1:2"]
    assert s["unexpected"] == 2 and s["examples"]["unexpected"] == ["p1:3", "zz:1"]
    assert s["duplicated"] == 1
    assert s["indeterminate_delivered"] == 1 and s["indeterminate_absent"] == 1


def test_checker_counts_retention_skips_apart_from_losses(tmp_path: Path) -> None:
    """issue 12 #17: an event a retention pass made the consumer skip is not lost; one skipped
    although it was ticked within the limit is reported (skipped_within_limit)."""
    p = Recorder(tmp_path / "producer-p1.log")
    p.write_many([(k, f"p1:{i}") for i in range(1, 5) for k in ("invoke", "ok")])
    Recorder(tmp_path / "consumer-c1.log").write("deliver", "p1:1", 1, "c1", "-", 0)
    Recorder(tmp_path / "retention-harness.log").write_many([
        ("skip", "p1:2", "c1", 0),   # legitimately skipped
        ("skip", "p1:3", "c1", 1),   # ticked within the limit, never delivered: wrong
        ("skip", "p1:1", "c1", 1),   # recorded, but delivered anyway: fine
        ("skip", "p1:4", "c2", 0),   # another consumer's skip
    ])
    s = check(tmp_path, ["c1"], {}, set())["subscribers"]["c1"]
    assert s["lost"] == 1 and s["examples"]["lost"] == ["p1:4"]
    assert s["skipped"] == 2
    assert s["skipped_within_limit"] == 1 and s["examples"]["skipped_within_limit"] == ["p1:3"]


# -- targeted faults (checklist items the harness does not isolate) ------------------------------


def test_concurrent_pumps_move_each_retry_once(client: Any, dsn: str) -> None:
    """Checklist 3: racing retry pumps re-enqueue every nacked event exactly once."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(300)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=1000)
    for m in page:
        assert client.nack(m, retry_after=timedelta(0)) == "retry"
    page.ack()
    barrier = threading.Barrier(4)
    moved: list[int] = []

    def pump() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            barrier.wait()
            row = conn.execute("SELECT pglogq.maint_pump()").fetchone()
            moved.append(row[0] if row else -1)

    threads = [threading.Thread(target=pump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(moved) == len(ids)
    client.tick("q", force=True)
    again = client.receive("q", "c", max_messages=1000)
    assert sorted(m.msg_id for m in again) == ids
    assert {m.retry_count for m in again} == {1}


def test_held_xmin_blocks_rotation_visibly_then_it_resumes(client: Any, dsn: str) -> None:
    """Checklist 33: a long transaction holding an xid stops rotation (and queue_info names it),
    never bloats event tables (they only get INSERTs and TRUNCATEs); rotation resumes when it
    ends.  A read-only snapshot has no xid and does not stop rotation at all (a REPEATABLE READ
    producer that writes later is safe anyway: see tests/sql/test_rotation.py)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "rotation_period", "1 s")
    reader = psycopg.connect(dsn)
    reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    reader.execute("SELECT count(*) FROM pglogq.queue")
    holder = psycopg.connect(dsn)

    def tick_and_drain() -> None:
        client.tick("q", force=True)
        while page := client.receive("q", "c", max_messages=500):
            page.ack()

    try:
        client.send("q", {"first": True})
        tick_and_drain()
        client.rotate("q")
        tick_and_drain()
        assert client.rotate("q") is True  # the read-only snapshot does not hold rotation back
        holder.execute("SELECT pg_current_xact_id()")  # an open transaction with an xid
        tick_and_drain()
        client.rotate("q")
        for i in range(3):
            client.send_batch("q", [{"round": i, "n": n} for n in range(200)])
            tick_and_drain()
            assert client.rotate("q") is False  # the consumer is caught up, the transaction is not
        time.sleep(2.2)  # rotation_blocked_by speaks up after two rotation periods
        blocked = client.queue_info("q")[0].rotation_blocked_by
        assert blocked is not None and f"pid {holder.info.backend_pid}" in blocked, blocked
        with psycopg.connect(dsn) as conn:
            dead = conn.execute(
                "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
                " WHERE schemaname = 'pglogq' AND relname LIKE 'event\\_%'"
            ).fetchone()
            assert dead == (0,)
    finally:
        holder.rollback()  # synchronous: closing alone ends the transaction a moment later
        holder.close()
        reader.rollback()
        reader.close()
    tick_and_drain()
    assert client.rotate("q") is True


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.mark.embedded_only
def test_disk_full_fails_sends_clearly_and_they_resume(tmp_path: Path) -> None:
    """Checklist 12: event tables on a full disk → sends fail with SQLSTATE 53100 and change
    nothing; after space returns they succeed, and nothing acknowledged is lost."""
    from tests.harness.chaos.server import ChaosServer

    disk = Path(tempfile.mkdtemp(prefix="pglogq-disk-"))
    if not _mount_tmpfs(disk, "4M"):
        pytest.skip("needs root to mount a small tmpfs")
    server = ChaosServer(Path(tempfile.mkdtemp(prefix="pglogq-diskfull-")))
    try:
        shutil.chown(disk, "embedded_postgres", "embedded_postgres")
        server.setup()
        with pglogq.Client(server.dsn) as c, server.connect() as conn:
            c.install_schema()
            c.create_queue("q")
            c.subscribe("q", "c")
            conn.execute(f"CREATE TABLESPACE small LOCATION '{disk}'".encode())
            for (part,) in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE c.relname ~ '^event_[0-9]+_[0-9]+$'"
            ).fetchall():
                conn.execute(f"ALTER TABLE {part} SET TABLESPACE small".encode())
            ballast = disk / "ballast"
            ballast.write_bytes(b"\0" * 1024 * 1024)
            sent: list[int] = []
            with pytest.raises(psycopg.errors.DiskFull) as info:
                for _ in range(10000):
                    sent += c.send_batch("q", [{"pad": "x" * 1500} for _ in range(20)])
            assert "No space left on device" in str(info.value)
            assert len(sent) > 100
            count = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
            assert count == (len(sent),)  # the failed batch left nothing behind
            ballast.unlink()  # space returns
            sent += c.send_batch("q", [{"after": True}])
            c.tick("q", force=True)
            got: list[int] = []
            while page := c.receive("q", "c", max_messages=5000):
                got += [m.msg_id for m in page]
                page.ack()
            assert got == sent
    finally:
        server.destroy()
        subprocess.run(["umount", str(disk)], capture_output=True)
        shutil.rmtree(disk, ignore_errors=True)


def _receive_buffers(dsn: str, queue: str, consumer: str) -> int:
    """Shared buffers one receive touches (its whole work, from EXPLAIN ANALYZE BUFFERS)."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pglogq.receive(%s, %s, 10)",
            (queue, consumer),
        ).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_taking_a_merged_batch_does_not_rescan_the_backlog(client: Any, dsn: str) -> None:
    """Found by the long chaos run: taking a batch that merges many ticks scanned every stored
    event once per tick (a sequential scan per tick), so with a large backlog each receive ran
    into the statement timeout and the consumers stopped moving.  The work of one receive must
    not grow with (ticks merged) x (events stored)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)
    client.receive("q", "c")  # the cursor is at the latest tick
    for _ in range(80):
        client.send_batch("q", [{"pad": "x" * 200} for _ in range(100)])
        client.tick("q", force=True)
    small = _receive_buffers(dsn, "q", "c")
    for _ in range(80):
        client.send_batch("q", [{"pad": "x" * 200} for _ in range(100)])
        client.tick("q", force=True)
    # twice the backlog: the first batch (same ~100 ticks merged) must cost about the same
    large = _receive_buffers(dsn, "q", "c")
    assert large < small * 1.5 + 200, (small, large)
    assert small < 3000, small  # one batch of ~10000 events: a page, not the whole log per tick


def test_rotation_waits_briefly_for_short_readers_instead_of_starving(client: Any, dsn: str) -> None:
    """Found by the long chaos run: rotation took its lock with NOWAIT, but consumers and the
    ticker hold short ACCESS SHARE locks on every event table nearly all the time under load, so
    rotation never happened (0 of ~100 forced rotations in 7 minutes; event tables grew without
    end).  It now waits up to lock_timeout; a holder that does not let go still makes it give
    up, changing nothing."""
    client.create_queue("q")
    client.subscribe("q", "c")

    def tick_and_drain() -> None:
        client.tick("q", force=True)
        while page := client.receive("q", "c", max_messages=500):
            page.ack()

    client.send("q", {"n": 1})
    tick_and_drain()
    client.rotate("q")
    tick_and_drain()
    reader = psycopg.connect(dsn)
    reader.execute("SELECT count(*) FROM pglogq.event")  # ACCESS SHARE on every child, held

    stop = threading.Event()

    def commit_when_rotation_waits() -> None:
        with psycopg.connect(dsn, autocommit=True) as watch:
            while not stop.is_set() and watch.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'"
            ).fetchone() == (0,):
                time.sleep(0.01)
        reader.commit()

    t = threading.Thread(target=commit_when_rotation_waits)
    t.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '120s'")
        try:
            rotated = conn.execute("SELECT pglogq.maint_rotate_step1('q', true)").fetchone()
        finally:
            stop.set()
            t.join(60)
        assert rotated == (True,)
        conn.execute("SELECT pglogq.maint_rotate_step2('q')")
        tick_and_drain()
        before = conn.execute("SELECT cur_table, switch_step1 FROM pglogq.queue").fetchone()
        reader.execute("SELECT count(*) FROM pglogq.event")  # now a holder that stays (a pg_dump)
        conn.execute("SET lock_timeout = '100ms'")
        assert conn.execute("SELECT pglogq.maint_rotate_step1('q', true)").fetchone() == (False,)
        assert conn.execute("SELECT cur_table, switch_step1 FROM pglogq.queue").fetchone() == before
        assert conn.execute("SHOW lock_timeout").fetchone() == ("100ms",)  # the caller's setting is kept
    reader.rollback()
    reader.close()


def test_twin_consumers_cannot_ack_a_page_they_never_saw(client: Any, dsn: str) -> None:
    """Found by the long chaos run (two worker processes had the same name): process A acks
    page 1 and receives page 2; its twin B, still on page 1, then acked "the current page" —
    page 2, which B never saw; when A died before recording page 2, it was lost (44 events for
    one subscriber).  With the page's last message, B's ack is refused and page 2 comes again."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(6)])
    client.tick("q", force=True)
    a1 = client.receive("q", "c", max_messages=2)
    b1 = client.receive("q", "c", max_messages=2)  # the twin gets the same page
    assert [m.msg_id for m in a1] == [m.msg_id for m in b1] == ids[:2]
    assert a1.ack() is True
    a2 = client.receive("q", "c", max_messages=2)  # A now holds page 2 ... and dies
    assert [m.msg_id for m in a2] == ids[2:4]
    with pytest.raises(pglogq.StaleBatch, match="acknowledged already"):
        b1.ack()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the same through SQL
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pglogq.ack(%s, %s, %s::xid8)", (b1.id, ids[1], b1.messages[-1].txid))
        assert info.value.sqlstate == "PQ009"
    again = client.receive("q", "c", max_messages=2)
    assert [m.msg_id for m in again] == ids[2:4]  # page 2 was not acknowledged by the twin
    assert client.ack(again.id or 0, last=again.messages[-1]) is True
    rest = client.receive("q", "c", max_messages=10)
    assert [m.msg_id for m in rest] == ids[4:]
    assert rest.ack() is True
    with pytest.raises(pglogq.StaleBatch):  # the batch is finished: a late ack is refused too
        b1.ack()
