"""Scenario 4, fan-out: 1, 3 and 10 subscribers of the same events.  Bytes stored (pglogq keeps
one copy whatever the number of subscribers) and each subscriber's drain rate."""

from __future__ import annotations

import json

from psycopg.types.json import Jsonb

from tests.harness.bench import payload
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.systems import (
    JobsTable,
    Pglogq,
    PgQue,
    RabbitMQ,
    RawPostgres,
    RedisStreams,
    System,
    jobs_table,
    pglogq_system,
    raw_postgres,
    redis_streams,
)

SCENARIO = "fanout"
EVENT_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)
  FROM pg_inherits i
 WHERE i.inhparent = format('pglogq.event_%%s', (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s))::regclass
"""


def run(ctx: BenchContext, systems: list[System]) -> None:
    by_type = {type(s): s for s in systems}
    n_events = ctx.settings.fanout_events
    plain = by_type.get(RawPostgres)
    ceiling_bytes = plain_copy(ctx, n_events) if plain else None
    bytes_series: dict[str, list[tuple[int, int]]] = {}
    for subs in ctx.settings.fanout_subscribers:
        case_b = f"bytes stored, {subs} subscriber{'s' if subs > 1 else ''}"
        case_r = f"drain rate per subscriber, {subs} subscriber{'s' if subs > 1 else ''}"
        if ceiling_bytes is not None:
            ctx.results.add(Measure(SCENARIO, case_b, "plain table (one copy)", ceiling_bytes[0], "bytes",
                                    ceiling=True, higher_is_better=False))
            ctx.results.add(Measure(SCENARIO, case_r, "plain SELECT", ceiling_bytes[1], "events/s", ceiling=True))
        if Pglogq in by_type:
            b, rates = pglogq_fanout(ctx, subs, n_events)
            add(ctx, case_b, case_r, "pglogq", b, rates, n_events, subs)
            bytes_series.setdefault("pglogq", []).append((subs, b))
        if JobsTable in by_type:
            b, rates = jobs_fanout(ctx, subs, n_events)
            add(ctx, case_b, case_r, by_type[JobsTable].name, b, rates, n_events, subs)
            bytes_series.setdefault(by_type[JobsTable].name, []).append((subs, b))
        pgque = by_type.get(PgQue)
        if isinstance(pgque, PgQue):
            b, rates = pgque.fanout(subs, n_events)
            add(ctx, case_b, case_r, pgque.name, b, rates, n_events, subs)
            bytes_series.setdefault(pgque.name, []).append((subs, b))
        redis = by_type.get(RedisStreams)
        if isinstance(redis, RedisStreams):
            b, rates = redis_fanout(redis, subs, n_events)
            add(ctx, case_b, case_r, redis.name, b, rates, n_events, subs)
            bytes_series.setdefault(redis.name, []).append((subs, b))
    for s in systems:
        s.cleanup()
    for name, points in bytes_series.items():
        ctx.results.series.append(Series(SCENARIO, name, [p[0] for p in points], [p[1] / 1e6 for p in points],
                                         "subscribers", "MB stored"))
    for s in systems:
        if isinstance(s, RabbitMQ):
            ctx.results.skip(SCENARIO, s.name, "fan-out in RabbitMQ is one queue per subscriber behind a fanout "
                             "exchange; its stored bytes cannot be read without the management plugin, so it is "
                             "not measured here")
        elif s.name in ("PGQueuer", "Procrastinate"):
            ctx.results.skip(SCENARIO, s.name, "no fan-out: a job is consumed once, so N subscribers means N jobs "
                             "(measured as the jobs-table baseline's copies)")


def add(ctx: BenchContext, case_b: str, case_r: str, name: str, b: int, rates: list[float], n: int,
        subs: int) -> None:
    ctx.results.add(Measure(SCENARIO, case_b, name, b, "bytes", higher_is_better=False,
                            extra={"events": n, "subscribers": subs, "bytes_per_event": b / n}))
    ctx.results.add(Measure(SCENARIO, case_r, name, sum(rates) / len(rates), "events/s",
                            extra={"per_subscriber": [round(r) for r in rates], "min": min(rates)}))


def plain_copy(ctx: BenchContext, n: int) -> tuple[int, float]:
    ctx.sql("CREATE TABLE bench_fanout_plain (LIKE bench_read INCLUDING ALL)")
    with ctx.connect() as conn, conn.cursor() as cur, \
            cur.copy("COPY bench_fanout_plain (payload) FROM STDIN") as copy:
        for i in range(n):
            copy.write_row((json.dumps(payload.make(i)),))
    ctx.sql("VACUUM ANALYZE bench_fanout_plain")
    size = int(ctx.sql("SELECT pg_total_relation_size('bench_fanout_plain')")[0][0])
    lo, hi = ctx.sql("SELECT min(id) - 1, max(id) FROM bench_fanout_plain")[0]
    count, start, end = raw_postgres.read_range(ctx.dsn, lo, hi, ctx.settings.page_size, 0.0,
                                                table="bench_fanout_plain")
    return size, count / (end - start)


def pglogq_fanout(ctx: BenchContext, subs: int, n: int) -> tuple[int, list[float]]:
    queue = f"fanout_{subs}"
    with ctx.client() as c:
        c.create_queue(queue)
        for i in range(subs):
            c.subscribe(queue, f"s{i}")
        pglogq_system.preload(c, queue, n, ctx.settings.backlog_tick_every)
    size = int(ctx.sql(EVENT_BYTES, (queue,))[0][0])
    rates = []
    for i in range(subs):
        count, start, end = pglogq_system.drain_worker(ctx.dsn, queue, f"s{i}", ctx.settings.page_size, None)
        rates.append(count / (end - start))
    return size, rates


def jobs_fanout(ctx: BenchContext, subs: int, n: int) -> tuple[int, list[float]]:
    """The jobs table needs one row per subscriber and event; one subscriber's share is drained."""
    ctx.sql("TRUNCATE bench_jobs")
    rows = [payload.make(i) for i in range(1000)]
    with ctx.connect() as conn:
        for s in range(subs):
            for start in range(0, n, 1000):
                conn.execute(jobs_table.INSERT_MANY.replace("'bench'", f"'sub{s}'").encode(),
                             (Jsonb(rows[: min(1000, n - start)]),))
    ctx.sql("VACUUM ANALYZE bench_jobs")
    size = int(ctx.sql("SELECT pg_total_relation_size('bench_jobs')")[0][0])
    count, t0, t1 = jobs_table.claim_loop(ctx.dsn, "fan", 0.0, job_type="sub0")
    return size, [count / (t1 - t0)]


def redis_fanout(redis: RedisStreams, subs: int, n: int) -> tuple[int, list[float]]:
    key = f"bench:fanout:{subs}"
    r = redis.client()
    body = [payload.encoded(i) for i in range(1000)]
    for start in range(0, n, 1000):
        pipe = r.pipeline(transaction=False)
        for b in body[: min(1000, n - start)]:
            pipe.xadd(key, {"p": b})
        pipe.execute()
    for i in range(subs):
        r.xgroup_create(key, f"g{i}", id="0")
    size = int(r.memory_usage(key, samples=0) or 0)
    r.close()
    rates = []
    for i in range(subs):
        count, t0, t1 = redis_streams.read_group(redis.conf(), key, f"g{i}", "c", 0.0)
        rates.append(count / (t1 - t0))
    r = redis.client()
    r.delete(key)
    r.close()
    return size, rates
