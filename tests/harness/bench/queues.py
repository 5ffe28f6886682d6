"""Scenario: the cost of a call on one queue as the database holds more queues.

The database grows to 1, 100 and 1,000 queues (``queue_counts``; 10,000 for send, receive and ack
only when ``queue_hot_counts`` asks, e.g. ``--queues-hot 10000``).  Every queue has a consumer and
one ticked event, as a database of one queue per job class or per tenant has.  On one queue,
``target``, each public call is timed: the first call of a new session (median of a few sessions)
and the steady median of repeated calls on one connection, each in its own transaction; and the
locks its transaction holds at its end (``pg_locks`` of the backend, counted before the commit).
Besides: the ticker's idle pass (``pglogq.ticker()`` and ``maint_operations()``, nothing to do),
``queue_info()`` and ``consumer_info()`` of every queue, ``pglogq status --json`` (the command,
a process of its own) and the dashboard's overview (server time), which are listings and may grow
linearly with the queues.

PgQ beside it, where the server has the ``pgq`` extension (PgQ 3.5 from Debian's
``postgresql-15-pgq3``): the same database grows as many PgQ queues (each with a consumer and
one ticked event) and PgQ's calls that have a pglogq counterpart are timed the same way
(``insert_event`` for send, ``force_tick`` with ``ticker(q)`` for force_tick, ``next_batch`` with
``get_batch_events`` for receive, ``finish_batch`` for ack, ``event_retry`` for nack,
``get_queue_info``/``get_consumer_info`` of one queue and of all, ``ticker()`` and
``maint_operations()`` idle): system ``PgQ``.

Measures: case ``<call>: steady, <N> queues`` (ms), ``<call>: first call of a session, <N>
queues`` (ms), ``<call>: locks, <N> queues`` (locks); targets.py compares each with its 1-queue
figure.  A call that took longer than ``SLOW_S`` once is not repeated at that size, and not
measured at the larger ones (said in a note).

Standalone (profiling):  ``python -m tests.harness.bench.queues --dsn DSN --counts 1,100``."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from tests.harness.bench import pgq_extension
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, System

SCENARIO = "queues"
TARGET = "target"
CONSUMER = "c"
SLOW_S = 5.0  # a call slower than this once is not repeated (the cost before per-queue plans)
PAYLOAD = '{"n": 1}'
LOCKS = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"

Conn = psycopg.Connection[Any]


@dataclass
class Call:
    """One public call on the target queue: ``prepare`` (untimed) returns the arguments of
    ``sql``, ``after`` (untimed) cleans up what the call left open."""

    name: str
    sql: str
    prepare: Callable[[Conn], tuple[Any, ...]]
    after: Callable[[Conn, tuple[Any, ...]], None] | None = None
    hot: bool = False  # measured at queue_hot_counts too


def _send(conn: Conn) -> int:
    row = conn.execute("SELECT pglogq.send(%s, %s::jsonb)", (TARGET, PAYLOAD)).fetchone()
    assert row is not None
    return int(row[0])


def _page(conn: Conn, start_first: int | None = None) -> tuple[int, int, str]:
    """A page of one event of the target's consumer: (batch_id, msg_id, txid)."""
    _send(conn)
    conn.execute("SELECT pglogq.force_tick(%s)", (TARGET,))
    rows = conn.execute("SELECT batch_id, msg_id, txid::text FROM pglogq.receive(%s, %s, 100, NULL, %s)",
                        (TARGET, CONSUMER, start_first)).fetchall()
    assert rows, "the target queue's consumer got no page"
    return int(rows[-1][0]), int(rows[-1][1]), str(rows[-1][2])


def _ack(conn: Conn, args: tuple[Any, ...]) -> None:
    conn.execute("SELECT pglogq.ack(%s)", (args[0],))


def _drain(conn: Conn, _args: tuple[Any, ...] = ()) -> None:
    while True:
        rows = conn.execute("SELECT batch_id FROM pglogq.receive(%s, %s, 1000)", (TARGET, CONSUMER)).fetchall()
        if not rows:
            return
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))


def _ticked(conn: Conn) -> tuple[Any, ...]:
    _send(conn)
    conn.execute("SELECT pglogq.force_tick(%s)", (TARGET,))
    return (TARGET, CONSUMER)


