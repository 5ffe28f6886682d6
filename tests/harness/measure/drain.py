"""The SQL-level drain, CPU per event: this checkout's engine, another version's and PgQue's.

    git archive main | tar -x -C /tmp/before
    python -m tests.harness.measure.drain --before /tmp/before --dsn postgresql://... --rounds 3

Scratch databases on one server: one with the schema of the ``--before`` checkout (its
``pglogq`` package, imported in a child process), one with this checkout's, one with PgQue
(its single install file, found as the benchmark finds it: ``tests/harness/bench/systems/
pgque_system.py``; left out when it is not found).  Each gets the benchmark's consume backlog
(``--events`` of the bench payload, sent in batches of 1,000, a tick every ``--tick-every``)
once, with a consumer per drain to come, so every drain reads the same events from the same
place.  Then rounds: each drain of a round (the order flips between rounds) drains one consumer
to empty on one connection, the benchmark's way (``tests/harness/bench/systems/``): pglogq
``receive(max_messages => page)`` / ``ack`` per page, PgQue ``next_batch`` /
``get_batch_events`` / ``finish_batch`` per batch; the payload read as text, decoded with
``json.loads`` (``--no-decode``: not decoded).

What it reports per drain, medians over the rounds: the server's CPU per event (the backend's
run time from ``/proc/<pid>/schedstat``: it needs the server on this machine), this process's
CPU per event, their sum, and the wall-clock rate.  On a machine shared with other work the
wall-clock rate moves with the load; the CPU figures much less, which is why they are the ones
to compare.  Speed is measured, never asserted: no test calls this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.harness.bench import payload
from tests.harness.bench.systems.pgque_system import find_sql

QUEUE = "drain"


def install(dsn: str, checkout: Path) -> None:
    """Install the schema of ``checkout`` into ``dsn`` (a child process imports its package)."""
    code = "import sys, pglogq; pglogq.Client(sys.argv[1]).install_schema()"
    subprocess.run([sys.executable, "-c", code, dsn], check=True, cwd=checkout,
                   env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"})


def preload_pglogq(dsn: str, events: int, tick_every: int, consumers: list[str]) -> None:
    body = json.dumps([payload.make(i) for i in range(1000)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue(%s)", (QUEUE,))
        for c in consumers:
            conn.execute("SELECT pglogq.subscribe(%s, %s)", (QUEUE, c))
        sent = since = 0
        while sent < events:
            conn.execute("SELECT pglogq.send_batch_json(%s, %s::jsonb)", (QUEUE, body))
            sent += 1000
            since += 1000
            if since >= tick_every:
                conn.execute("SELECT pglogq.force_tick(%s)", (QUEUE,))
                since = 0
        conn.execute("SELECT pglogq.force_tick(%s)", (QUEUE,))
        conn.execute("VACUUM ANALYZE")


def preload_pgque(dsn: str, install_sql: str, events: int, tick_every: int, consumers: list[str]) -> None:
    chunk = [Jsonb(payload.make(i)) for i in range(1000)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(install_sql.encode())
        conn.execute("SELECT pgque.create_queue(%s)", (QUEUE,))
        for c in consumers:
            conn.execute("SELECT pgque.subscribe(%s, %s)", (QUEUE, c))

        def tick() -> None:
            conn.execute("SELECT pgque.force_next_tick(%s)", (QUEUE,))
            conn.execute("SELECT pgque.ticker(%s)", (QUEUE,))

        sent = since = 0
        while sent < events:
            conn.execute("SELECT pgque.send_batch(%s, %s::jsonb[])", (QUEUE, chunk))
            sent += 1000
            since += 1000
            if since >= tick_every:
                tick()
                since = 0
        tick()
        conn.execute("VACUUM ANALYZE")


def drain_pglogq(conn: psycopg.Connection[tuple[object, ...]], consumer: str, page: int,
                 decode: Callable[[str], object] | None) -> int:
    n = 0
    while rows := conn.execute("SELECT batch_id, msg_id, payload::text FROM pglogq.receive(%s, %s, %s)",
                               (QUEUE, consumer, page)).fetchall():
        if decode is not None:
            for row in rows:
                decode(str(row[2]))
        n += len(rows)
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    return n


def drain_pgque(conn: psycopg.Connection[tuple[object, ...]], consumer: str, page: int,
                decode: Callable[[str], object] | None) -> int:
    n = 0
    while True:
        row = conn.execute("SELECT pgque.next_batch(%s, %s)", (QUEUE, consumer)).fetchone()
        if row is None or row[0] is None:
            return n
        rows = conn.execute("SELECT ev_id, ev_data FROM pgque.get_batch_events(%s)", (row[0],)).fetchall()
        if decode is not None:
            for r in rows:
                decode(str(r[1]))
        n += len(rows)
        conn.execute("SELECT pgque.finish_batch(%s)", (row[0],))


def measured(dsn: str, drain: Callable[..., int], consumer: str, page: int,
             decode: Callable[[str], object] | None) -> tuple[int, float, float, float]:
    """(events, server CPU s, client CPU s, wall s) of one drain to empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        stat = Path(f"/proc/{conn.info.backend_pid}/schedstat")
        s0, c0, t0 = int(stat.read_text().split()[0]), time.process_time(), time.perf_counter()
        n = drain(conn, consumer, page, decode)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        server = (int(stat.read_text().split()[0]) - s0) / 1e9
    return n, server, cpu, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="a checkout of the version to compare with (none: this one only)")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--tick-every", type=int, default=5_000)
    ap.add_argument("--pages", default="10000", help="pglogq's max_messages, comma-separated (default 10000)")
    ap.add_argument("--no-pgque", action="store_true")
    ap.add_argument("--no-decode", action="store_true", help="read the payload text, do not decode it")
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parents[3]
    pages = [int(p) for p in args.pages.split(",")]
    decode = None if args.no_decode else json.loads
    tag = uuid.uuid4().hex[:6]
    dbs: dict[str, str] = {"after": f"pglogq_d_after_{tag}"}
    if args.before:
        dbs["before"] = f"pglogq_d_before_{tag}"
    pgque_sql, where = (None, "--no-pgque") if args.no_pgque else find_sql()
    if pgque_sql is not None:
        dbs["pgque"] = f"pglogq_d_pgque_{tag}"
    else:
        print(f"PgQue left out: {where}")
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        for db in dbs.values():
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    dsns = {k: psycopg.conninfo.make_conninfo(args.dsn, dbname=v) for k, v in dbs.items()}
    cases = [(s, p) for s in dbs if s != "pgque" for p in pages] + ([("pgque", 0)] if "pgque" in dbs else [])
    consumers = [f"c{r}_{p}" for r in range(args.rounds) for p in pages]
    try:
        for system, dsn in dsns.items():
            if system == "pgque":
                assert pgque_sql is not None
                preload_pgque(dsn, pgque_sql, args.events, args.tick_every, [f"c{r}_0" for r in range(args.rounds)])
            else:
                install(dsn, args.before if system == "before" else here)
                preload_pglogq(dsn, args.events, args.tick_every, consumers)
        results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        for r in range(args.rounds):
            for system, page in (cases if r % 2 == 0 else cases[::-1]):
                drain = drain_pgque if system == "pgque" else drain_pglogq
                n, server, cpu, wall = measured(dsns[system], drain, f"c{r}_{page}", page, decode)
                if n != args.events:
                    raise SystemExit(f"{system} drained {n} of {args.events} events")
                results.setdefault((system, page), []).append((server / n * 1e6, cpu / n * 1e6, n / wall))
        print(f"{'drain':22} {'server us/ev':>13} {'client us/ev':>13} {'sum':>7} {'wall ev/s':>11}")
        med: dict[tuple[str, int], float] = {}
        for (system, page), v in results.items():
            s, c, w = (statistics.median(x[i] for x in v) for i in range(3))
            med[(system, page)] = s + c
            name = "PgQue (per tick)" if system == "pgque" else f"pglogq {system}, page {page:,}"
            print(f"{name:22} {s:13.2f} {c:13.2f} {s + c:7.2f} {w:11,.0f}")
        for (system, page), total in med.items():
            if system != "pgque" and ("pgque", 0) in med:
                print(f"pglogq {system}, page {page:,}: CPU per event of PgQue's / pglogq's "
                      f"{med[('pgque', 0)] / total:.2f}")
            if system == "after" and ("before", page) in med:
                print(f"page {page:,}: CPU per event before / after {med[('before', page)] / total:.2f}")
        print(json.dumps({f"{k[0]}:{k[1]}": v for k, v in results.items()}))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            for db in dbs.values():
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
