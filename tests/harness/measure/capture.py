"""Measure what change capture costs the writer: UPDATE-heavy load with and without capture.

    python -m tests.harness.measure.capture [--dsn DSN] [--seconds 10] [--rounds 3] [--rows 10000]

``--dsn`` names a server (its maintenance database); a scratch database ``pglogq_bench_capture``
is created there, used and dropped.  Without it the embedded PostgreSQL is used.

Two identical tables (id int primary key, v int, status text, note text of 100 bytes,
updated_at timestamptz) of ``--rows`` rows; one of them is captured into a queue
(``pglogq.capture_table`` with its defaults: every column, the changed columns' old values).
The two are measured in alternating rounds of the same run, so that both see the same machine:

1. single-row UPDATE transactions, pgbench-style: ``pgbench -n -c 1 -T seconds`` with a custom
   script updating one random row per transaction (the server's default settings, commit
   included): latency per transaction = per row; then the same with ``synchronous_commit = off``
   (the commit does not wait for the WAL flush, so what remains is the CPU work);
2. one statement updating every row (``UPDATE t SET v = v + 1``), timed in the server
   (``clock_timestamp()`` around it, no round trips): time per row.

Reported: the median of the rounds for each table, and the difference (the capture's cost per
row).  pgbench must be on PATH (Debian: postgresql-client).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import pglogq
from pglogq.dsn import resolve_dsn

DB = "pglogq_bench_capture"
TABLES = ("plain_t", "captured_t")


def setup(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in TABLES:
            conn.execute(
                f"CREATE TABLE {t} (id int PRIMARY KEY, v int NOT NULL, status text NOT NULL,"
                f" note text NOT NULL, updated_at timestamptz NOT NULL) WITH (fillfactor = 80)".encode()
            )
            conn.execute(
                f"INSERT INTO {t} SELECT g, 0, 'new', repeat('x', 100), now()"
                f" FROM generate_series(1, %s) g".encode(), (rows,)
            )
        conn.execute("VACUUM ANALYZE plain_t, captured_t")
    with pglogq.Client(dsn) as client:
        client.create_queue("cdc")
        client.capture_table("captured_t", "cdc")


def pgbench(dsn: str, table: str, seconds: int, rows: int, *, sync: bool = True) -> float:
    """Average latency of one single-row UPDATE transaction, in µs."""
    script = Path(tempfile.mkdtemp(prefix="pglogq-capture-")) / "update.sql"
    script.write_text(
        f"\\set id random(1, {rows})\n"
        f"UPDATE {table} SET v = v + 1, status = 'paid', updated_at = now() WHERE id = :id;\n"
    )
    parts = conninfo_to_dict(dsn)
    env = dict(os.environ)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("password", "PGPASSWORD")):
        if parts.get(key):
            env[var] = str(parts[key])
    if not sync:  # the commit's WAL flush is not waited for: what is left is the CPU work
        env["PGOPTIONS"] = "-c synchronous_commit=off"
    out = subprocess.run(
        ["pgbench", "-n", "-c", "1", "-T", str(seconds), "-f", str(script), str(parts.get("dbname"))],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    shutil.rmtree(script.parent, ignore_errors=True)
    m = re.search(r"latency average = ([\d.]+) ms", out)
    assert m, out
    return float(m.group(1)) * 1000


def bulk(dsn: str, table: str, rows: int) -> float:
    """µs per row of one statement updating every row, timed in the server."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM {table}".encode())
        conn.execute(
            "DO $$ DECLARE t0 timestamptz := clock_timestamp(); BEGIN"
            f" UPDATE {table} SET v = v + 1, updated_at = now();"
            " PERFORM set_config('bench.elapsed', extract(epoch FROM clock_timestamp() - t0)::text, false);"
            " END $$".encode()
        )
        row = conn.execute("SELECT current_setting('bench.elapsed')").fetchone()
    assert row is not None
    return float(row[0]) * 1e6 / rows


def events_in_queue(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pglogq.stored_events('cdc')").fetchone()
    return int(row[0]) if row else 0


def measure(dsn: str, seconds: int, rounds: int, rows: int) -> dict[str, Any]:
    single: dict[str, list[float]] = {t: [] for t in TABLES}
    nosync: dict[str, list[float]] = {t: [] for t in TABLES}
    whole: dict[str, list[float]] = {t: [] for t in TABLES}
    for r in range(rounds):
        order = TABLES if r % 2 == 0 else TABLES[::-1]
        for t in order:
            single[t].append(pgbench(dsn, t, seconds, rows))
        for t in order:
            nosync[t].append(pgbench(dsn, t, seconds, rows, sync=False))
        for t in order:
            whole[t].append(bulk(dsn, t, rows))
    return {"single": {t: statistics.median(v) for t, v in single.items()},
            "nosync": {t: statistics.median(v) for t, v in nosync.items()},
            "bulk": {t: statistics.median(v) for t, v in whole.items()},
            "single_all": single, "bulk_all": whole, "events": events_in_queue(dsn)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", help="a server's maintenance database (default: the embedded PostgreSQL)")
    ap.add_argument("--seconds", type=int, default=10, help="pgbench run per table and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=10000)
    args = ap.parse_args(argv)
    if shutil.which("pgbench") is None:
        raise SystemExit("pgbench is not on PATH (Debian: apt-get install postgresql-client)")
    server = args.dsn or resolve_dsn(None)  # None: the embedded PostgreSQL
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)".encode())
        conn.execute(f"CREATE DATABASE {DB}".encode())
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    dsn = make_conninfo(server, dbname=DB)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        setup(dsn, args.rows)
        res = measure(dsn, args.seconds, args.rounds, args.rows)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)".encode())
    s, n, b = res["single"], res["nosync"], res["bulk"]
    print(f"PostgreSQL {version[0] if version else '?'}, fsync={fsync[0] if fsync else '?'}, "
          f"synchronous_commit={sync[0] if sync else '?'}, {os.cpu_count()} CPUs; {args.rows} rows, "
          f"{args.rounds} alternating rounds, pgbench {args.seconds} s per table and round; "
          f"{res['events']} events captured")
    print()
    print("| load | without capture | with capture | capture's cost per row |")
    print("| --- | --- | --- | --- |")
    print(f"| single-row UPDATE transactions (pgbench, per transaction) | {s['plain_t']:.1f} µs | "
          f"{s['captured_t']:.1f} µs | {s['captured_t'] - s['plain_t']:+.1f} µs |")
    print(f"| the same with synchronous_commit = off (the CPU work) | {n['plain_t']:.1f} µs | "
          f"{n['captured_t']:.1f} µs | {n['captured_t'] - n['plain_t']:+.1f} µs |")
    print(f"| one UPDATE of every row (in the server, per row) | {b['plain_t']:.2f} µs | "
          f"{b['captured_t']:.2f} µs | {b['captured_t'] - b['plain_t']:+.2f} µs |")
    print()
    print("rounds (µs):", {k: [round(x, 1) for x in v] for k, v in res["single_all"].items()},
          {k: [round(x, 2) for x in v] for k, v in res["bulk_all"].items()})


if __name__ == "__main__":
    main()