CALLS: tuple[Call, ...] = (
    Call("send", "SELECT pglogq.send(%s, %s::jsonb)", lambda c: (TARGET, PAYLOAD), hot=True),
    Call("send_batch (10 events)", "SELECT pglogq.send_batch(%s, %s::jsonb[])",
         lambda c: (TARGET, [PAYLOAD] * 10)),
    Call("force_tick", "SELECT pglogq.force_tick(%s)", lambda c: (_send(c), (TARGET,))[1]),
    Call("receive", "SELECT * FROM pglogq.receive(%s, %s, 100)", _ticked, after=_drain, hot=True),
    Call("ack", "SELECT pglogq.ack(%s)", lambda c: _page(c)[:1], hot=True),
    Call("nack", "SELECT pglogq.nack(%s, %s, interval '1 hour')", lambda c: _page(c)[:2], after=_ack),
    Call("heartbeat", "SELECT pglogq.heartbeat(%s)", lambda c: _page(c)[:1], after=_ack),
    Call("mark_started", "SELECT pglogq.mark_started(%s, %s, %s::xid8)", lambda c: _page(c, 0), after=_ack),
    Call("cancel", "SELECT pglogq.cancel(%s, %s)", lambda c: (TARGET, _send(c))),
    Call("lookup", "SELECT * FROM pglogq.lookup(%s, %s)", lambda c: (TARGET, _send(c))),
    Call("consumer_info(q)", "SELECT * FROM pglogq.consumer_info(%s)", lambda c: (TARGET,)),
    Call("queue_info(q)", "SELECT * FROM pglogq.queue_info(%s)", lambda c: (TARGET,)),
    Call("jobs(q)", "SELECT * FROM pglogq.jobs(%s)", lambda c: (TARGET,)),
    Call("seek_plan(q, c, latest)", "SELECT * FROM pglogq.seek_plan(%s, %s, 'latest')",
         lambda c: (TARGET, CONSUMER)),
    Call("dlq_count(q)", "SELECT pglogq.dlq_count(%s)", lambda c: (TARGET,)),
    Call("stored_events(q)", "SELECT pglogq.stored_events(%s)", lambda c: (TARGET,)),
)
LISTINGS: tuple[tuple[str, str], ...] = (
    ("ticker() idle pass", "SELECT pglogq.ticker()"),
    ("maint_operations() idle pass", "SELECT count(*) FROM pglogq.maint_operations()"),
    ("queue_info() of every queue", "SELECT count(*) FROM pglogq.queue_info()"),
    ("consumer_info() of every queue", "SELECT count(*) FROM pglogq.consumer_info()"),
)


def _pgq_send(conn: Conn) -> int:
    row = conn.execute("SELECT pgq.insert_event(%s, 'n', %s)", (TARGET, PAYLOAD)).fetchone()
    assert row is not None
    return int(row[0])


# a tick now: PgQ's ticker(q) ticks only past its lag or count thresholds, which force_tick's
# jump of the queue's event sequence passes
PGQ_TICK = "SELECT pgq.force_tick(%s), pgq.ticker(%s)"


def _pgq_tick(conn: Conn, name: str = TARGET) -> None:
    conn.execute(PGQ_TICK, (name, name))


def _pgq_batch(conn: Conn) -> tuple[int, int]:
    """A PgQ batch of the target's consumer holding one new event: (batch_id, ev_id)."""
    _pgq_send(conn)
    _pgq_tick(conn)
    while True:  # batches of earlier ticks first (each call's own leftovers)
        row = conn.execute("SELECT pgq.next_batch(%s, %s)", (TARGET, CONSUMER)).fetchone()
        assert row is not None and row[0] is not None, "the target PgQ queue's consumer got no batch"
        events = conn.execute("SELECT ev_id FROM pgq.get_batch_events(%s)", (row[0],)).fetchall()
        if events:
            return int(row[0]), int(events[-1][0])
        conn.execute("SELECT pgq.finish_batch(%s)", (row[0],))


def _pgq_finish(conn: Conn, args: tuple[Any, ...]) -> None:
    conn.execute("SELECT pgq.finish_batch(%s)", (args[0],))


def _pgq_drain(conn: Conn, _args: tuple[Any, ...] = ()) -> None:
    while True:
        row = conn.execute("SELECT pgq.next_batch(%s, %s)", (TARGET, CONSUMER)).fetchone()
        if row is None or row[0] is None:
            return
        conn.execute("SELECT pgq.finish_batch(%s)", (row[0],))


def _pgq_ticked(conn: Conn) -> tuple[Any, ...]:
    _pgq_drain(conn)
    _pgq_send(conn)
    _pgq_tick(conn)
    return (TARGET, CONSUMER)


