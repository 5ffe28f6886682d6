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
switches the log's epoch (``maint_rotate_history``); without it the queue's ``history_retention``
is 0 (the log off).  :func:`measure` is the run, for the benchmark's history scenario.

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


def measure(server_dsn: str, events: int = 20000, batch: int = 100, page: int = 50, maintain_every: int = 2000,
            history: bool = False) -> dict[str, Any]:
    """One run in a scratch database on ``server_dsn`` (made and dropped): what the metadata
    tables hold before and after ``events`` events went through under a held snapshot.  Returns
    sent, received, seconds, size_before, size_after (bytes), dead_before, dead_after (metadata
    tuples), event_dead, and tables: each metadata table's (size before, size after, dead after)."""
    name = "pglogq_meta_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = make_conninfo(server_dsn, dbname=name)
    try:
        with pglogq.Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn, \
                psycopg.connect(dsn) as held:
            client.install_schema()
            client.create_queue("q")
            for consumer in ("a", "b", "c"):
                client.subscribe("q", consumer)
            if not history:
                client.set_queue_config("q", "history_retention", "0")
            has_meta = conn.execute("SELECT to_regproc('pglogq.maint_rotate_meta') IS NOT NULL").fetchone()
            before = snapshot(conn)
            held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT 1")  # the snapshot: held until the end
            sent = received = 0
            started = time.monotonic()
            while sent < events:
                client.send_batch("q", [{"n": sent + k} for k in range(batch)])
                sent += batch
                client.tick("q", force=True)
                for consumer, worker in HOLDERS:
                    while got := client.receive("q", consumer, worker=worker, max_messages=page):
                        received += len(got)
                        if history:
                            ack_with_outcomes(conn, got)
                        else:
                            got.ack()
                if sent % maintain_every == 0:
                    client.maintain()
                    client.rotate("q", force=True)
                    if has_meta and has_meta[0]:
                        conn.execute("SELECT pglogq.maint_rotate_meta(true)")
                    if history:
                        conn.execute("SELECT pglogq.maint_rotate_history(true)")
            elapsed = time.monotonic() - started
            after = snapshot(conn)
            held.rollback()
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
    size0, dead0, _ = split(before)
    size1, dead1, event_dead = split(after)
    tables = {t: (before.get(t, (0, 0))[0], size, dead) for t, (size, dead) in after.items()
              if not t.startswith("event_")}
    return {"sent": sent, "received": received, "seconds": elapsed, "size_before": size0, "size_after": size1,
            "dead_before": dead0, "dead_after": dead1, "event_dead": event_dead, "tables": tables}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="a server to create a scratch database in")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=100, help="events per send_batch (one tick each)")
    ap.add_argument("--page", type=int, default=50, help="max_messages of each receive")
    ap.add_argument("--maintain-every", type=int, default=2000, help="events between maintenance runs")
    ap.add_argument("--history", action="store_true", help="record each page's outcomes with its ack")
    args = ap.parse_args()
    r = measure(args.dsn, args.events, args.batch, args.page, args.maintain_every, args.history)
    size0, size1 = r["size_before"], r["size_after"]
    print(f"{r['sent']} events sent, {r['received']} received in {r['seconds']:.1f} s, snapshot held throughout")
    print(f"metadata (all pglogq tables but the event tables): {size0 / 1e6:.2f} MB -> {size1 / 1e6:.2f} MB "
          f"(+{(size1 - size0) / 1e6:.2f} MB), dead tuples {r['dead_before']} -> {r['dead_after']}; "
          f"event tables: {r['event_dead']} dead")
    for table, (was, size, dead) in r["tables"].items():
        if size != was or dead:
            print(f"  {table:24} {was:>10} -> {size:>10} bytes, {dead} dead")


if __name__ == "__main__":
    main()
