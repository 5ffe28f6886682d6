"""Maintenance (prune, rotation, retention) racing cursor moves: nothing a cursor points to is
deleted, and rotation refuses when a position cannot be resolved."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support import draining
from tests.support.waiting import wait_for


def drain(client: pglogq.Client, consumer: str) -> list[int]:
    return [m.msg_id for m in draining.drain(client, "q", consumer, page=1000)]


def eight_ticks(client: pglogq.Client) -> list[int]:
    """Queue q, consumers a and b; 8 x (send, tick); both have read everything."""
    client.create_queue("q")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    sent = []
    for i in range(8):
        sent.append(client.send("q", {"n": i}))
        client.tick("q", force=True)
    assert drain(client, "a") == sent
    assert drain(client, "b") == sent
    return sent


def test_prune_never_deletes_the_tick_a_concurrent_seek_moves_to(client: pglogq.Client, dsn: str) -> None:
    """Regression: session 1 seeks a to tick 7 in an open transaction; session 2 prunes; then
    session 1 commits.  a must receive from tick 7 on, and rotation must not truncate what it
    has not received."""
    sent = eight_ticks(client)
    with psycopg.connect(dsn) as s1, psycopg.connect(dsn, autocommit=True) as s2:
        s1.execute("SELECT * FROM pglogq.seek('q', 'a', '7')")
        s2.execute("SELECT pglogq.maint_prune('q')")
        s1.commit()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT 1 FROM pglogq.tick WHERE tick_id = 7").fetchone() is not None
    later = [client.send("q", {"after": i}) for i in range(3)]
    client.tick("q", force=True)
    assert drain(client, "b") == later
    for _ in range(3):
        client.rotate("q", force=True)
        client.tick("q", force=True)
        drain(client, "b")
        client.maintain()
    assert drain(client, "a") == sent[-2:] + later  # ticks 8 and 9, then the new ones


def test_rotation_refuses_when_a_cursor_is_on_a_missing_tick(client: pglogq.Client, dsn: str) -> None:
    """Regression: a consumer whose tick has no row must block rotation, not pass its checks."""
    sent = eight_ticks(client)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.subscription SET last_tick = 5 WHERE consumer_name = 'a'")
        conn.execute("DELETE FROM pglogq.tick WHERE tick_id = 5")
    for _ in range(4):
        assert not client.rotate("q", force=True)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        assert row is not None and row[0] == len(sent)


def test_rotation_refuses_when_an_open_batch_tick_is_missing(client: pglogq.Client, dsn: str) -> None:
    """Regression: the same for the ticks of an open batch (prev and cur)."""
    client.create_queue("q")
    client.subscribe("q", "a")
    client.tick("q", force=True)
    assert drain(client, "a") == []  # a passes the queue's creation: rotation would be allowed
    for i in range(3):
        client.send("q", {"n": i})
        client.tick("q", force=True)
    page = client.receive("q", "a", max_messages=1)
    assert len(page) == 1
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT batch_cur_tick FROM pglogq.subscription WHERE consumer_name = 'a'").fetchone()
        assert row is not None
        conn.execute("DELETE FROM pglogq.tick WHERE tick_id = %s", (row[0],))
    for _ in range(4):
        assert not client.rotate("q", force=True)


# -- hostile review of the maintenance functions (docs/reliability/attacks-keep.md) ------------


def opposite_orders(dsn: str, call: str, first: str, second: str) -> list[object]:
    """Session A runs ``call`` on queue ``first``; session B on ``second`` then on ``first``
    (in a thread: it may block); then A on ``second``.  Both then commit.  Returns the four
    results, an exception in place of a result (40P01 when the two deadlock)."""
    results: list[object] = [None] * 4

    def run(conn: psycopg.Connection[Any], i: int, queue: str) -> None:
        try:
            row = conn.execute(call, (queue,)).fetchone()
            results[i] = row[0] if row else None
        except psycopg.Error as exc:
            results[i] = exc

    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        for conn in (a, b):
            conn.execute("SET lock_timeout = '10s'")
        run(a, 0, first)
        run(b, 1, second)
        t = threading.Thread(target=run, args=(b, 2, first))
        t.start()
        t.join(0.5)
        run(a, 3, second)
        t.join(30)
        for conn in (a, b):
            with contextlib.suppress(psycopg.Error):
                conn.commit()
    return results


def two_queues(client: pglogq.Client, consumers: tuple[str, ...] = ("c",)) -> None:
    for name in ("q1", "q2"):
        client.create_queue(name)
        for c in consumers:
            client.subscribe(name, c)


def test_prune_in_two_sessions_in_opposite_orders_never_deadlocks(client: pglogq.Client, dsn: str) -> None:
    two_queues(client)
    for name in ("q1", "q2"):
        for i in range(5):
            client.send(name, {"n": i})
            client.tick(name, force=True)
        while page := client.receive(name, "c", max_messages=100):
            page.ack()
    results = opposite_orders(dsn, "SELECT pglogq.maint_prune(%s)", "q1", "q2")
    assert not [r for r in results if isinstance(r, Exception)], results


def test_rotation_in_two_sessions_in_opposite_orders_never_deadlocks(client: pglogq.Client, dsn: str) -> None:
    two_queues(client, ())
    results = opposite_orders(dsn, "SELECT pglogq.maint_rotate_step1(%s, true)", "q1", "q2")
    assert not [r for r in results if isinstance(r, Exception)], results
    assert results == [True, True, False, False]  # the busy queue is left for the next pass
    results = opposite_orders(dsn, "SELECT pglogq.maint_rotate_step2(%s)", "q1", "q2")
    assert not [r for r in results if isinstance(r, Exception)], results
    assert results == [True, True, False, False]
    with psycopg.connect(dsn, autocommit=True) as conn:  # both recorded, once
        assert conn.execute("SELECT pglogq.maint_run('rotate_step2', 'q1')").fetchone() == (0,)
    assert client.rotate("q1", force=True) and client.rotate("q2", force=True)


def test_retention_in_two_sessions_in_opposite_orders_never_deadlocks(client: pglogq.Client, dsn: str) -> None:
    two_queues(client, ("stuck",))
    for name in ("q1", "q2"):
        client.set_queue_config(name, "max_consumer_lag", "1 second")
        client.send(name, {"old": True})
        client.tick(name, force=True)
    time.sleep(1.2)
    for name in ("q1", "q2"):
        client.send(name, {"new": True})
        client.tick(name, force=True)
    results = opposite_orders(dsn, "SELECT pglogq.maint_retention(%s)", "q1", "q2")
    assert not [r for r in results if isinstance(r, Exception)], results
    assert results == [1, 1, 0, 0]
    for name in ("q1", "q2"):
        assert [m.payload for m in client.receive(name, "stuck")] == [{"new": True}]


def test_retention_does_not_wait_for_a_consumer_page_transaction(client: pglogq.Client, dsn: str) -> None:
    """A transactional consumer holds its row while it handles a page: retention leaves it for
    the next pass instead of blocking maintenance (and every queue after it) meanwhile."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "max_consumer_lag", "1 second")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    time.sleep(1.2)
    with psycopg.connect(dsn) as page_tx, psycopg.connect(dsn, autocommit=True) as maint:
        page_tx.execute("SELECT * FROM pglogq.receive('q', 'c')")
        maint.execute("SET lock_timeout = '5s'")
        assert maint.execute("SELECT pglogq.maint_retention('q')").fetchone() == (0,)
        page_tx.rollback()
    assert client.maintain()["retention:q"] == 1


