"""Rotation: tables are emptied by TRUNCATE only when no consumer can still need them."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

import pglogq
from tests.support import draining
from tests.support.db import current_table
from tests.support.waiting import wait_for


def drain(client: pglogq.Client, queue: str, consumer: str) -> list[int]:
    """The payloads' ``n``, in delivery order."""
    return [m.payload["n"] for m in draining.drain(client, queue, consumer)]


def test_rotation_waits_for_the_slowest_consumer(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "fast")
    client.subscribe("q", "slow")
    client.send("q", {"n": 0})
    client.tick("q", force=True)
    assert drain(client, "q", "fast") == [0]
    rotations = 0
    for n in range(1, 6):
        client.send("q", {"n": n})
        client.tick("q", force=True)
        drain(client, "q", "fast")
        rotations += client.rotate("q")
    # the slow consumer has read nothing: at most the tables it does not need were rotated
    assert rotations <= 1
    assert drain(client, "q", "slow") == [0, 1, 2, 3, 4, 5]


def test_repeatable_read_producer_across_rotation_loses_nothing(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)
    assert drain(client, "q", "c") == []  # the consumer passes the queue's creation
    with psycopg.connect(dsn) as rr:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT count(*) FROM pglogq.queue")  # the snapshot predates the rotation
        before = current_table(dsn, "q")
        assert client.rotate("q")  # step 1 and step 2, each committed
        assert current_table(dsn, "q") != before
        client.send("q", {"n": 1}, conn=rr)  # writes into the table its old snapshot calls current
        rr.commit()
    # later rotations must not truncate the table that holds the unread event
    for _ in range(4):
        client.tick("q", force=True)
        client.rotate("q")
    client.tick("q", force=True)
    assert drain(client, "q", "c") == [1]


