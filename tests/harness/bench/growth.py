"""Scenario: the cost of each public call as one dimension of a queue grows, the others held small.

Dimensions (each on a queue of its own, dropped before the next dimension): partitions of the
queue, cancel markers kept, idle queues beside it, schedules, dead letters, consumers, ticked
backlog, retries due tomorrow, ticks kept.  Each grows over 4-5 points on a log scale (smaller and
fewer with ``--quick``); at each point every call that the dimension could slow is timed, the
median of ``growth_repeat`` calls on one connection (each in its own transaction; what it needs
before it, such as a fresh event to receive, is done untimed).

The state is made in bulk where the public calls would take minutes (cancel markers, dead
letters, retries and kept ticks are INSERTed as those calls leave them: same tables, same
columns; the triggers that keep counts run); what is timed is always a public call.

For every (dimension, call) curve the report gives the log-log slope (least squares of log time
on log size: 0 = flat, 1 = linear, 2 = quadratic) and its target: <= 0.1 for a call that does a
fixed amount of work (hot path, a page, a probe), <= 1 for a listing that returns or counts
everything.  targets.py turns each into a verdict.

Measures: case ``<dimension>: <call>, <size> <unit>`` (ms), extra ``{dimension, call, size,
target}``.  PgQ 3.5 is not measured here (a note says why).

Standalone:  ``python -m tests.harness.bench.growth --dsn DSN [--quick] [--only ticks,consumers]``."""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, System

SCENARIO = "growth"
PAYLOAD = '{"n": 1}'
HOT = 0.1  # slope target of a call doing a fixed amount of work
LISTING = 1.0  # slope target of a listing (or a count) of everything

Conn = psycopg.Connection[Any]


@dataclass
class Call:
    """One timed call: ``run(conn)`` returns its milliseconds (its own set-up untimed)."""

    name: str
    target: float
    run: Callable[[Conn, str], float]


@dataclass
class Dimension:
    name: str
    unit: str
    full: tuple[int, ...]
    quick: tuple[int, ...]
    setup: Callable[[Conn, str], None]  # the queue, before the first point
    grow: Callable[[Conn, str, int, int], None]  # from have to want
    calls: tuple[Call, ...]


# -- timing helpers ----------------------------------------------------------------------------------


def _ms(conn: Conn, sql: str, args: tuple[Any, ...] = ()) -> float:
    t0 = time.perf_counter()
    conn.execute(sql, args).fetchall()
    return (time.perf_counter() - t0) * 1000


def _stmt(sql: str, args: Callable[[str], tuple[Any, ...]] = lambda q: (q,)) -> Callable[[Conn, str], float]:
    return lambda conn, q: _ms(conn, sql, args(q))


def _one_event(conn: Conn, q: str, key: str | None = None) -> None:
    if key is None:
        conn.execute("SELECT pglogq.send(%s, %s::jsonb)", (q, PAYLOAD))
    else:
        conn.execute("SELECT pglogq.send_keyed(%s, %s::jsonb, %s)", (q, PAYLOAD, key))
    conn.execute("SELECT pglogq.force_tick(%s)", (q,))


def _receive_ack(consumer: str = "c", fresh: bool = True) -> Callable[[Conn, str], float]:
    """A fresh event sent and ticked (untimed), then receive until a page comes (a partitioned
    queue may answer empty from streams with nothing) and ack it: the time of the consumer's loop."""
    def run(conn: Conn, q: str) -> float:
        if fresh:
            _one_event(conn, q, key=f"k{time.perf_counter_ns()}")
        t0 = time.perf_counter()
        for _ in range(2000):
            rows = conn.execute("SELECT batch_id FROM pglogq.receive(%s, %s, 100)", (q, consumer)).fetchall()
            if rows:
                conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
                break
        return (time.perf_counter() - t0) * 1000
    return run


def _fire_due(conn: Conn, q: str) -> float:
    """The daemon's schedule step (pglogq.schedules.fire_due), nothing due: one pass."""
    from pglogq import schedules

    async def one() -> float:
        async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as a:
            t0 = time.perf_counter()
            await schedules.fire_due(a)
            return (time.perf_counter() - t0) * 1000

    return asyncio.run(one())


def _qid(conn: Conn, q: str) -> int:
    row = conn.execute("SELECT queue_id FROM pglogq.queue WHERE queue_name = %s", (q,)).fetchone()
    assert row is not None
    return int(row[0])


