"""Metadata growth under a held snapshot, quick version.

A REPEATABLE READ transaction takes its snapshot and stays open (the xmin horizon is held); then
``--events`` events go through send_batch / tick / receive / ack with three consumers, one of them
a pair of cooperating workers, with the maintenance run every ``--maintain-every`` events (the
event tables' rotation forced, and the metadata epoch switched where the schema has one).  Prints
the size and the dead tuples of every pglogq table other than the event tables, before and after,
and the dead tuples of the event tables.  The 5- and 30-minute timed runs are the benchmark's
``held_xmin`` scenario; this one only counts what the engine leaves behind.  ``--history``: every
page is acknowledged as the consumer runtime does with the outcome log on (its runs recorded in
the statement of the ack, ``pglogq._outcomes.page_params``'s shape), and each maintenance run also
switches the log's epoch (``maint_rotate_history``).

    python -m tests.harness.measure.metadata --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq

HOLDERS = (("a", None), ("b", None), ("c", "w1"), ("c", "w2"))

TABLES = """
SELECT c.relname, pg_total_relation_size(c.oid)::bigint,
       coalesce(pg_stat_get_dead_tuples(c.oid), 0)::bigint
  FROM pg_class c
 WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind = 'r'
 ORDER BY c.relname
"""


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    time.sleep(1.2)  # backends report their dead tuples to the statistics at most once a second
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {name: (size, dead) for name, size, dead in conn.execute(TABLES).fetchall()}


def split(tables: dict[str, tuple[int, int]]) -> tuple[int, int, int]:
    meta = [v for k, v in tables.items() if not k.startswith("event_")]
    events = [v for k, v in tables.items() if k.startswith("event_")]
    return sum(s for s, _ in meta), sum(d for _, d in meta), sum(d for _, d in events)


def ack_with_outcomes(conn: psycopg.Connection[Any], page: pglogq.Batch) -> None:
    """Acknowledge ``page`` with its runs recorded as one group, as the runtime sends a page of
    plain runs (``ACK_GROUP``, arrays in binary)."""
    from pglogq import _outcomes as o
    from pglogq import _queries as q

    ms = page.messages
    now = time.time()
    last = ms[-1]
    params = (page.id, o._Int8Array(o._eight_byte_array([m.msg_id for m in ms], "q", 20)),
              o._Float8Array(o._eight_byte_array([now] * len(ms), "d", 701)),
              o._Float8Array(o._eight_byte_array([now] * len(ms), "d", 701)), None, None,
              min(m.msg_id for m in ms), max(m.msg_id for m in ms), now, now, page.id, last.msg_id, last.txid)
    with conn.cursor() as cur:
        for cls, dumper in o._DUMPERS:
            cur.adapters.register_dumper(cls, dumper)
        cur.execute(q.ACK_GROUP, params, prepare=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="a server to create a scratch database in")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=100, help="events per send_batch (one tick each)")
    ap.add_argument("--page", type=int, default=50, help="max_messages of each receive")
    ap.add_argument("--maintain-every", type=int, default=2000, help="events between maintenance runs")
    ap.add_argument("--history", action="store_true", help="record each page's outcomes with its ack")
    args = ap.parse_args()
    name = "pglogq_meta_" + uuid.uuid4().hex[:8]
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = make_conninfo(args.dsn, dbname=name)
    try:
        with pglogq.Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn, \
                psycopg.connect(dsn) as held:
            client.install_schema()
            client.create_queue("q")
            for consumer in ("a", "b", "c"):
                client.subscribe("q", consumer)
            has_meta = conn.execute("SELECT to_regproc('pglogq.maint_rotate_meta') IS NOT NULL").fetchone()
            before = snapshot(conn)
            held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT 1")  # the snapshot: held until the end
            sent = received = 0
            started = time.monotonic()
            while sent < args.events:
                client.send_batch("q", [{"n": sent + k} for k in range(args.batch)])
                sent += args.batch
                client.tick("q", force=True)
                for consumer, worker in HOLDERS:
                    while page := client.receive("q", consumer, worker=worker, max_messages=args.page):
                        received += len(page)
                        if args.history:
                            ack_with_outcomes(conn, page)
                        else:
                            page.ack()
                if sent % args.maintain_every == 0:
                    client.maintain()
                    client.rotate("q", force=True)
                    if has_meta and has_meta[0]:
                        conn.execute("SELECT pglogq.maint_rotate_meta(true)")
                    if args.history:
                        conn.execute("SELECT pglogq.maint_rotate_history(true)")
            elapsed = time.monotonic() - started
            after = snapshot(conn)
            held.rollback()
        size0, dead0, _ = split(before)
        size1, dead1, event_dead = split(after)
        print(f"{sent} events sent, {received} received in {elapsed:.1f} s, snapshot held throughout")
        print(f"metadata (all pglogq tables but the event tables): {size0 / 1e6:.2f} MB -> {size1 / 1e6:.2f} MB "
              f"(+{(size1 - size0) / 1e6:.2f} MB), dead tuples {dead0} -> {dead1}; event tables: {event_dead} dead")
        for table, (size, dead) in after.items():
            if not table.startswith("event_") and (size != before.get(table, (0, 0))[0] or dead):
                print(f"  {table:24} {before.get(table, (0, 0))[0]:>10} -> {size:>10} bytes, {dead} dead")
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


if __name__ == "__main__":
    main()
