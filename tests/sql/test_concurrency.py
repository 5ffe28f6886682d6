"""Concurrency: one consumer's receives, several tickers, racing registration."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

import pglogq
from tests.support.concurrent import wait_blocked


def test_two_receives_of_one_consumer_get_the_same_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{"n": i} for i in range(10)])
    client.tick("q", force=True)
    results: dict[str, Any] = {}
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        pid = second.info.backend_pid
        page1 = client.receive("q", "c", max_messages=4, conn=first)  # holds the consumer row

        def other() -> None:
            results["page"] = client.receive("q", "c", max_messages=4, conn=second)
            second.commit()

        t = threading.Thread(target=other)
        t.start()
        wait_blocked(dsn, pid)
        first.commit()
        t.join()
    page2 = results["page"]
    assert page1.id == page2.id
    assert [m.msg_id for m in page1] == [m.msg_id for m in page2]


def test_concurrent_receive_and_ack_never_split_or_duplicate(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(2000)])
    client.tick("q", force=True)
    delivered: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        with pglogq.Client(dsn) as c:
            while True:
                with psycopg.connect(dsn) as conn:
                    page = c.receive("q", "c", max_messages=50, conn=conn)
                    if not page:
                        return
                    with lock:
                        delivered.extend(m.msg_id for m in page)
                    page.ack(conn=conn)
                    conn.commit()

    with ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(worker) for _ in range(4)]:
            f.result()
    assert sorted(delivered) == ids
    assert len(delivered) == len(set(delivered))


def test_concurrent_tickers_keep_snapshots_monotonic(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    stop = threading.Event()
    sent: list[int] = []

    def producer() -> None:
        with pglogq.Client(dsn) as p:
            for i in range(300):
                sent.append(p.send("q", {"n": i}))

    def ticker(force: bool) -> None:
        with pglogq.Client(dsn) as t:
            while not stop.is_set():
                t.tick("q", force=force)

    tickers = [threading.Thread(target=ticker, args=(i % 2 == 0,)) for i in range(4)]
    prod = threading.Thread(target=producer)
    for t in [*tickers, prod]:
        t.start()
    prod.join()
    stop.set()
    for t in tickers:
        t.join()
    client.tick("q", force=True)
    with psycopg.connect(dsn) as conn:
        snaps = conn.execute(
            "SELECT tick_id, pg_snapshot_xmin(tick_snapshot)::text::bigint,"
            " pg_snapshot_xmax(tick_snapshot)::text::bigint FROM pglogq.tick ORDER BY tick_id"
        ).fetchall()
    assert len(snaps) > 10
    for (_, xmin1, xmax1), (_, xmin2, xmax2) in itertools.pairwise(snaps):
        assert xmin2 >= xmin1 and xmax2 >= xmax1
    got: list[int] = []
    while True:
        page = client.receive("q", "c", max_messages=1000)
        if not page:
            break
        got.extend(m.msg_id for m in page)
        page.ack()
    assert sorted(got) == sorted(sent)
    assert len(got) == len(set(got))


def test_racing_create_and_subscribe_have_one_winner_and_no_deadlock(dsn: str) -> None:
    barrier = threading.Barrier(8)

    def register(_: int) -> tuple[bool, bool]:
        with pglogq.Client(dsn) as c:
            barrier.wait()
            created = c.create_queue("race")
            subscribed = c.subscribe("race", "c")
            return created, subscribed

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(register, range(8)))
    assert sum(r[0] for r in results) == 1
    assert sum(r[1] for r in results) == 1
