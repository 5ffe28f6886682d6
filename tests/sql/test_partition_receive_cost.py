"""What one receive of a partitioned queue touches does not grow with the partition count.

A round over the partitions takes one receive per partition, so a receive that looks at every
stream (to move the empty ones, or to choose one) makes a drain cost partitions squared.  These
tests count, without timing anything, the stream rows a receive reads (the per-transaction
counters of the holder-state table) and the shared buffers it touches (EXPLAIN (ANALYZE,
BUFFERS) of the call), at 4 and at 256 partitions: in the middle of a drain, and on the first
receive after a tick that brought events to two partitions only."""

from __future__ import annotations

import json
from typing import Any

import psycopg

import pglogq

Conn = psycopg.Connection[Any]


def make_queue(conn: Conn, name: str, partitions: int) -> None:
    with conn.transaction():
        conn.execute("SELECT pglogq.create_queue(%s)", (name,))
        conn.execute("SELECT pglogq.set_queue_config(%s, 'partitions', %s)", (name, str(partitions)))
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (name,))


def send(conn: Conn, queue: str, keys: list[str]) -> None:
    conn.execute("SELECT pglogq.send_batch_keyed(%s, %s::jsonb, %s)",
                 (queue, json.dumps([{"k": k} for k in keys]), keys))
    conn.execute("SELECT pglogq.force_tick(%s)", (queue,))


def receive_ack(conn: Conn, queue: str) -> int:
    page = conn.execute("SELECT batch_id, msg_id, txid FROM pglogq.receive(%s, 'c', 10, 'w')", (queue,)).fetchall()
    if page:
        conn.execute("SELECT pglogq.ack(%s, %s, %s)", page[-1])
    return len(page)


def measured_receive(conn: Conn, queue: str) -> tuple[int, int, int]:
    """(stream-state rows read, shared buffers touched, events returned) of one receive + its ack."""
    rows_read = (
        "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)"
        "  FROM pg_stat_xact_user_tables WHERE schemaname = 'pglogq' AND relname LIKE 'sub_state%'")
    with conn.transaction():
        # the session's counters not yet sent to the statistics are in the view too: the
        # difference across the call, in one transaction, is the call's
        before = conn.execute(rows_read).fetchone()
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pglogq.receive(%s, 'c', 10, 'w')",
            (queue,)).fetchone()
        after = conn.execute(rows_read).fetchone()
    assert plan is not None and before is not None and after is not None
    top = plan[0][0]["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    n = receive_ack(conn, queue)  # the page EXPLAIN handed out comes again: acknowledge it
    return int(after[0]) - int(before[0]), buffers, n


def costs(conn: Conn, partitions: int) -> dict[str, tuple[int, int, int]]:
    queue = f"cost{partitions}"
    make_queue(conn, queue, partitions)
    # three events in every partition (keys placed by the server's hash, as the client computes it), ticked once
    keys: list[str] = []
    seen: dict[int, int] = {}
    i = 0
    while len(keys) < 3 * partitions:
        k = f"k{i}"
        i += 1
        part = pglogq.key_partition(k, partitions)
        if seen.get(part, 0) < 3:
            seen[part] = seen.get(part, 0) + 1
            keys.append(k)
    send(conn, queue, keys)
    got = 0
    for _ in range(partitions // 2):  # half the partitions drained
        got += receive_ack(conn, queue)
    middle = measured_receive(conn, queue)
    got += middle[2]
    while (n := receive_ack(conn, queue)) > 0:
        got += n
    assert got == 3 * partitions
    # nothing left; a tick brings two events to two partitions
    send(conn, queue, keys[:1] + [k for k in keys if k != keys[0]][:1])
    after_tick = measured_receive(conn, queue)
    assert after_tick[2] >= 1
    while receive_ack(conn, queue) > 0:
        pass
    idle = measured_receive(conn, queue)
    assert idle[2] == 0
    return {"middle": middle, "after_tick": after_tick, "idle": idle}


def test_a_receive_touches_the_same_whatever_the_partition_count(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        small = costs(conn, 4)
        big = costs(conn, 256)
    for moment in ("middle", "after_tick", "idle"):
        rows4, buf4, _ = small[moment]
        rows256, buf256, _ = big[moment]
        # the same work (a page of 10 events, or nothing) whatever the partition count: a few
        # rows and buffers more at most (a deeper index), never one per partition
        assert rows256 <= rows4 + 8, (moment, small, big)
        assert buf256 <= 2 * buf4 + 40, (moment, small, big)
