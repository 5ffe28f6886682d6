"""Measure the dashboard's server time per page on a big queue.

    python -m tests.harness.measure.dashboard [--dsn SERVER_DSN] [--events 1000000] [--dead 10000]
                                              [--repeat 15] [--keep] [--no-analyze]

``--dsn`` names a server (its maintenance database); a scratch database
``pglogq_measure_dashboard`` is made there (kept with ``--keep`` and reused when it already holds
the data), else the embedded PostgreSQL is used.  The queue ``big`` gets ``--events`` stored
events (sent in batches of 10,000 and ticked; one consumer ``lagging`` has read none, so nothing
is rotated away) and ``--dead`` dead letters of the consumer ``failing``.  After the load the
database is ANALYZEd, as autovacuum does within about a minute (``--no-analyze``: measure before
that).  The dashboard is served by uvicorn; each page is fetched ``--repeat`` times and the
server's own time (the app's ``Server-Timing`` header: handler and template, database calls
included) is reported as median and max.  The overview samples anew on every request
(``sample_interval=0``); its stored-events count (``pglogq.stored_events``, which reads the
tables) runs every 30 s and is reported on its own, with the monitoring calls the overview makes.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import urllib.request
from datetime import timedelta

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq
from pglogq.dashboard import create_app
from pglogq.dsn import resolve_dsn
from tests.support.dashboard import serve

DB = "pglogq_measure_dashboard"
QUEUE = "big"


def fill(c: pglogq.Client, events: int, dead: int) -> None:
    c.install_schema()
    c.create_queue(QUEUE)
    c.set_queue_config(QUEUE, "rotation_period", "100 years")
    c.subscribe(QUEUE, "lagging")
    c.subscribe(QUEUE, "failing")
    c.set_queue_config(QUEUE, "max_retries", 1)
    c.set_queue_config(QUEUE, "batch_max_events", 100000)
    t0 = time.perf_counter()
    # the first `dead` events: "failing" nacks them twice (dead letters); the rest it acknowledges
    payloads = [{"order": i, "customer": f"c-{i % 997}", "lines": [{"sku": "A-1", "qty": 1 + i % 5}]}
                for i in range(10000)]
    sent = 0
    while sent < events:
        n = min(10000, events - sent)
        c.send_batch(QUEUE, payloads[:n], type="order.created" if sent else "order.failing")
        sent += n
        if sent == n:
            c.tick(QUEUE, force=True)
            for _ in range(4):
                c.maintain()
                c.tick(QUEUE, force=True)
                while True:
                    batch = c.receive(QUEUE, "failing", max_messages=10000)
                    if not batch:
                        break
                    for m in batch:
                        if m.type == "order.failing" and m.payload["order"] < dead:
                            batch.nack(m, retry_after=timedelta(0), reason="gateway timeout")
                    batch.ack()
    c.tick(QUEUE, force=True)
    print(f"filled in {time.perf_counter() - t0:.0f} s")


def fetch(url: str) -> float:
    with urllib.request.urlopen(url, timeout=120) as r:
        r.read()
        m = re.search(r"dur=([0-9.]+)", r.headers.get("Server-Timing", ""))
        assert r.status == 200 and m, (url, r.status)
        return float(m.group(1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="dashboard server time per page on a big queue")
    ap.add_argument("--dsn")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--dead", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--keep", action="store_true", help="keep the scratch database (and reuse it next time)")
    ap.add_argument("--no-analyze", action="store_true",
                    help="measure before the tables have statistics (right after the bulk load)")
    args = ap.parse_args(argv)
    server = resolve_dsn(args.dsn)
    dsn = make_conninfo(server, dbname=DB)
    with psycopg.connect(server, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB}"')
    try:
        with pglogq.Client(dsn) as c:
            have = c.stored_events(QUEUE) if exists and c.schema_versions() and c.queue_info() else 0
            if have < args.events or c.dlq_count(QUEUE) < args.dead:
                if exists:
                    c.drop_queue(QUEUE, force=True) if c.queue_info() else None
                fill(c, args.events, args.dead)
            if not args.no_analyze:
                # what autovacuum does within about a minute of a bulk load (event tables are
                # auto-analyzed, migration 0009); without statistics queue_info's probe of the
                # events not yet ticked is planned as a scan of the whole table
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("ANALYZE")
            stored, dead = c.stored_events(QUEUE), c.dlq_count(QUEUE)
            some = c.dlq_search(QUEUE, limit=1000)
            mid, dead_id, older = some[0].msg_id, some[0].dead_id, some[-1].dead_id
        print(f"queue {QUEUE}: {stored:,} stored events, {dead:,} dead letters")
        with pglogq.Client(dsn) as c:
            for name, call in (("client.queue_info()", c.queue_info), ("client.consumer_info()", c.consumer_info),
                               ("client.stored_events(big) (the sampler's count)", lambda: c.stored_events(QUEUE))):
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    call()
                    times.append((time.perf_counter() - t0) * 1000)
                print(f"{name:50} median {statistics.median(times):7.1f} ms")
        pages = {
            "overview": "/",
            "queue": f"/queues/{QUEUE}",
            "dead letters, first page (50)": f"/queues/{QUEUE}/dlq",
            "dead letters, page 21 (before=)": f"/queues/{QUEUE}/dlq?before={older}",
            "dead letters, consumer+type filter": f"/queues/{QUEUE}/dlq?consumer=failing&type=order.failing",
            "dead letters, text search": f"/queues/{QUEUE}/dlq?text=c-42",
            "dead letter, whole payload": f"/queues/{QUEUE}/dlq/{dead_id}",
            "bulk confirmation (count)": f"/queues/{QUEUE}/dlq/confirm?op=replay_all&consumer=failing",
            "job lookup by id": f"/lookup?queue={QUEUE}&msg_id={mid}",
            "seek plan": f"/queues/{QUEUE}/seek?consumer=lagging&by_events=1000",
        }
        app = create_app(dsn, sample_interval=0)
        with serve(app) as base:
            fetch(base + "/")  # warm up (pool, templates)
            print(f"{'page':40} {'median ms':>10} {'max ms':>10}")
            for name, path in pages.items():
                times = [fetch(base + path) for _ in range(args.repeat)]
                print(f"{name:40} {statistics.median(times):10.1f} {max(times):10.1f}")
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
