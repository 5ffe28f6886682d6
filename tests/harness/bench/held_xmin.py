"""Scenario 5, sustained load under a held xmin: a fixed offered load for a few minutes while
another session holds a REPEATABLE READ snapshot open (a query ran in it), compared with the
same run without it.  Throughput over time, and every table's dead tuples and size at the
start and the end, table rotation included (rotation_period set short)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from tests.harness.bench.consumer_adapter import listen_consume
from tests.harness.bench.context import BenchContext
from tests.harness.bench.pacing import clock
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.stats import percentile
from tests.harness.bench.systems import JobsTable, Pglogq, System, jobs_table, pglogq_system
from tests.harness.bench.ticking import ticker_running

SCENARIO = "held_xmin"
TABLE_STATS = """
SELECT n.nspname || '.' || c.relname, coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       pg_total_relation_size(c.oid)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.relkind = 'r' AND (n.nspname = 'pglogq' OR c.relname = 'bench_jobs')
 ORDER BY c.relname
"""


def table_stats(ctx: BenchContext, settle: float = 1.2) -> dict[str, dict[str, int]]:
    time.sleep(settle)  # backends publish their table statistics about once a second
    with ctx.connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(TABLE_STATS).fetchall()
    return {r[0]: {"n_dead_tup": int(r[1]), "n_live_tup": int(r[2]), "bytes": int(r[3])} for r in rows}


class HeldSnapshot:
    """A session in REPEATABLE READ that ran a query and then just stays open."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM bench_app_order")
        row = self.conn.execute("SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()"
                                ).fetchone()
        self.xmin = row[0] if row else None

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


def run(ctx: BenchContext, systems: list[System]) -> None:
    s = ctx.settings
    ctx.results.note(SCENARIO, f"offered load {s.held_rate:,} events/s, one event per transaction, "
                               f"{s.held_seconds:.0f} s per phase; pglogq rotation_period "
                               f"{s.held_rotation_seconds} s")
    for system in systems:
        if isinstance(system, (Pglogq, JobsTable)):
            rates = {}
            for held in (False, True):
                rates[held] = phase(ctx, system, held)
                system.cleanup()
            if rates[False]:
                ctx.results.add(Measure(SCENARIO, "throughput held / without", system.name,
                                        rates[True] / rates[False], "x"))
        else:
            ctx.results.skip(SCENARIO, system.name, "not run under a held xmin: the scenario compares pglogq "
                             "with the table-queue design (the jobs-table baseline); PGQueuer and Procrastinate "
                             "are such table queues too, Redis and RabbitMQ have no xmin")