# PgQ's calls named after their pglogq counterparts (the cases pair up in the report)
PGQ_CALLS: tuple[Call, ...] = (
    Call("send", "SELECT pgq.insert_event(%s, 'n', %s)", lambda c: (TARGET, PAYLOAD), hot=True),
    Call("force_tick", PGQ_TICK, lambda c: (_pgq_send(c), (TARGET, TARGET))[1]),
    Call("receive", "SELECT * FROM pgq.get_batch_events(pgq.next_batch(%s, %s))", _pgq_ticked,
         after=_pgq_drain, hot=True),
    Call("ack", "SELECT pgq.finish_batch(%s)", lambda c: _pgq_batch(c)[:1], hot=True),
    Call("nack", "SELECT pgq.event_retry(%s, %s, 3600)", _pgq_batch, after=_pgq_finish),
    Call("consumer_info(q)", "SELECT * FROM pgq.get_consumer_info(%s)", lambda c: (TARGET,)),
    Call("queue_info(q)", "SELECT * FROM pgq.get_queue_info(%s)", lambda c: (TARGET,)),
)
PGQ_LISTINGS: tuple[tuple[str, str], ...] = (
    ("ticker() idle pass", "SELECT pgq.ticker()"),
    ("maint_operations() idle pass", "SELECT count(*) FROM pgq.maint_operations()"),
    ("queue_info() of every queue", "SELECT count(*) FROM pgq.get_queue_info()"),
    ("consumer_info() of every queue", "SELECT count(*) FROM pgq.get_consumer_info()"),
)


@dataclass(frozen=True)
class Making:
    """How a system makes a queue like the others of the database: a consumer and one ticked
    event.  Each statement takes the named parameters q (the queue), c (the consumer) and p (the
    payload)."""

    schema: str
    create: str
    subscribe: str
    send: str
    tick: str


PGLOGQ_MAKING = Making("pglogq", "SELECT pglogq.create_queue(%(q)s)", "SELECT pglogq.subscribe(%(q)s, %(c)s)",
                       "SELECT pglogq.send(%(q)s, %(p)s::jsonb)", "SELECT pglogq.force_tick(%(q)s)")
PGQ_MAKING = Making("pgq", "SELECT pgq.create_queue(%(q)s)", "SELECT pgq.register_consumer(%(q)s, %(c)s)",
                    "SELECT pgq.insert_event(%(q)s, 'n', %(p)s)", "SELECT pgq.force_tick(%(q)s), pgq.ticker(%(q)s)")


def grow(conn: Conn, have: int, want: int, making: Making = PGLOGQ_MAKING) -> int:
    """Add queues until the database holds ``want`` (the target included): each with a consumer
    and one ticked event.  One transaction per queue (a create takes a dozen relation locks)."""
    if have == 0:
        args = {"q": TARGET, "c": CONSUMER, "p": PAYLOAD}
        conn.execute(making.create, args)
        conn.execute(making.subscribe, args)
        have = 1
    for i in range(have, want):
        args = {"q": f"other_{i:05d}", "c": CONSUMER, "p": PAYLOAD}
        with conn.transaction():
            conn.execute(making.create, args)
            conn.execute(making.subscribe, args)
        conn.execute(making.send, args)
        conn.execute(making.tick, args)
    conn.execute(f"ANALYZE {making.schema}.queue".encode())
    return want


def _timed(conn: Conn, call: Call) -> tuple[float, int]:
    """One call in its own transaction: (milliseconds, locks held at its end)."""
    args = call.prepare(conn)
    t0 = time.perf_counter()
    with conn.transaction():
        conn.execute(call.sql, args).fetchall()
        ms = (time.perf_counter() - t0) * 1000
        row = conn.execute(LOCKS).fetchone()
    if call.after is not None:
        call.after(conn, args)
    return ms, int(row[0]) if row else -1


def measure_calls(dsn: str, n: int, repeat: int, sessions: int, calls: tuple[Call, ...],
                  skip: dict[str, str]) -> list[tuple[str, float, str, dict[str, Any]]]:
    """Every call of ``calls`` not in ``skip``: (case, value, unit, extra) rows."""
    out: list[tuple[str, float, str, dict[str, Any]]] = []
    for call in calls:
        if call.name in skip:
            continue
        try:
            out.extend(_measure_call(dsn, n, repeat, sessions, call, skip))
        except psycopg.Error as exc:  # e.g. "out of shared memory": the locks of a plan over every queue
            skip[call.name] = f"failed at {n:,} queues: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return out