def _sub(conn: Conn, q: str, c: str = "c") -> int:
    row = conn.execute("SELECT sub_id FROM pglogq.subscription s JOIN pglogq.queue q USING (queue_id)"
                       " WHERE q.queue_name = %s AND s.consumer_name = %s AND s.parent_id IS NULL", (q, c)).fetchone()
    assert row is not None
    return int(row[0])


def _plain(conn: Conn, q: str) -> None:
    conn.execute("SELECT pglogq.create_queue(%s)", (q,))
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (q,))


def _send_many(conn: Conn, q: str, n: int, chunk: int = 10_000) -> None:
    while n > 0:
        k = min(n, chunk)
        conn.execute("SELECT pglogq.send_batch(%s, array_fill(%s::jsonb, ARRAY[%s]))", (q, PAYLOAD, k))
        n -= k


# -- the dimensions ------------------------------------------------------------------------------------


def _grow_partitions(conn: Conn, q: str, have: int, want: int) -> None:
    # the layout changes only while nothing is in flight: a new queue per point
    conn.execute("SELECT pglogq.drop_queue(%s, true)", (q,))
    conn.execute("SELECT pglogq.create_queue(%s)", (q,))
    if want > 1:
        conn.execute("SELECT pglogq.set_queue_config(%s, 'partitions', %s)", (q, str(want)))
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (q,))


def _grow_cancels(conn: Conn, q: str, have: int, want: int) -> None:
    """Markers of events sent and still stored, that the consumer has passed (a mass cancel kept
    until rotation): what cancel leaves, inserted in bulk."""
    row = conn.execute("SELECT coalesce(pg_sequence_last_value(q.event_seq), 0) FROM pglogq.queue q"
                       " WHERE q.queue_name = %s", (q,)).fetchone()
    assert row is not None
    _send_many(conn, q, want - have)
    with conn.transaction():
        # without cancel's re-check at commit (a deferred trigger per marker: minutes for 100,000);
        # no consumer was handed these events, so it had nothing to refuse
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid)"
            " SELECT e.ev_queue, e.ev_id, e.ev_txid FROM pglogq.event e WHERE e.ev_queue = %s AND e.ev_id > %s",
            (_qid(conn, q), row[0]))
    conn.execute("SELECT pglogq.force_tick(%s)", (q,))
    conn.execute("SELECT pglogq.seek(%s, 'c', 'latest', force => true)", (q,))
    conn.execute("ANALYZE pglogq.cancelled")


def _grow_idle(conn: Conn, q: str, have: int, want: int) -> None:
    for i in range(max(have, 1), want):
        _plain(conn, f"{q}_{i:05d}")
    conn.execute("SELECT pglogq.ticker()")  # the first ticks of the new queues: not idle work


def _grow_schedules(conn: Conn, q: str, have: int, want: int) -> None:
    conn.execute("SELECT count(*) FROM (SELECT pglogq.schedule_add(%s, 's' || g, '0 0 1 1 *', %s::jsonb)"
                 "                        FROM generate_series(%s::int, %s::int) g) x", (q, PAYLOAD, have + 1, want))
    _fire_due_plans(conn)


def _fire_due_plans(conn: Conn) -> None:
    """The daemon plans each new schedule's next due time in its passes: until none is left."""
    for _ in range(1000):
        from pglogq import schedules

        async def one() -> dict[str, int]:
            async with await psycopg.AsyncConnection.connect(conn.info.dsn, autocommit=True) as a:
                return await schedules.fire_due(a)

        if not any(asyncio.run(one()).values()):
            return


def _grow_dead(conn: Conn, q: str, have: int, want: int) -> None:
    conn.execute(
        "INSERT INTO pglogq.dead_letter (queue_id, sub_id, msg_id, ev_time, ev_type, ev_payload, ev_priority,"
        "                                retry_count, reason, first_failed_at, failed_at)"
        " SELECT %s, %s, g, now(), CASE WHEN g %% 2 = 0 THEN 'even' ELSE 'odd' END, %s::jsonb, 100, 5,"
        "        'boom ' || g, now(), now() - (%s - g) * interval '1 ms'"
        "   FROM generate_series(%s::int, %s::int) g",
        (_qid(conn, q), _sub(conn, q), PAYLOAD, want, have + 1, want))
    conn.execute("ANALYZE pglogq.dead_letter")


def _grow_consumers(conn: Conn, q: str, have: int, want: int) -> None:
    conn.execute("SELECT count(pglogq.subscribe(%s, 'c' || g)) FROM generate_series(%s::int, %s::int) g",
                 (q, max(have, 1) + 1, want))


