"""Measure job lookup and the paged job list on a queue of a million events.

    python -m tests.harness.measure.jobs [--dsn DSN] [--events 1000000] [--repeat 20]

``--dsn`` names a server (its maintenance database); a scratch database ``pglogq_bench_jobs`` is
created there, used and dropped.  Without it the embedded PostgreSQL is used.

The queue gets ``--events`` events (in batches of 10,000 sends, ticked every batch), two
consumers: ``fast`` has read and acknowledged everything but the last 1,000 events (a page of
100 of them in flight with progress reported), ``slow`` has read nothing; 200 events were nacked
by ``fast`` (100 retries pending, 100 dead letters).  Then each read is timed ``--repeat``
times (median and max, in ms, as the client sees it):

* ``lookup`` of the first, a middle and the last event, and of an id the queue never stored
  (rolled back);
* ``jobs`` first page (100 rows) of every state, the page after a cursor half-way through the
  slow consumer's million waiting events, a page of one state, and a page of a rare type.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq

DB = "pglogq_bench_jobs"


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    out = fn()  # warm up (plans, cache)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times), out


def build(client: pglogq.Client, dsn: str, events: int) -> dict[str, int]:
    client.create_queue("big")
    client.subscribe("big", "fast")
    client.subscribe("big", "slow")
    ids: list[int] = []
    chunk = 10_000
    t0 = time.perf_counter()
    for start in range(0, events, chunk):
        n = min(chunk, events - start)
        kind = "rare" if start == events // 2 else "report"
        ids += client.send_batch("big", [{"n": start + i} for i in range(n)], type=kind)
        client.tick("big", force=True)
    print(f"sent {len(ids):,} events in {time.perf_counter() - t0:.1f} s")
    # fast: read everything but the last 1,000, nacking 200 on the way (mail: retry, others: dead)
    left = events - 1000
    read = 0
    while read < left:
        batch = client.receive("big", "fast", max_messages=min(10_000, left - read))
        if not batch:
            break
        if read == 0:  # 100 retries pending, then (no retry for reports any more) 100 dead letters
            for m in batch.messages[:100]:
                client.nack(m, reason="no template", retry_after=None)
            client.set_type_config("big", "report", "max_retries", 0)
            for m in batch.messages[100:200]:
                client.nack(m, reason="no data")
        read += len(batch)
        batch.ack()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.dead_letter SET ev_type = 'mail' WHERE dead_id % 2 = 0")
    page = client.receive("big", "fast", max_messages=100)
    for m in page.messages[:10]:
        client.report_progress(page.id, m.msg_id, percent=50, stage="rendering", worker="w1")  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")
    with psycopg.connect(dsn) as conn:
        rolled = conn.execute("SELECT pglogq.send('big', '{}')").fetchone()
        conn.rollback()
    assert rolled is not None
    return {"first": ids[0], "middle": ids[len(ids) // 2], "last": ids[-1], "rolled_back": rolled[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help=f"keep the database {DB} afterwards (to inspect plans)")
    args = ap.parse_args()
    if args.dsn:
        admin = args.dsn
    else:
        from pglogq.embedded import embedded_dsn

        admin = embedded_dsn()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    dsn = make_conninfo(admin, dbname=DB)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
            ids = build(client, dsn, args.events)
            rows: list[tuple[str, float, float, str]] = []

            def run(what: str, fn: Callable[[], Any], show: Callable[[Any], str]) -> Any:
                med, worst, out = timed(fn, args.repeat)
                rows.append((what, med, worst, show(out)))
                return out

            def states(js: list[pglogq.JobState]) -> str:
                return ", ".join(f"{j.consumer}={j.state}" for j in js)

            def lookup(mid: int) -> Callable[[], list[pglogq.JobState]]:
                return lambda: client.lookup("big", mid)

            for name, mid in ids.items():
                run(f"lookup {name} event ({mid})", lookup(mid), states)
            page = run("jobs: first page, all states (100 rows)", lambda: client.jobs("big"),
                       lambda js: f"{len(js)} rows")
            run("jobs --state in-flight", lambda: client.jobs("big", state="in-flight"), lambda js: f"{len(js)} rows")
            run("jobs --state retry", lambda: client.jobs("big", state="retry"), lambda js: f"{len(js)} rows")
            run("jobs --state dead --type mail", lambda: client.jobs("big", state="dead", type="mail"),
                lambda js: f"{len(js)} rows")
            run("jobs --consumer fast --state waiting", lambda: client.jobs("big", "fast", state="waiting"),
                lambda js: f"{len(js)} rows")
            with psycopg.connect(dsn) as conn:  # the cursor of the middle event (as a page ending there has)
                txid = conn.execute("SELECT ev_txid::text FROM pglogq.event WHERE ev_id = %s",
                                    (ids["middle"],)).fetchone()
            assert txid is not None
            cursor = f"slow/5/{txid[0]}/{ids['middle']}"
            run("jobs --consumer slow: page after a cursor half-way", lambda: client.jobs(
                "big", "slow", state="waiting", after=cursor), lambda js: f"{len(js)} rows from {js[0].msg_id}")
            run("jobs --consumer slow --type rare (10,000 in the middle)", lambda: client.jobs(
                "big", "slow", type="rare", state="waiting"), lambda js: f"{len(js)} rows")
            assert page
    finally:
        if not args.keep:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    print(f"\n{'read':60} {'median ms':>10} {'max ms':>10}  result")
    for what, med, worst, out in rows:
        print(f"{what:60} {med:10.2f} {worst:10.2f}  {out}")


if __name__ == "__main__":
    main()
