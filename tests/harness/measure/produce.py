"""Measure the producer path against its PostgreSQL ceilings, interleaved.  Anyone can rerun it::

    python -m tests.harness.measure.produce                     # the DSN rule (embedded server or PGLOGQ_DSN)
    python -m tests.harness.measure.produce --dsn postgresql://postgres@127.0.0.1:5432/postgres \\
        --clients 1,4,16 --seconds 3 --rounds 3 --json out.json

It creates a scratch database on the server (``CREATEDB`` needed), installs the schema, and drops
the database at the end (``--keep`` keeps it).

**Single sends** (one event per transaction, autocommit, at each number of clients; every client
is its own process with its own connection): the ceiling is a plain single-row ``INSERT`` of
the same JSON into a table with a ``bigserial`` primary key; beside it ``SELECT pglogq.send``
through psycopg, ``Client.send`` (its pool, and with ``conn=`` the caller's connection),
``Client.send`` with a ``type``, and ``AsyncClient.send``.

**Batches** of ``--batch`` events (1 client): the ceiling is ``INSERT ... SELECT
jsonb_array_elements($1)`` of one JSON array into a plain table with a ``bigserial`` primary key;
beside it ``SELECT pglogq.send_batch_json`` through psycopg and ``Client.send_batch``.

Rounds are interleaved (every case once per round, in the same order), so a burst of load from
elsewhere hits all cases alike; the table gives the median of the rounds, the ratio to the
ceiling of the same group, microseconds per call (clients / rate), the CPU microseconds per call
of the client processes and of their server backends (from /proc: robust to load from elsewhere,
the server only when it runs on this machine) and the load average before
and after the group.  The payload is the benchmark's (``tests.harness.bench.payload``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pglogq
from pglogq.dsn import resolve_dsn
from tests.harness.bench import payload
from tests.harness.measure.ticker import scratch_database

QUEUE = "measure_produce"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
DDL = """
CREATE TABLE plain_one (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
                        payload jsonb NOT NULL);
CREATE TABLE plain_batch (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(),
                          payload jsonb NOT NULL);