def test_pump_racing_drop_queue_is_not_an_internal_error(client: pglogq.Client, dsn: str) -> None:
    """drop_queue(force) in an open transaction while the pump has a due event of that queue:
    the pump waits and leaves the dropped queue out (was XX000 "could not open relation")."""
    client.create_queue("gone")
    client.create_queue("kept")
    client.send("gone", {"n": 1}, delay=timedelta(milliseconds=1))
    kept = client.send("kept", {"n": 2}, delay=timedelta(milliseconds=1))
    client.subscribe("kept", "c")
    time.sleep(0.05)
    out: list[object] = []
    with psycopg.connect(dsn) as dropper:
        dropper.execute("SELECT pglogq.drop_queue('gone', true)")

        def pump() -> None:
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    row = conn.execute("SELECT pglogq.maint_pump()").fetchone()
                    out.append(row[0] if row else None)
            except psycopg.Error as exc:
                out.append(exc)

        t = threading.Thread(target=pump)
        t.start()
        t.join(0.5)
        dropper.commit()
        t.join(30)
    assert out == [1]
    client.tick("kept", force=True)
    assert [m.msg_id for m in client.receive("kept", "c")] == [kept]


def test_maintenance_refuses_bad_input_and_changes_nothing(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for sql, params, code in (
            ("SELECT pglogq.maint_run(NULL, NULL)", (), "PQ019"),
            ("SELECT pglogq.maint_run('vacuum', 'q')", (), "PQ019"),
            ("SELECT pglogq.maint_run('pump', 'q')", (), "PQ019"),
            ("SELECT pglogq.maint_run('prune', NULL)", (), "PQ001"),
            ("SELECT pglogq.maint_run('retention', 'nosuch')", (), "PQ001"),
            ("SELECT pglogq.maint_prune(NULL)", (), "PQ001"),
            ("SELECT pglogq.maint_retention(NULL)", (), "PQ001"),
            ("SELECT pglogq.maint_rotate_step1(NULL, true)", (), "PQ001"),
            ("SELECT pglogq.maint_rotate_step2(%s)", ("x" * 5000,), "PQ001"),
        ):
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql, params)
            assert info.value.sqlstate == code, sql
        assert conn.execute("SELECT pglogq.maint_rotate_step1('q', NULL)").fetchone() == (False,)