def _measure_call(dsn: str, n: int, repeat: int, sessions: int, call: Call,
                  skip: dict[str, str]) -> list[tuple[str, float, str, dict[str, Any]]]:
    out: list[tuple[str, float, str, dict[str, Any]]] = []
    first: list[float] = []
    for _ in range(sessions):
        with psycopg.connect(dsn, autocommit=True) as conn:
            args = call.prepare(conn)
            with psycopg.connect(dsn, autocommit=True) as fresh:
                fresh.execute("SELECT 1")  # the connection's own set-up is not the call's
                t0 = time.perf_counter()
                fresh.execute(call.sql, args).fetchall()
                first.append((time.perf_counter() - t0) * 1000)
            if call.after is not None:
                call.after(conn, args)
        if first[-1] > SLOW_S * 1000:
            break
    steady: list[float] = []
    locks: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(repeat if first[-1] <= SLOW_S * 1000 else 1):
            ms, held = _timed(conn, call)
            steady.append(ms)
            locks.append(held)
            if ms > SLOW_S * 1000:
                break
    worst = max(max(first), max(steady))
    if worst > SLOW_S * 1000:
        skip[call.name] = f"took {worst / 1000:.1f} s at {n:,} queues"
    extra = {"queues": n, "samples": len(steady)}
    out.append((f"{call.name}: first call of a session, {n:,} queues", statistics.median(first), "ms",
                {**extra, "samples": len(first)}))
    out.append((f"{call.name}: steady, {n:,} queues", statistics.median(steady), "ms", extra))
    out.append((f"{call.name}: locks, {n:,} queues", float(max(locks)), "locks", extra))
    return out


