"""Measure what a partitioned queue costs per receive and per drain, by partition count.

    python -m tests.harness.measure.partitions --dsn DSN [--events 20000] [--partitions 1,16,256,1024]

``--dsn`` names a server (its maintenance database); a scratch database
``pglogq_bench_partitions`` is created there, used and dropped.  For each partition count: a new
queue with one consumer, ``--events`` keyed events (one key per event, so they spread over every
partition) sent and ticked once, then drained by one worker: receive pages of 100 and
acknowledge each, until receive returns nothing.  Reported per count: the drain's wall time,
the receives it took, and the shared buffers (hit + read) of a receive of the drain's middle
(pg_stat_statements is not needed: the buffers are read from ``EXPLAIN (ANALYZE, BUFFERS)`` of
the receive statement, whose plan is one function scan that counts everything the function
touched).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq

DB = "pglogq_bench_partitions"


def receive_buffers(conn: psycopg.Connection[Any], queue: str) -> tuple[int, list[tuple[Any, ...]]]:
    """One receive under EXPLAIN (ANALYZE, BUFFERS): the shared buffers it touched, and its page."""
    plan = conn.execute(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pglogq.receive(%s, 'c', 100, 'w')",
        (queue,)).fetchone()
    assert plan is not None
    top = plan[0][0]["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    # the page the EXPLAIN handed out is this worker's: receive it again (the same page) to ack it
    page = conn.execute("SELECT batch_id, msg_id, txid FROM pglogq.receive(%s, 'c', 100, 'w')",
                        (queue,)).fetchall()
    return buffers, page


def one_point(conn: psycopg.Connection[Any], partitions: int, events: int) -> dict[str, Any]:
    queue = f"p{partitions}"
    with conn.transaction():
        conn.execute("SELECT pglogq.create_queue(%s)", (queue,))
        conn.execute("SELECT pglogq.set_queue_config(%s, 'partitions', %s)", (queue, str(partitions)))
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (queue,))
    for start in range(0, events, 5000):
        n = min(5000, events - start)
        keys = [f"k{start + i}" for i in range(n)]
        conn.execute("SELECT pglogq.send_batch_keyed(%s, %s::jsonb, %s)",
                     (queue, json.dumps([{"i": start + i} for i in range(n)]), keys))
    conn.execute("SELECT pglogq.force_tick(%s)", (queue,))
    got = receives = 0
    middle: int | None = None
    began = time.perf_counter()
    while True:
        if middle is None and got >= events // 2:
            middle, page = receive_buffers(conn, queue)
        else:
            page = conn.execute("SELECT batch_id, msg_id, txid FROM pglogq.receive(%s, 'c', 100, 'w')",
                                (queue,)).fetchall()
        receives += 1
        if not page:
            break
        got += len(page)
        conn.execute("SELECT pglogq.ack(%s, %s, %s)", page[-1])
    took = time.perf_counter() - began
    assert got == events, (got, events)
    conn.execute("SELECT pglogq.drop_queue(%s, true)", (queue,))
    return {"partitions": partitions, "events": events, "seconds": round(took, 3),
            "events_per_s": round(events / took), "receives": receives, "buffers_mid_receive": middle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--partitions", default="1,16,256,1024")
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DB}"')
    dsn = make_conninfo(args.dsn, dbname=DB)
    try:
        with pglogq.Client(dsn) as c:
            c.install_schema()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for p in (int(x) for x in re.split(r"[, ]+", args.partitions.strip())):
                print(json.dumps(one_point(conn, p, args.events)), flush=True)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')


if __name__ == "__main__":
    main()