def test_maintenance_above_read_committed_deletes_nothing_it_cannot_see(client: pglogq.Client, dsn: str) -> None:
    """A REPEATABLE READ snapshot may predate a seek back: the metadata rotation (the one owner
    of tick removal) and the event rotation do not run (each says so in a WARNING)."""
    eight_ticks(client)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (False,)
        assert conn.execute("SELECT pglogq.maint_rotate_step1('q', true)").fetchone() == (False,)
        conn.rollback()
    with psycopg.connect(dsn, autocommit=True) as conn:
        ticks = "SELECT count(*) FROM pglogq.tick"
        before = conn.execute(ticks).fetchone()
        for _ in range(3):
            client.tick("q", force=True)
            drain(client, "a")
            drain(client, "b")
            assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        after = conn.execute(ticks).fetchone()
        assert before is not None and after is not None and after[0] < before[0]


def test_reinstall_between_rotation_steps_keeps_rotating(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    sent = []
    for _ in range(4):
        sent.append(client.send("q", {"n": len(sent)}))
        client.tick("q", force=True)
        assert [m.msg_id for m in drain_page(client)] == sent[-1:]
        with psycopg.connect(dsn, autocommit=True) as conn:
            # (another session's transaction on a shared server can pin the xmin for a moment)
            def step1() -> bool:
                if conn.execute("SELECT pglogq.maint_rotate_step1('q', true)").fetchone() == (True,):
                    return True
                client.tick("q", force=True)
                drain_page(client)
                return False

            wait_for(step1, "rotation to become safe")
        client.install_schema()
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT pglogq.maint_rotate_step2('q')").fetchone() == (True,)
        client.tick("q", force=True)
        assert drain_page(client) == []
    client.maintain()
    client.seek("q", "c", to="earliest")
    assert drain(client, "c") == sent[-2:]  # the tables of the last two rotations


def drain_page(client: pglogq.Client) -> list[Any]:
    return list(draining.drain(client, "q", "c", page=100))