def measure_listings(dsn: str, n: int, repeat: int,
                     listings: tuple[tuple[str, str], ...] = LISTINGS,
                     pglogq_only: bool = True) -> list[tuple[str, float, str, dict[str, Any]]]:
    out: list[tuple[str, float, str, dict[str, Any]]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        with contextlib.suppress(psycopg.Error):
            conn.execute(listings[0][1])  # the keep-alive ticks due now, then idle passes
        for name, sql in listings:
            times = []
            try:
                for _ in range(max(3, repeat // 3)):
                    t0 = time.perf_counter()
                    conn.execute(sql.encode()).fetchall()
                    times.append((time.perf_counter() - t0) * 1000)
            except psycopg.Error as exc:  # e.g. out of shared memory: one transaction locks every queue's tables
                out.append((f"{name} FAILED ({type(exc).__name__}), {n:,} queues", float("nan"), "ms",
                            {"queues": n, "error": str(exc).splitlines()[0]}))
                continue
            out.append((f"{name}, {n:,} queues", statistics.median(times), "ms", {"queues": n}))
    if not pglogq_only:
        return out
    t0 = time.perf_counter()
    command = [sys.executable, "-c", "from pglogq.cli import main; main()", "status", "--json", "--dsn", dsn]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    ms = (time.perf_counter() - t0) * 1000
    try:
        json.loads(proc.stdout)  # exit status 1/2 (something needs attention) is still a full answer
        out.append((f"pglogq status --json (a process), {n:,} queues", ms, "ms", {"queues": n}))
    except ValueError:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        out.append((f"pglogq status --json FAILED, {n:,} queues", float("nan"), "ms", {"queues": n, "error": why}))
    out.extend(_overview(dsn, n))
    return out


def _overview(dsn: str, n: int) -> list[tuple[str, float, str, dict[str, Any]]]:
    """The dashboard's overview page, server time (needs the dashboard extra)."""
    try:
        import re
        import urllib.request

        from pglogq.dashboard import create_app
        from tests.support.dashboard import serve
    except ImportError:
        return []
    import urllib.error

    times = []
    with serve(create_app(dsn, sample_interval=0)) as base:
        for _ in range(4):
            try:
                with urllib.request.urlopen(base + "/", timeout=600) as r:
                    r.read()
                    m = re.search(r"dur=([0-9.]+)", r.headers.get("Server-Timing", ""))
                    if m:
                        times.append(float(m.group(1)))
            except urllib.error.HTTPError as exc:  # e.g. a listing out of the lock table: a 500
                return [(f"dashboard overview FAILED, {n:,} queues", float("nan"), "ms",
                         {"queues": n, "error": f"HTTP {exc.code}"})]
    if len(times) < 2:
        return []
    return [(f"dashboard overview (server time), {n:,} queues", statistics.median(times[1:]), "ms",
             {"queues": n})]


def measure(dsn: str, counts: tuple[int, ...], hot_counts: tuple[int, ...], repeat: int, sessions: int,
            emit: Callable[[str, str, float, str, dict[str, Any]], object], note: Callable[[str], None],
            pgq: bool = True) -> None:
    """Grow the database to each size, then time pglogq's calls (system ``pglogq``) and, when
    ``pgq`` and the server has PgQ, PgQ's (system ``PgQ``)."""
    have = have_pgq = 0
    skip: dict[str, str] = {}
    skip_pgq: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        pgq = pgq and pgq_extension.install(conn)
    for n in sorted({*counts, *hot_counts}):
        with psycopg.connect(dsn, autocommit=True) as conn:
            t0 = time.perf_counter()
            have = grow(conn, have, n)
            note(f"grew to {n:,} queues in {time.perf_counter() - t0:.0f} s")
            if pgq:
                t0 = time.perf_counter()
                have_pgq = grow(conn, have_pgq, n, PGQ_MAKING)
                note(f"grew to {n:,} PgQ queues in {time.perf_counter() - t0:.0f} s")
        calls = CALLS if n in counts else tuple(c for c in CALLS if c.hot)
        for row in measure_calls(dsn, n, repeat, sessions, calls, skip):
            emit("pglogq", *row)
        if n in counts:
            for row in measure_listings(dsn, n, repeat):
                emit("pglogq", *row)
        if pgq:
            calls = PGQ_CALLS if n in counts else tuple(c for c in PGQ_CALLS if c.hot)
            for row in measure_calls(dsn, n, repeat, sessions, calls, skip_pgq):
                emit("PgQ", *row)
            if n in counts:
                for row in measure_listings(dsn, n, repeat, PGQ_LISTINGS, pglogq_only=False):
                    emit("PgQ", *row)
    for name, why in skip.items():
        note(f"{name}: not repeated, nor measured at larger sizes: {why}")
    for name, why in skip_pgq.items():
        note(f"PgQ {name}: not repeated, nor measured at larger sizes: {why}")


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
        db = f"pglogq_bench_queues_{os.getpid()}"
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{db}"'.encode())
    from psycopg.conninfo import make_conninfo

    import pglogq

    dsn = make_conninfo(ctx.admin_dsn, dbname=db)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        measure(dsn, s.queue_counts, s.queue_hot_counts, s.queue_repeat, s.queue_sessions,
                lambda system, case, v, unit, extra: ctx.results.add(
                    Measure(SCENARIO, case, system, v, unit, higher_is_better=False, extra=extra)),
                lambda text: ctx.results.note(SCENARIO, text))
        ctx.results.note(SCENARIO, "every queue has one consumer and one ticked event; calls on one queue; "
                                   "steady: median of repeated calls on one connection, each its own "
                                   "transaction; locks: pg_locks of the backend at the end of the call's "
                                   "transaction")
    finally:
        with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from psycopg.conninfo import make_conninfo

    import pglogq
    from pglogq.dsn import resolve_dsn

    ap = argparse.ArgumentParser(description="cost of a call on one queue as the queues grow")
    ap.add_argument("--dsn", help="a server (its maintenance database); a scratch database is made there")
    ap.add_argument("--db", default="pglogq_measure_queues")
    ap.add_argument("--counts", default="1,100,1000")
    ap.add_argument("--hot", default="", help="sizes measured for send, receive and ack only (e.g. 10000)")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated call names")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-pgq", action="store_true", help="pglogq only, even where the server has PgQ")
    args = ap.parse_args(argv)
    server = resolve_dsn(args.dsn)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{args.db}"'.encode())
    dsn = make_conninfo(server, dbname=args.db)
    global CALLS, PGQ_CALLS
    if args.only:
        wanted = {x.strip() for x in args.only.split(",")}
        CALLS = tuple(c for c in CALLS if c.name in wanted)
        PGQ_CALLS = tuple(c for c in PGQ_CALLS if c.name in wanted)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        measure(dsn, tuple(int(x) for x in args.counts.split(",") if x),
                tuple(int(x) for x in args.hot.split(",") if x), args.repeat, args.sessions,
                lambda system, case, v, unit, extra: print(f"{system:7} {case:60} {v:12.2f} {unit}", flush=True),
                lambda text: print(f"note: {text}", flush=True), pgq=not args.no_pgq)
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)'.encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