def phase(ctx: BenchContext, system: System, held: bool) -> float:
    s = ctx.settings
    tag = "held" if held else "free"
    label = f"{system.name} ({'held xmin' if held else 'no held snapshot'})"
    expected = int(s.held_rate * s.held_seconds)
    seen: dict[int, float] = {}
    lock = threading.Lock()

    def record(seq: int, ts: float) -> None:
        with lock:
            seen.setdefault(seq, ts)

    ready = threading.Event()
    deadline = time.time() + s.held_seconds + 60
    rotations: list[int] = []
    dead_over_time: list[tuple[float, int]] = []
    prefix = "pglogq." if isinstance(system, Pglogq) else "public.bench_jobs"  # the queue's tables
    if isinstance(system, Pglogq):
        queue = f"held_{tag}"
        with ctx.client() as c:
            c.create_queue(queue)
            c.subscribe(queue, "c")
            c.set_queue_config(queue, "rotation_period", f"{s.held_rotation_seconds} seconds")
        conf: dict[str, Any] = {"dsn": ctx.dsn, "queue": queue}
        producer = pglogq_system.send_paced
        target: Any = listen_consume
        args: tuple[Any, ...] = (ctx.dsn, queue, "c", expected, deadline, record, ready)
        ticker = ticker_running(ctx.dsn, rotate_interval=1.0)
    else:
        ctx.sql("TRUNCATE bench_jobs")
        conf = {"dsn": ctx.dsn}
        producer = jobs_table.insert_paced
        target = system.latency_consumer
        args = (expected, deadline, record, ready)
        ticker = None
    pool = ctx.pool()
    before = table_stats(ctx)
    snap = HeldSnapshot(ctx.dsn) if held else None
    try:
        if ticker is not None:
            ticker.__enter__()
        consumer = threading.Thread(target=target, args=args, daemon=True)
        consumer.start()
        ready.wait(10)
        start_at = time.time() + 0.3
        start_clock = clock() + (start_at - time.time())  # the same instant on the latency clock
        fut = pool.submit(producer, conf, s.held_rate, s.held_seconds, start_at)
        next_sample = start_at
        while not fut.done():
            if isinstance(system, Pglogq):
                row = ctx.sql("SELECT cur_table FROM pglogq.queue WHERE queue_name = %s", (queue,))
                if not rotations or rotations[-1] != row[0][0]:
                    rotations.append(row[0][0])
            if time.time() >= next_sample:
                stats = table_stats(ctx, settle=0)
                dead_over_time.append((time.time() - start_at, sum(
                    v["n_dead_tup"] for k, v in stats.items() if k.startswith(prefix))))
                next_sample += s.held_bucket_seconds
            time.sleep(0.2)
        sent = fut.result()
        consumer.join(max(0.0, deadline - time.time()))
        after = table_stats(ctx)
    finally:
        if snap is not None:
            snap.close()
        if ticker is not None:
            ticker.__exit__(None, None, None)
    with lock:
        got = dict(seen)
    consumed = [t for t in got.values() if t <= start_clock + s.held_seconds]
    rate = len(consumed) / s.held_seconds
    lat = sorted((got[q] - t) * 1000 for q, t in sent if q in got)
    b = s.held_bucket_seconds
    nb = int(s.held_seconds / b)
    buckets = [0] * nb
    for t in got.values():
        k = int((t - start_clock) / b)
        if 0 <= k < nb:
            buckets[k] += 1
    ctx.results.series.append(Series(SCENARIO, label, [b * (i + 0.5) for i in range(nb)],
                                     [c / b for c in buckets], "seconds", "events/s consumed"))
    ctx.results.series.append(Series("held_xmin_dead", label, [t for t, _ in dead_over_time],
                                     [float(d) for _, d in dead_over_time], "seconds",
                                     "dead tuples (the queue's tables)"))
    extra = {"offered": s.held_rate, "sent": len(sent), "consumed_total": len(got),
             "consumed_in_window": len(consumed), "held_xmin": snap.xmin if snap else None,
             "rotations": max(0, len(rotations) - 1), "tables_before": before, "tables_after": after}
    case = f"consumed events/s at {s.held_rate:,}/s offered"
    ctx.results.add(Measure(SCENARIO, case, label, rate, "events/s", extra=extra))
    ctx.results.add(Measure(SCENARIO, "latency p99 during the run", label, percentile(lat, 99), "ms",
                            higher_is_better=False))
    if isinstance(system, Pglogq):
        qid = ctx.sql("SELECT queue_id FROM pglogq.queue WHERE queue_name = %s", (queue,))[0][0]
        ev = [k for k in after if k.startswith(f"pglogq.event_{qid}_")]
        side = [k for k in after if k.startswith("pglogq.") and not k.startswith("pglogq.event_")]
        ctx.results.add(Measure(SCENARIO, "dead tuples at end, event tables", label,
                                sum(after[k]["n_dead_tup"] for k in ev), "tuples", higher_is_better=False))
        ctx.results.add(Measure(SCENARIO, "size at end, metadata + side tables", label,
                                sum(after[k]["bytes"] for k in side), "bytes", higher_is_better=False,
                                extra={k: after[k] for k in side}))
        ctx.results.add(Measure(SCENARIO, "dead tuples at end, metadata + side tables", label,
                                sum(after[k]["n_dead_tup"] for k in side), "tuples", higher_is_better=False))
        ctx.results.add(Measure(SCENARIO, "size at end, event tables", label,
                                sum(after[k]["bytes"] for k in ev), "bytes", higher_is_better=False))
    else:
        j = after.get("public.bench_jobs", {"n_dead_tup": 0, "bytes": 0})
        ctx.results.add(Measure(SCENARIO, "dead tuples at end, event tables", label, j["n_dead_tup"],
                                "tuples", higher_is_better=False))
        ctx.results.add(Measure(SCENARIO, "size at end, event tables", label, j["bytes"], "bytes",
                                higher_is_better=False))
    return rate
