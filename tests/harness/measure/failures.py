"""Measure failure handling: redelivery delay, nacking throughput, side tables after a run.

    python -m tests.harness.measure.failures [--dsn DSN] [--seconds 30] [--backlog 50000]

``--dsn`` names a server (its maintenance database); a scratch database ``pglogq_bench_failures``
is created there, used and dropped.  Without it the embedded PostgreSQL is used.  Three parts:

1. redelivery delay for ``retry_after = 1 s``: events arrive at a steady rate, the consumer nacks
   each on its first delivery; the maintenance loop (``client.maintain()`` + tick) runs every
   ~10 ms in another thread.  Reported: time from nack to the redelivered copy in the
   consumer's hands (p50 / p99 / max), and the part of it beyond the 1 s asked for.
2. throughput of one consumer reading a backlog, acknowledging everything (baseline), then
   nacking 10 % of the events on their first delivery (``retry_after = 0``), until the backlog
   and every redelivery is acknowledged.
3. a sustained mixed run (idempotent sends, 10 % delayed sends, cancels, 10 % nacks, some events
   that always fail and end in the dead-letter queue) for ``--seconds``; afterwards, size and
   dead tuples of every side table, and the autovacuum runs they needed.
"""

from __future__ import annotations

import argparse
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq

DB = "pglogq_bench_failures"
SIDE_TABLES = ("retry", "delayed", "dead_letter", "idempotency_key", "cancelled", "subscription", "tick")


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class MaintenanceLoop(threading.Thread):
    """client.maintain() + tick every ``period`` seconds, as a ticker daemon would."""

    def __init__(self, dsn: str, queue: str, period: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.client = pglogq.Client(dsn, min_size=1, max_size=2)
        self.queue = queue
        self.period = period
        self.stop = threading.Event()
        self.rounds = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.client.maintain()
            self.client.tick(self.queue)
            self.rounds += 1
            self.stop.wait(self.period)
        self.client.close()


def fresh_database(admin_dsn: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    dsn = make_conninfo(admin_dsn, dbname=DB)
    with pglogq.Client(dsn) as c:
        c.install_schema()
    return dsn


def redelivery_delay(dsn: str, events: int = 300, rate: float = 30.0) -> dict[str, float]:
    client = pglogq.Client(dsn)
    client.create_queue("redeliver")
    client.subscribe("redeliver", "c")
    loop = MaintenanceLoop(dsn, "redeliver")
    loop.start()
    nacked_at: dict[int, float] = {}
    delays: list[float] = []
    sent = 0
    start = time.monotonic()
    deadline = start + events / rate + 60
    while len(delays) < events and time.monotonic() < deadline:
        due = int((time.monotonic() - start) * rate)
        while sent < min(due, events):
            client.send("redeliver", {"n": sent})
            sent += 1
        batch = client.receive("redeliver", "c", max_messages=100)
        if not batch:
            time.sleep(0.002)
            continue
        now = time.monotonic()
        for m in batch:
            if m.retry_count == 0:
                batch.nack(m, retry_after=timedelta(seconds=1))
                nacked_at[m.msg_id] = time.monotonic()
            else:
                delays.append(now - nacked_at.pop(m.msg_id))
        batch.ack()
    loop.stop.set()
    loop.join()
    client.close()
    return {
        "samples": len(delays),
        "p50_s": pct(delays, 50),
        "p99_s": pct(delays, 99),
        "max_s": max(delays) if delays else float("nan"),
        "extra_p50_ms": (pct(delays, 50) - 1) * 1000,
        "extra_p99_ms": (pct(delays, 99) - 1) * 1000,
        "maintenance_rounds_per_s": loop.rounds / (time.monotonic() - start),
    }


def consume(
    client: pglogq.Client, queue: str, consumer: str, nack_every: int, expected: int, *, one_tx: bool = False
) -> tuple[float, int, int]:
    """Consume until ``expected`` first deliveries (and all their retries) are acknowledged.
    ``one_tx``: the page's nacks and its ack run in one transaction (one commit per page)."""
    firsts = retries_pending = handled = nacks = 0
    start = time.monotonic()
    while firsts < expected or retries_pending:
        batch = client.receive(queue, consumer, max_messages=500)
        if not batch:
            time.sleep(0.001)
            continue
        failed = []
        for m in batch:
            handled += 1
            if m.retry_count == 0:
                firsts += 1
                if nack_every and m.msg_id % nack_every == 0:
                    failed.append(m)
            else:
                retries_pending -= 1
        nacks += len(failed)
        retries_pending += len(failed)
        if one_tx:
            with client.connection() as conn, conn.transaction():
                for m in failed:
                    batch.nack(m, retry_after=timedelta(0), conn=conn)
                batch.ack(conn=conn)
        else:
            for m in failed:
                batch.nack(m, retry_after=timedelta(0))
            batch.ack()
    return time.monotonic() - start, handled, nacks


def nack_throughput(dsn: str, backlog: int) -> dict[str, float]:
    client = pglogq.Client(dsn)
    client.create_queue("through")
    for c in ("all_ok", "nack10", "nack10_tx"):
        client.subscribe("through", c)
    for i in range(0, backlog, 1000):
        client.send_batch("through", [{"n": n, "pad": "x" * 100} for n in range(i, min(backlog, i + 1000))])
    client.tick("through", force=True)
    loop = MaintenanceLoop(dsn, "through")
    loop.start()
    t_ok, handled_ok, _ = consume(client, "through", "all_ok", 0, backlog)
    t_nack, handled_nack, nacks = consume(client, "through", "nack10", 10, backlog)
    t_tx, handled_tx, _ = consume(client, "through", "nack10_tx", 10, backlog, one_tx=True)
    loop.stop.set()
    loop.join()
    client.close()
    return {
        "backlog": backlog,
        "baseline_events_per_s": handled_ok / t_ok,
        "nack10_events_per_s": handled_nack / t_nack,
        "nack10_originals_per_s": backlog / t_nack,
        "nack10_tx_events_per_s": handled_tx / t_tx,
        "nack10_tx_originals_per_s": backlog / t_tx,
        "nacks": nacks,
        "nack10_deliveries": handled_nack,
    }


def sustained(dsn: str, seconds: float) -> dict[str, Any]:
    client = pglogq.Client(dsn)
    client.create_queue("mixed")
    client.subscribe("mixed", "c")
    client.set_queue_config("mixed", "max_retries", 3)
    loop = MaintenanceLoop(dsn, "mixed")
    loop.start()
    stop = threading.Event()
    counts = {"sent": 0, "delayed": 0, "cancelled": 0, "duplicate_sends": 0}

    def produce() -> None:
        p = pglogq.Client(dsn)
        k = 0
        while not stop.is_set():
            keys = [f"k{k + i}" for i in range(100)]
            if k % 1000 == 0:
                ids = p.send_batch(
                    "mixed", [{"k": key} for key in keys], idempotency_keys=keys, delay=timedelta(seconds=1)
                )
                counts["delayed"] += len(ids)
                counts["cancelled"] += sum(p.cancel("mixed", i) for i in ids[:10])
            else:
                p.send_batch("mixed", [{"k": key} for key in keys], idempotency_keys=keys)
            # a retried producer: the same keys again give the same ids and no new events
            p.send_batch("mixed", [{"k": key} for key in keys[:10]], idempotency_keys=keys[:10])
            counts["duplicate_sends"] += 10
            counts["sent"] += 100
            k += 100
            time.sleep(0.01)
        p.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    handled = nacks = dead = 0
    seen: set[tuple[int, int]] = set()
    duplicates: list[tuple[int, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = client.receive("mixed", "c", max_messages=500)
        if not batch:
            time.sleep(0.001)
            continue
        for m in batch:
            handled += 1
            key = (m.msg_id, m.retry_count)
            if key in seen:
                duplicates.append(key)
            seen.add(key)
            if m.msg_id % 1000 == 0 or (m.retry_count == 0 and m.msg_id % 10 == 0):
                nacks += 1
                dead += batch.nack(m, retry_after=timedelta(milliseconds=200)) == "dead"
        batch.ack()
    stop.set()
    producer.join()
    loop.stop.set()
    loop.join()
    client.maintain()
    client.close()  # backends flush their table statistics when they end
    time.sleep(1.5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid),"
            " autovacuum_count, n_tup_ins, n_tup_del"
            " FROM pg_stat_user_tables WHERE schemaname = 'pglogq' AND relname = ANY(%s) ORDER BY relname",
            (list(SIDE_TABLES),),
        ).fetchall()
        exact = {}
        for r in rows:  # the statistics' n_live_tup is an estimate: count
            n = conn.execute(f"SELECT count(*) FROM pglogq.{r[0]}").fetchone()
            exact[r[0]] = n[0] if n else 0
        rows = [(r[0], exact[r[0]], *r[2:]) for r in rows]
    return {
        "seconds": seconds,
        "consumer_deliveries_per_s": handled / seconds,
        "nacks": nacks,
        "dead_lettered": dead,
        "duplicates": duplicates,
        **counts,
        "tables": [
            {
                "table": r[0],
                "live": r[1],
                "dead_tuples": r[2],
                "bytes": r[3],
                "autovacuums": r[4],
                "inserted": r[5],
                "deleted": r[6],
            }
            for r in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.measure.failures", description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", help="server to use (default: PGLOGQ_DSN, else the embedded PostgreSQL)")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the sustained run")
    ap.add_argument("--backlog", type=int, default=50_000, help="events in the throughput backlog")
    args = ap.parse_args(argv)
    from pglogq.dsn import resolve_dsn

    admin = resolve_dsn(args.dsn)
    dsn = fresh_database(admin)
    try:
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}")
        r = redelivery_delay(dsn)
        print("1. redelivery, retry_after = 1 s, maintenance loop every ~10 ms")
        print(
            f"   samples {r['samples']}; nack→redelivered p50 {r['p50_s']:.3f} s, p99 {r['p99_s']:.3f} s,"
            f" max {r['max_s']:.3f} s; beyond the 1 s: p50 {r['extra_p50_ms']:.0f} ms,"
            f" p99 {r['extra_p99_ms']:.0f} ms; loop {r['maintenance_rounds_per_s']:.0f} rounds/s"
        )
        t = nack_throughput(dsn, args.backlog)
        print(f"2. one consumer, backlog of {t['backlog']} events, pages of 500")
        print(f"   ack everything:   {t['baseline_events_per_s']:,.0f} events/s")
        print(
            f"   nack 10 %:        {t['nack10_events_per_s']:,.0f} deliveries/s"
            f" ({t['nack10_originals_per_s']:,.0f} original events/s; {t['nacks']} nacks)"
        )
        print(
            f"   nack 10 %, nacks + ack in one transaction: {t['nack10_tx_events_per_s']:,.0f} deliveries/s"
            f" ({t['nack10_tx_originals_per_s']:,.0f} original events/s)"
        )
        s = sustained(dsn, args.seconds)
        print(
            f"3. sustained mixed run, {s['seconds']:.0f} s: {s['consumer_deliveries_per_s']:,.0f} deliveries/s,"
            f" {s['sent']} sent (+{s['duplicate_sends']} duplicate idempotent sends), {s['delayed']} delayed,"
            f" {s['cancelled']} cancelled, {s['nacks']} nacks, {s['dead_lettered']} dead-lettered;"
            f" duplicate deliveries: {s['duplicates'] or 'none'}"
        )
        print(
            f"   {'table':<16} {'live':>8} {'dead tup':>9} {'size':>10} {'autovac':>8} {'inserted':>9} {'deleted':>9}"
        )
        for row in s["tables"]:
            print(
                f"   {row['table']:<16} {row['live']:>8} {row['dead_tuples']:>9} {row['bytes'] / 1024:>8.0f}kB"
                f" {row['autovacuums']:>8} {row['inserted']:>9} {row['deleted']:>9}"
            )
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