def _grow_backlog(conn: Conn, q: str, have: int, want: int) -> None:
    _send_many(conn, q, want - have)
    conn.execute("SELECT pglogq.force_tick(%s)", (q,))


def _grow_retries(conn: Conn, q: str, have: int, want: int) -> None:
    conn.execute(
        "INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time, ev_payload, ev_priority,"
        "                          reason)"
        " SELECT %s, %s, g, now() + interval '1 day' + g * interval '1 ms', 1, now(), %s::jsonb, 100, 'later'"
        "   FROM generate_series(%s::int, %s::int) g",
        (_qid(conn, q), _sub(conn, q), PAYLOAD, have + 1, want))
    conn.execute("ANALYZE pglogq.retry")


def _grow_ticks(conn: Conn, q: str, have: int, want: int) -> None:
    """A consumer far behind keeps every tick: ``want`` ticks 10 ms apart up to now, each closing
    one event (ids drawn, the events rotated away), then a real send and tick after them."""
    conn.execute("SELECT pglogq.drop_queue(%s, true)", (q,))
    _plain(conn, q)
    conn.execute(
        "INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq, tick_event_total)"
        " SELECT l.queue_id, 1 + g, clock_timestamp() - (%(n)s + 1 - g) * interval '10 ms', l.tick_snapshot, g, g"
        "   FROM (SELECT t.* FROM pglogq.tick t WHERE t.queue_id = %(qid)s ORDER BY t.tick_id DESC LIMIT 1) l,"
        "        generate_series(1, %(n)s::int) g", {"n": want, "qid": _qid(conn, q)})
    conn.execute("SELECT setval(q.event_seq, %s + 1) FROM pglogq.queue q WHERE q.queue_name = %s", (want, q))
    _one_event(conn, q)


def _middle_dead(conn: Conn, q: str) -> float:
    row = conn.execute("SELECT min(dead_id) + (max(dead_id) - min(dead_id)) / 2 FROM pglogq.dead_letter d"
                       " WHERE d.queue_id = %s", (_qid(conn, q),)).fetchone()
    assert row is not None
    return _ms(conn, "SELECT * FROM pglogq.dlq_search(%s, before_dead_id => %s)", (q, row[0]))


def _cancel(conn: Conn, q: str) -> float:
    row = conn.execute("SELECT pglogq.send(%s, %s::jsonb)", (q, PAYLOAD)).fetchone()
    assert row is not None
    return _ms(conn, "SELECT pglogq.cancel(%s, %s)", (q, row[0]))


QUEUE_INFO = Call("queue_info(q)", HOT, _stmt("SELECT * FROM pglogq.queue_info(%s)"))
CONSUMER_INFO = Call("consumer_info(q)", HOT, _stmt("SELECT * FROM pglogq.consumer_info(%s)"))
RECEIVE = Call("receive + ack", HOT, _receive_ack())