"""
PLAIN_ONE = "INSERT INTO plain_one (payload) VALUES (%s)"
PLAIN_BATCH = "INSERT INTO plain_batch (payload) SELECT jsonb_array_elements(%s)"
SQL_SEND = "SELECT pglogq.send(%s, %s)"
SQL_SEND_TYPED = "SELECT pglogq.send(%s, %s, type => %s)"
SQL_SEND_BATCH = "SELECT pglogq.send_batch_json(%s, %s)"

SINGLE_CASES = [
    "plain INSERT",
    "SQL pglogq.send",
    "SQL pglogq.send, type",
    "Client.send (pool)",
    "Client.send (conn=)",
    "Client.send (pool), type",
    "AsyncClient.send (pool)",
]
CEILING_SINGLE = "plain INSERT"
BATCH_CASES = [
    "INSERT..SELECT jsonb_array_elements",
    "SQL pglogq.send_batch_json",
    "Client.send_batch (pool)",
    "Client.send_batch (conn=)",
    "AsyncClient.send_batch (pool)",
]
CEILING_BATCH = "INSERT..SELECT jsonb_array_elements"


def _wait(start_at: float) -> None:
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)


def _cpu(pid: int) -> float:
    """User + system CPU seconds of a local process (Linux /proc; 0 when unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def _loop(step: Callable[[], int], backend: int, start_at: float, stop_at: float) -> tuple[int, float, float]:
    for _ in range(20):  # warm: prepared statements, plan caches, the pool's connection
        step()
    _wait(start_at)
    n = 0
    cpu, server = time.process_time(), _cpu(backend)
    while time.time() < stop_at:
        n += step()
    return n, time.process_time() - cpu, _cpu(backend) - server


async def _aloop(step: Callable[[], Any], per: int, backend: int, start_at: float, stop_at: float,
                 ) -> tuple[int, float, float]:
    for _ in range(20):
        await step()
    await asyncio.sleep(max(0.0, start_at - time.time()))
    n = 0
    cpu, server = time.process_time(), _cpu(backend)
    while time.time() < stop_at:
        await step()
        n += per
    return n, time.process_time() - cpu, _cpu(backend) - server


def worker(case: str, dsn: str, batch: int, idx: int, start_at: float, stop_at: float) -> tuple[int, float, float]:
    """One client process: run ``case`` from start_at to stop_at; returns the events sent, the
    CPU seconds of this process and of the server backend that served it."""
    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    one = rows[0]
    if case.startswith("AsyncClient"):
        async def main() -> tuple[int, float, float]:
            async with pglogq.AsyncClient(dsn, min_size=1, max_size=1) as ac:
                async with ac.connection() as c:
                    pid = c.info.backend_pid
                if case.endswith("send_batch (pool)"):
                    return await _aloop(lambda: ac.send_batch(QUEUE, rows), len(rows), pid, start_at, stop_at)
                return await _aloop(lambda: ac.send(QUEUE, one), 1, pid, start_at, stop_at)
        return asyncio.run(main())
    with psycopg.connect(dsn, autocommit=True) as conn, pglogq.Client(dsn, min_size=1, max_size=1) as client:
        steps: dict[str, Callable[[], int]] = {
            "plain INSERT": lambda: (conn.execute(PLAIN_ONE, (Jsonb(one),)), 1)[1],
            "SQL pglogq.send": lambda: (conn.execute(SQL_SEND, (QUEUE, Jsonb(one))), 1)[1],
            "SQL pglogq.send, type": lambda: (conn.execute(SQL_SEND_TYPED, (QUEUE, Jsonb(one), "order")), 1)[1],
            "Client.send (pool)": lambda: (client.send(QUEUE, one), 1)[1],
            "Client.send (conn=)": lambda: (client.send(QUEUE, one, conn=conn), 1)[1],
            "Client.send (pool), type": lambda: (client.send(QUEUE, one, type="order"), 1)[1],
            "INSERT..SELECT jsonb_array_elements": lambda: (conn.execute(PLAIN_BATCH, (Jsonb(rows),)), len(rows))[1],
            "SQL pglogq.send_batch_json": lambda: (conn.execute(SQL_SEND_BATCH, (QUEUE, Jsonb(rows))), len(rows))[1],
            "Client.send_batch (pool)": lambda: len(client.send_batch(QUEUE, rows)),
            "Client.send_batch (conn=)": lambda: len(client.send_batch(QUEUE, rows, conn=conn)),
        }
        pid = conn.info.backend_pid
        if "(pool)" in case:
            with client.connection() as c:
                pid = c.info.backend_pid
        return _loop(steps[case], pid, start_at, stop_at)


def _load() -> float:
    return os.getloadavg()[0]


def measure(dsn: str, clients: list[int], seconds: float, rounds: int, batch: int,
            pool: ProcessPoolExecutor, cases: set[str] | None = None) -> list[dict[str, Any]]:
    """Every group (single sends at each client count, then batches), rounds interleaved."""
    groups: list[tuple[str, list[str], str, int, int]] = [
        (f"1 event/txn, {n} client{'s' if n > 1 else ''}", SINGLE_CASES, CEILING_SINGLE, n, 1) for n in clients
    ]
    groups.append((f"batch of {batch:,}, 1 client", BATCH_CASES, CEILING_BATCH, 1, batch))
    out: list[dict[str, Any]] = []
    for title, names, ceiling, n, size in groups:
        names = [c for c in names if cases is None or c in cases or c == ceiling]
        rates: dict[str, list[float]] = {c: [] for c in names}
        cpu: dict[str, list[tuple[float, float]]] = {c: [] for c in names}
        load_before = _load()
        for _ in range(rounds):
            for case in names:
                start_at = time.time() + 0.5
                stop_at = start_at + seconds
                futures = [pool.submit(worker, case, dsn, size, i, start_at, stop_at) for i in range(n)]
                got = [f.result() for f in futures]
                events = sum(g[0] for g in got)
                rates[case].append(events / seconds)
                calls = max(events / size, 1)
                cpu[case].append((sum(g[1] for g in got) / calls * 1e6, sum(g[2] for g in got) / calls * 1e6))
        load_after = _load()
        top = statistics.median(rates[ceiling])
        for case in names:
            med = statistics.median(rates[case])
            calls = med / size
            out.append({
                "group": title, "case": case, "clients": n, "batch": size, "events_per_s": round(med),
                "ratio": round(med / top, 3) if top else None,
                "us_per_call": round(n / calls * 1e6, 1) if calls else None,
                "client_cpu_us": round(statistics.median(c for c, _ in cpu[case]), 1),
                "server_cpu_us": round(statistics.median(x for _, x in cpu[case]), 1),
                "rounds": [round(r) for r in rates[case]],
                "load": [round(load_before, 2), round(load_after, 2)],
            })
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    group = None
    for r in rows:
        if r["group"] != group:
            group = r["group"]
            print(f"\n## {group}   (load average {r['load'][0]} -> {r['load'][1]})")
            print(f"{'case':<38} {'events/s':>10} {'ratio':>6} {'us/call':>9} {'cli cpu':>8} {'srv cpu':>8}  rounds")
        print(f"{r['case']:<38} {r['events_per_s']:>10,} {r['ratio']:>6.2f} {r['us_per_call']:>9} "
              f"{r['client_cpu_us']:>8} {r['server_cpu_us']:>8}  {r['rounds']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dsn", help="server to use (a scratch database is created); default: the DSN rule")
    ap.add_argument("--clients", default="1,4,16", help="client counts of the single-send groups")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of one measurement")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    ap.add_argument("--batch", type=int, default=1000, help="events per batch")
    ap.add_argument("--cases", help="comma-separated subset of the cases (the ceilings always run)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    ap.add_argument("--no-fsync-wait", action="store_true",
                    help="synchronous_commit=off in every session: the CPU cost per call without the WAL flush")
    args = ap.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",") if c]
    cases = set(args.cases.split(",")) if args.cases else None
    with scratch_database(resolve_dsn(args.dsn), keep=args.keep) as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(DDL)
        with pglogq.Client(dsn) as client:
            client.create_queue(QUEUE)
        if args.no_fsync_wait:
            dsn = make_conninfo(dsn, options="-c synchronous_commit=off")
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(clients), mp_context=ctx) as pool:
            rows = measure(dsn, clients, args.seconds, args.rounds, args.batch, pool, cases)
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SHOW server_version").fetchone()
    print(f"server {version[0] if version else '?'}, {os.cpu_count()} CPUs, {args.seconds}s x {args.rounds} rounds"
          + (", synchronous_commit=off" if args.no_fsync_wait else ""))
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"server_version": version[0] if version else None, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