def test_repeatable_read_producer_idle_across_two_rotations_loses_nothing(
    client: pglogq.Client, dsn: str
) -> None:
    """The snapshot predates two rotations; the send lands in the table that is next to be
    truncated, after every consumer passed the last switch: the exact unread check must hold."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)
    drain(client, "q", "c")
    with psycopg.connect(dsn) as rr:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT count(*) FROM pglogq.queue")
        old = current_table(dsn, "q")
        for _ in range(2):
            client.send("q", {"n": 0})
            client.tick("q", force=True)
            drain(client, "q", "c")
            client.tick("q", force=True)
            drain(client, "q", "c")
            assert client.rotate("q")
        assert (current_table(dsn, "q") + 1) % 3 == old  # the RR table is next to be emptied
        client.tick("q", force=True)
        drain(client, "q", "c")  # the consumer is past the last switch
        client.send("q", {"n": 1}, conn=rr)
        rr.commit()
    client.tick("q", force=True)
    for _ in range(3):
        assert not client.rotate("q")  # refused: the consumer has not read the event yet
    assert drain(client, "q", "c") == [1]
    client.tick("q", force=True)
    drain(client, "q", "c")
    assert client.rotate("q")  # read: now it may go


def test_concurrent_producers_consumers_and_rotation_lose_nothing(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    consumers = ["a", "b"]
    for c in consumers:
        client.subscribe("q", c)
    stop = threading.Event()
    sent: list[int] = []
    sent_lock = threading.Lock()
    rotations = [0]
    errors: list[BaseException] = []

    def producer(base: int) -> None:
        try:
            with pglogq.Client(dsn) as p:
                for i in range(400):
                    n = base + i
                    if i % 3 == 0:
                        with psycopg.connect(dsn) as rr:
                            rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                            rr.execute("SELECT 1 FROM pglogq.queue")
                            time.sleep(0.001)
                            p.send("q", {"n": n}, conn=rr)
                            rr.commit()
                    else:
                        p.send("q", {"n": n})
                    with sent_lock:
                        sent.append(n)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def ticker() -> None:
        with pglogq.Client(dsn) as t:
            while not stop.is_set():
                t.tick("q", force=True)
                if t.rotate("q"):
                    rotations[0] += 1
                time.sleep(0.005)

    got: dict[str, list[int]] = defaultdict(list)

    def consumer(name: str) -> None:
        with pglogq.Client(dsn) as c:
            while not stop.is_set():
                got[name].extend(drain(c, "q", name))
                time.sleep(0.002)

    threads = [threading.Thread(target=producer, args=(k * 100000,)) for k in range(3)]
    others = [threading.Thread(target=ticker)] + [threading.Thread(target=consumer, args=(c,)) for c in consumers]
    for t in threads + others:
        t.start()
    for t in threads:
        t.join()
    with contextlib.suppress(AssertionError):  # the asserts below name the consumer that lost events
        wait_for(lambda: all(len(set(got[c])) >= len(sent) for c in consumers), "every consumer to catch up")
    stop.set()
    for t in others:
        t.join()
    assert not errors
    client.tick("q", force=True)
    for c in consumers:
        got[c].extend(drain(client, "q", c))
        assert sorted(got[c]) == sorted(sent), f"consumer {c}"
    assert rotations[0] >= 3


def test_event_tables_have_no_dead_tuples_after_produce_consume_with_rotations(
    client: pglogq.Client, dsn: str
) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    rotated = 0
    for round_ in range(6):
        client.send_batch("q", [{"n": round_ * 100 + i} for i in range(100)])
        for i in range(20):
            client.send("q", {"n": 10000 + round_ * 100 + i})
        client.tick("q", force=True)
        assert len(drain(client, "q", "c")) == 120
        client.tick("q", force=True)
        rotated += client.rotate("q")
    assert rotated >= 3
    client.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        # statistics reach the shared counters when the writing backends go idle or exit
        def event_table_stats() -> list[tuple[Any, ...]]:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT relname, n_dead_tup, n_tup_ins FROM pg_stat_user_tables"
                " WHERE schemaname = 'pglogq' AND relname ~ '^event_[0-9]+_[0-9]+$'"
            ).fetchall()
            return rows if sum(r[2] for r in rows) >= 720 else []

        rows = wait_for(event_table_stats, "the statistics of 720 inserts", interval=0.1)
        assert [r for r in rows if r[1] != 0] == []


@pytest.mark.parametrize("big", [False, True])
def test_large_batch_is_paged_not_loaded_at_once(client: pglogq.Client, dsn: str, big: bool) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    if big:
        client.set_queue_config("q", "big_batch_events", 1000)
    ids: list[int] = []
    for k in range(5):
        ids += client.send_batch("q", [{"n": k * 1000 + i} for i in range(1000)])
    client.tick("q", force=True)
    seen: list[int] = []
    batch_ids = set()
    while True:
        page = client.receive("q", "c", max_messages=700)
        if not page:
            break
        assert len(page) <= 700
        batch_ids.add(page.id)
        seen.extend(m.msg_id for m in page)
        page.ack()
    assert seen == ids
    assert len(batch_ids) == 1


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
        draining.drain(client, "q", "c")

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


@pytest.mark.parametrize("kind", ["open", "prepared"])
def test_a_transaction_in_another_database_holds_rotation_back_and_is_named(
        client: Any, new_db: Callable[[], str], kind: str) -> None:
    """Tick snapshots are server-wide: a transaction holding an xid in ANOTHER database of the
    server (open, or prepared and never committed) holds this database's rotation back too.
    queue_info().rotation_blocked_by names it with its database and its xid age, so that an
    operator looking from this database can find it (it named the pid or gid only, with no hint
    that it was not in this database).  The transaction is always ended in ``finally``: left
    open it would hold back every rotation of the server."""
    other = new_db()  # another database of the same server
    other_name = psycopg.conninfo.conninfo_to_dict(other)["dbname"]
    gid = f"pglogq-blocker-{uuid.uuid4()}"
    client.create_queue("q")
    client.subscribe("q", "c")
    # short: the transaction holds back every rotation of the server, so the test holds it only
    # until rotation is overdue (two periods) and queue_info names it
    client.set_queue_config("q", "rotation_period", "100 ms")

    def tick_and_drain() -> None:
        client.tick("q", force=True)
        draining.drain(client, "q", "c")

    client.send("q", {"first": True})
    tick_and_drain()
    client.rotate("q")
    tick_and_drain()
    assert client.rotate("q") is True
    holder = psycopg.connect(other, autocommit=True)
    try:
        if kind == "prepared" and holder.execute("SHOW max_prepared_transactions").fetchone() == ("0",):
            pytest.skip("max_prepared_transactions = 0 on this server (the embedded test server enables it)")
        holder.execute("BEGIN")
        holder.execute("SELECT pg_current_xact_id()")  # a transaction with an xid, over there
        if kind == "prepared":
            holder.execute(f"PREPARE TRANSACTION '{gid}'")
            expected = f"""prepared transaction '{gid}' in database "{other_name}" since """
        else:
            expected = f'transaction of pid {holder.info.backend_pid} in database "{other_name}" (xid age '
        tick_and_drain()
        client.rotate("q")  # the step before the one the transaction holds back
        client.send("q", {"second": True})
        tick_and_drain()
        assert client.rotate("q") is False  # refused: the consumer is caught up, the transaction is not
        blocked = wait_for(lambda: client.queue_info("q")[0].rotation_blocked_by,
                           "rotation_blocked_by (it speaks up after two rotation periods)")
        assert blocked.startswith(expected) and "xid age" in blocked, blocked
    finally:
        # synchronous (closing alone ends a transaction a moment later), and in that database:
        # a prepared transaction can be ended only there, and outlives the connection
        holder.execute("ROLLBACK")
        if holder.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
            holder.execute(f"ROLLBACK PREPARED '{gid}'")
        holder.close()
    tick_and_drain()
    assert client.rotate("q") is True


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
        draining.drain(client, "q", "c")

    client.send("q", {"n": 1})
    tick_and_drain()
    client.rotate("q")
    tick_and_drain()
    reader = psycopg.connect(dsn)
    reader.execute("SELECT count(*) FROM pglogq.event")  # ACCESS SHARE on every child, held

    stop = threading.Event()

    def commit_when_rotation_waits() -> None:
        with psycopg.connect(dsn, autocommit=True) as watch:
            wait_for(lambda: stop.is_set() or watch.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND mode = 'AccessExclusiveLock'"
            ).fetchone() != (0,), "rotation to wait for its lock", timeout=180, interval=0.01)
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