DIMENSIONS: tuple[Dimension, ...] = (
    Dimension("partitions", "partitions", (1, 4, 16, 64, 256), (1, 4, 16), _plain, _grow_partitions,
              (Call("receive (until the new event's page) + ack", HOT, _receive_ack()),
               QUEUE_INFO, CONSUMER_INFO)),
    Dimension("cancel markers", "markers", (10, 100, 1_000, 10_000, 100_000), (10, 100, 1_000), _plain,
              _grow_cancels,
              (RECEIVE, Call("cancel", HOT, _cancel),
               Call("maint_prune(q)", HOT, _stmt("SELECT pglogq.maint_prune(%s)")))),
    Dimension("idle queues", "queues", (1, 3, 10, 30, 100), (1, 3, 10), _plain, _grow_idle,
              (Call("ticker() idle pass", HOT, _stmt("SELECT pglogq.ticker()", lambda q: ())),
               Call("maint_operations() idle", HOT, _stmt("SELECT * FROM pglogq.maint_operations()", lambda q: ())),
               RECEIVE)),
    Dimension("schedules", "schedules", (10, 100, 1_000, 10_000), (10, 100), _plain, _grow_schedules,
              (Call("schedule step, nothing due (fire_due)", HOT, _fire_due),
               Call("schedule_list(q, 50)", HOT, _stmt("SELECT * FROM pglogq.schedule_list(%s, 50)")),
               Call("schedule_list(q)", LISTING, _stmt("SELECT * FROM pglogq.schedule_list(%s)")))),
    Dimension("dead letters", "dead letters", (10, 100, 1_000, 10_000, 100_000, 1_000_000), (10, 100, 1_000), _plain,
              _grow_dead,
              (Call("dlq_search(q) first page", HOT, _stmt("SELECT * FROM pglogq.dlq_search(%s)")),
               Call("dlq_search(q) page half-way", HOT, _middle_dead),
               Call("dlq_search(q, type) first page", HOT,
                    _stmt("SELECT * FROM pglogq.dlq_search(%s, msg_type => 'even')")),
               Call("dlq_count(q)", HOT, _stmt("SELECT pglogq.dlq_count(%s)")),
               Call("dlq_purge(q) of nothing", HOT,
                    _stmt("SELECT pglogq.dlq_purge(%s, older_than => interval '100 years')")),
               QUEUE_INFO, CONSUMER_INFO)),
    Dimension("consumers", "consumers", (1, 10, 100, 1_000), (1, 10, 100), _plain, _grow_consumers,
              (Call("consumer_info() of all", LISTING, _stmt("SELECT * FROM pglogq.consumer_info()", lambda q: ())),
               Call("consumer_info(q, c)", HOT, _stmt("SELECT * FROM pglogq.consumer_info(%s, 'c')")),
               RECEIVE, QUEUE_INFO)),
    Dimension("backlog", "events", (1_000, 10_000, 100_000, 1_000_000), (1_000, 10_000), _plain, _grow_backlog,
              (Call("receive + ack (a page of 100)", HOT, _receive_ack(fresh=False)),
               Call("jobs(q) first page", HOT, _stmt("SELECT * FROM pglogq.jobs(%s)")),
               QUEUE_INFO, CONSUMER_INFO)),
    Dimension("retries due tomorrow", "retries", (10, 100, 1_000, 10_000, 100_000), (10, 100, 1_000), _plain,
              _grow_retries,
              (Call("maint_operations()", HOT, _stmt("SELECT * FROM pglogq.maint_operations()", lambda q: ())),
               Call("maint_pump(), nothing due", HOT, _stmt("SELECT pglogq.maint_pump()", lambda q: ())),
               Call("queue_info(q) (counts them)", LISTING, _stmt("SELECT * FROM pglogq.queue_info(%s)")),
               Call("consumer_info(q) (counts them)", LISTING, _stmt("SELECT * FROM pglogq.consumer_info(%s)")),
               RECEIVE)),
    Dimension("ticks kept", "ticks", (100, 1_000, 10_000, 100_000), (100, 1_000), _plain, _grow_ticks,
              (Call("seek_plan(by_events, half-way)", HOT, lambda c, q: _ms(
                  c, "SELECT * FROM pglogq.seek_plan(%s, 'c', by_events => (SELECT max(tick_event_total) / 2"
                     " FROM pglogq.tick t WHERE t.queue_id = %s))", (q, _qid(c, q)))),
               Call("seek_plan('1 second ago')", HOT,
                    _stmt("SELECT * FROM pglogq.seek_plan(%s, 'c', to_position => '1 second ago')")),
               Call("lookup of an old event", HOT, _stmt("SELECT * FROM pglogq.lookup(%s, 5)")),
               QUEUE_INFO, CONSUMER_INFO, RECEIVE)),
)


# -- measuring and the slopes ----------------------------------------------------------------------------


def case(dim: Dimension, call: str, size: int) -> str:
    return f"{dim.name}: {call}, {size:,} {dim.unit}"


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) on log(size); None with fewer than two sizes."""
    pts = [(math.log(s), math.log(max(v, 1e-3))) for s, v in points if s > 0 and v == v]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def curves(measures: list[Measure]) -> dict[tuple[str, str], tuple[float, list[tuple[int, float]]]]:
    """(dimension, call) -> (target, [(size, ms)]) from this scenario's measures."""
    out: dict[tuple[str, str], tuple[float, list[tuple[int, float]]]] = {}
    for m in measures:
        if m.scenario != SCENARIO or m.unit != "ms":
            continue
        key = (str(m.extra["dimension"]), str(m.extra["call"]))
        out.setdefault(key, (float(m.extra["target"]), []))[1].append((int(m.extra["size"]), m.value))
    return out


