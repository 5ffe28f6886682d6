"""Rotation: tables are emptied by TRUNCATE only when no consumer can still need them."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import psycopg
import pytest

import pglogq


def drain(client: pglogq.Client, queue: str, consumer: str) -> list[int]:
    got: list[int] = []
    while True:
        batch = client.receive(queue, consumer, max_messages=500)
        if not batch:
            return got
        got.extend(m.payload["n"] for m in batch)
        batch.ack()


def current_table(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT cur_table FROM pglogq.queue WHERE queue_name = %s", (queue,)).fetchone()
        assert row is not None
        return int(row[0])


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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(len(set(got[c])) < len(sent) for c in consumers):
        time.sleep(0.05)
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
        for _ in range(100):
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT relname, n_dead_tup, n_tup_ins FROM pg_stat_user_tables"
                " WHERE schemaname = 'pglogq' AND relname ~ '^event_[0-9]+_[0-9]+$'"
            ).fetchall()
            if sum(r[2] for r in rows) >= 720:
                break
            time.sleep(0.1)
        assert sum(r[2] for r in rows) >= 720
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
