"""Compare this checkout's engine with another version's on an unpartitioned queue, interleaved.

    git worktree add /tmp/before <commit>
    python -m tests.harness.measure.versions --before /tmp/before --dsn postgresql://... --rounds 5

Two scratch databases on one server: one gets the schema of the ``--before`` checkout (its
``pglogq`` package, imported in a child process), the other this checkout's.  Each round runs,
for each database in turn (the order alternates between rounds), the same SQL-level work on a
fresh unpartitioned queue with one consumer: single ``send`` calls for ``--seconds``, ``send_batch_json``
of 1,000 events for ``--seconds``, then a drain of what was sent with ``receive``/``ack`` pages of
1,000.  The table gives each figure's median over the rounds and the ratio after/before: what a
change of the engine costs a queue that does not use it (partitions promised: "throughput of an
unpartitioned queue is not lower than before").  Speed is measured, never asserted: no test
calls this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

BODY = json.dumps({"order": 12345, "customer": "c-42", "amount": "19.99", "items": [1, 2, 3]})


def install(dsn: str, checkout: Path) -> None:
    """Install the schema of ``checkout`` into ``dsn`` (a child process imports its package)."""
    code = "import sys, pglogq; pglogq.Client(sys.argv[1]).install_schema()"
    subprocess.run([sys.executable, "-c", code, dsn], check=True, cwd=checkout,
                   env={"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"})


def one_round(dsn: str, seconds: float) -> dict[str, float]:
    queue = "v" + uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue(%s)", (queue,))
        conn.execute("SELECT pglogq.subscribe(%s, 'c')", (queue,))
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.execute("SELECT pglogq.send(%s, %s::jsonb)", (queue, BODY))
            n += 1
        send = n / (time.perf_counter() - t0)
        batch = "[" + ",".join([BODY] * 1000) + "]"
        m, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.execute("SELECT pglogq.send_batch_json(%s, %s::jsonb)", (queue, batch))
            m += 1000
        send_batch = m / (time.perf_counter() - t0)
        conn.execute("SELECT pglogq.force_tick(%s)", (queue,))
        got, t0 = 0, time.perf_counter()
        while rows := conn.execute("SELECT batch_id, msg_id, payload::text, txid FROM pglogq.receive(%s, 'c', 1000)",
                                   (queue,)).fetchall():
            got += len(rows)
            conn.execute("SELECT pglogq.ack(%s, %s, %s)", (rows[-1][0], rows[-1][1], rows[-1][3]))
        drain = got / (time.perf_counter() - t0)
        assert got == n + m, (got, n, m)
        conn.execute("SELECT pglogq.drop_queue(%s, true)", (queue,))
    return {"send, 1 client": send, "send_batch_json of 1,000": send_batch, "drain, pages of 1,000": drain}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the version to compare with")
    ap.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args(argv)
    here = Path(__file__).resolve().parents[3]
    names = {"before": f"pglogq_v_before_{uuid.uuid4().hex[:6]}", "after": f"pglogq_v_after_{uuid.uuid4().hex[:6]}"}
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        for db in names.values():
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
    dsns = {k: psycopg.conninfo.make_conninfo(args.dsn, dbname=v) for k, v in names.items()}
    try:
        install(dsns["before"], args.before)
        install(dsns["after"], here)
        results: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                for case, value in one_round(dsns[which], args.seconds).items():
                    results[which].setdefault(case, []).append(value)
        print(f"{'case':28} {'before':>12} {'after':>12} {'after/before':>13}")
        for case in results["before"]:
            b = statistics.median(results["before"][case])
            a = statistics.median(results["after"][case])
            print(f"{case:28} {b:12,.0f} {a:12,.0f} {a / b:13.2f}")
        print(json.dumps(results))
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            for db in names.values():
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