def measure(dsn: str, dims: tuple[Dimension, ...], quick: bool, repeat: int,
            emit: Callable[[str, float, str, dict[str, Any]], object], note: Callable[[str], None],
            budget_s: float, keep: bool = False) -> None:
    for dim in dims:
        q = "g_" + dim.name.replace(" ", "_")
        t_dim = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            dim.setup(conn, q)
            have = 0
            for size in dim.quick if quick else dim.full:
                t0 = time.perf_counter()
                try:
                    dim.grow(conn, q, have, size)
                except psycopg.Error as exc:  # e.g. out of shared memory on a busy server: the next dimension
                    note(f"{dim.name}: growing to {size:,} {dim.unit} failed: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}")
                    break
                have = size
                grown = time.perf_counter() - t0
                for call in dim.calls:
                    try:
                        call.run(conn, q)  # warm-up: plans, caches
                        times = [call.run(conn, q) for _ in range(repeat)]
                    except psycopg.Error as exc:
                        note(f"{dim.name}: {call.name} failed at {size:,} {dim.unit}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                        continue
                    emit(case(dim, call.name, size), statistics.median(times), "ms",
                         {"dimension": dim.name, "call": call.name, "size": size, "target": call.target,
                          "samples": len(times)})
                if time.perf_counter() - t_dim > budget_s:
                    note(f"{dim.name}: stopped after {size:,} {dim.unit} (its time budget of {budget_s:.0f} s; "
                         f"growing to it took {grown:.0f} s)")
                    break
            if keep and dim is dims[-1]:
                break
            conn.execute("SELECT pglogq.drop_queue(%s, true)", (q,))
            for (name,) in conn.execute("SELECT queue_name FROM pglogq.queue WHERE queue_name LIKE %s",
                                        (q + "_%",)).fetchall():
                conn.execute("SELECT pglogq.drop_queue(%s, true)", (name,))
            conn.execute("SELECT pglogq.maint_rotate_meta(true)")  # as the daemon does: drops their tick tables
        note(f"{dim.name}: {time.perf_counter() - t_dim:.0f} s")


def slope_lines(measures: list[Measure]) -> list[str]:
    """One line per curve: sizes, medians, slope, target, met or not."""
    lines = []
    for (dim, call), (target, pts) in curves(measures).items():
        s = slope(pts)
        if s is None:
            continue
        pts.sort()
        figures = ", ".join(f"{n:,}: {v:.2f}" for n, v in pts)
        lines.append(f"slope {s:+.2f} (target <= {target:g}: {'met' if s <= target else 'MISSED'}) "
                     f"{dim}: {call} [ms at {figures}]")
    return lines


def _pgq_note(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'pgq'").fetchone()
    if row is None:
        return "PgQ 3.5: not installed on this server, not measured"
    return f"PgQ {row[0]}: installed, but this scenario does not measure it yet"


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
        db = f"pglogq_bench_growth_{os.getpid()}"
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{db}"'.encode())
    from psycopg.conninfo import make_conninfo

    import pglogq

    dsn = make_conninfo(ctx.admin_dsn, dbname=db)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        measure(dsn, DIMENSIONS, s.quick, 3 if s.quick else 7,
                lambda c, v, unit, extra: ctx.results.add(
                    Measure(SCENARIO, c, "pglogq", v, unit, higher_is_better=False, extra=extra)),
                lambda text: ctx.results.note(SCENARIO, text), 15 if s.quick else 60)
        for line in slope_lines(ctx.results.measures):
            ctx.results.note(SCENARIO, line)
        ctx.results.skip(SCENARIO, "PgQ 3.5", _pgq_note(dsn))
    finally:
        with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from psycopg.conninfo import make_conninfo

    import pglogq
    from pglogq.dsn import resolve_dsn

    ap = argparse.ArgumentParser(description="cost of each call as one dimension of a queue grows")
    ap.add_argument("--dsn", help="a server (its maintenance database); a scratch database is made there")
    ap.add_argument("--db", default="pglogq_measure_growth")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated dimension names")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database (and the last queue)")
    args = ap.parse_args(argv)
    server = resolve_dsn(args.dsn)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{args.db}"'.encode())
    dsn = make_conninfo(server, dbname=args.db)
    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    dims = tuple(d for d in DIMENSIONS if not wanted or d.name in wanted)
    got: list[Measure] = []

    def emit(c: str, v: float, unit: str, extra: dict[str, Any]) -> None:
        got.append(Measure(SCENARIO, c, "pglogq", v, unit, extra=extra))
        print(f"{c:75} {v:10.2f} {unit}", flush=True)

    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        measure(dsn, dims, args.quick, args.repeat, emit, lambda text: print(f"note: {text}", flush=True),
                15 if args.quick else 60, args.keep)
        print("\n".join(slope_lines(got)))
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)'.encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
