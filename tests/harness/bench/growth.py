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

PgQ 3.5 (the ``pgq`` extension) beside it, where the server has it: in a scratch database of its
own, each dimension PgQ has an equivalent call for is grown the same way right after pglogq's (same
sizes, same median of ``growth_repeat``, same slope), its own queue per dimension, and its
equivalent calls are timed: ``pgq.next_batch`` / ``get_batch_events`` / ``finish_batch`` for
receive + ack, ``get_queue_info``, ``get_consumer_info``, ``ticker()``, ``maint_operations()``,
``maint_retry_events()``.  PgQ has no partitions, cancel, schedules or dead letters: a note says so
for those.  PgQ's curves are a reference beside pglogq's, with no target of their own.

Measures: case ``<dimension>: <call>, <size> <unit>`` (ms) of system ``pglogq``, and
``PgQ 3.5 <dimension>: <call>, <size> <unit>`` of system ``PgQ 3.5``; extra ``{dimension, call,
size, target, system}`` (target None for PgQ).

Standalone:  ``python -m tests.harness.bench.growth --dsn DSN [--quick] [--only ticks,consumers]
[--systems pglogq,pgq]``."""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, System

SCENARIO = "growth"
PAYLOAD = '{"n": 1}'
HOT = 0.1  # slope target of a call doing a fixed amount of work
LISTING = 1.0  # slope target of a listing (or a count) of everything
PGLOGQ = "pglogq"

Conn = psycopg.Connection[Any]


@dataclass
class Call:
    """One timed call: ``run(conn)`` returns its milliseconds (its own set-up untimed)."""

    name: str
    target: float | None  # None: a reference curve (PgQ's), no target of its own
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
    drop: Callable[[Conn, str], None] = lambda conn, q: _drop(conn, q)  # its queues, after the last point


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
    return _ms(conn, "SELECT * FROM pglogq.dlq_search(%s, before_dead_id => %s, max_rows => 4)", (q, row[0]))


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
              # pages of one size at every point (the smallest holds 10 dead letters, 5 of them
              # 'even', 4 below the middle): a default page of 50 rows grew with the first
              # points, and its curve with it
              (Call("dlq_search(q) first page", HOT, _stmt("SELECT * FROM pglogq.dlq_search(%s, max_rows => 10)")),
               Call("dlq_search(q) page half-way", HOT, _middle_dead),
               Call("dlq_search(q, type) first page", HOT,
                    _stmt("SELECT * FROM pglogq.dlq_search(%s, msg_type => 'even', max_rows => 5)")),
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


# -- PgQ 3.5 beside it ---------------------------------------------------------------------------------
# Its own database and queues, grown to the same sizes.  PgQ's consumer reads one tick's batch at a
# time: next_batch / get_batch_events / finish_batch is its receive + ack.

PGQ = "PgQ 3.5"  # the name of its skip line when it is not measured
PGQ_TYPE = "bench"
PGQ_PAGE = 100  # events per transaction and tick of the PgQ backlog: one batch, as pglogq's page

PGQ_NONE = {
    "partitions": "a PgQ queue is not partitioned (no keys, no streams: one batch at a time per consumer)",
    "cancel markers": "PgQ cannot cancel an event once sent",
    "schedules": "PgQ has no schedules",
    "dead letters": "PgQ has no dead letter queue (a failed event is retried or dropped by its consumer)",
}


def _pgq_plain(conn: Conn, q: str) -> None:
    conn.execute("SELECT pgq.create_queue(%s)", (q,))  # it ticks the new queue once
    conn.execute("SELECT pgq.register_consumer(%s, 'c')", (q,))


def _pgq_one_event(conn: Conn, q: str) -> None:
    conn.execute("SELECT pgq.insert_event(%s, %s, %s)", (q, PGQ_TYPE, PAYLOAD))
    # pgq.ticker(q) leaves a queue with fewer than ticker_max_count new events and a lag under
    # ticker_max_lag untouched: force_tick moves the event counter past that, so the ticker's call ticks
    conn.execute("SELECT pgq.force_tick(%s)", (q,))
    conn.execute("SELECT pgq.ticker(%s)", (q,))


def _pgq_receive_ack(fresh: bool = True) -> Callable[[Conn, str], float]:
    """PgQ's consumer loop: next_batch, get_batch_events, finish_batch.  ``fresh``: an event sent and
    ticked first (untimed), then batches until one holds events (an idle queue's ticker may have put
    an empty tick before it), as pglogq's receive + ack; else one batch, whatever it holds."""
    def run(conn: Conn, q: str) -> float:
        if fresh:
            _pgq_one_event(conn, q)
        t0 = time.perf_counter()
        for _ in range(2000 if fresh else 1):
            row = conn.execute("SELECT pgq.next_batch(%s, 'c')", (q,)).fetchone()
            if row is None or row[0] is None:
                break
            rows = conn.execute("SELECT ev_id, ev_data FROM pgq.get_batch_events(%s)", (row[0],)).fetchall()
            conn.execute("SELECT pgq.finish_batch(%s)", (row[0],))
            if rows:
                break
        return (time.perf_counter() - t0) * 1000
    return run


def _pgq_ids(conn: Conn, q: str) -> tuple[int, int]:
    """The queue's id and consumer c's subscription id."""
    row = conn.execute("SELECT s.sub_queue, s.sub_id FROM pgq.subscription s"
                       "  JOIN pgq.queue q ON q.queue_id = s.sub_queue JOIN pgq.consumer c ON c.co_id = s.sub_consumer"
                       " WHERE q.queue_name = %s AND c.co_name = 'c'", (q,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _pgq_drop(conn: Conn, q: str) -> None:
    for (name,) in conn.execute("SELECT queue_name FROM pgq.queue WHERE queue_name = %s OR queue_name LIKE %s",
                                (q, q + "\\_%")).fetchall():
        conn.execute("SELECT pgq.drop_queue(%s, true)", (name,))


def _pgq_grow_idle(conn: Conn, q: str, have: int, want: int) -> None:
    for i in range(max(have, 1), want):
        _pgq_plain(conn, f"{q}_{i:05d}")
    # a queue with one tick is ticked again at the ticker's next pass: that is not idle work
    conn.execute("SELECT pgq.ticker()")


def _pgq_grow_consumers(conn: Conn, q: str, have: int, want: int) -> None:
    conn.execute("SELECT count(pgq.register_consumer(%s, 'c' || g)) FROM generate_series(%s::int, %s::int) g",
                 (q, max(have, 1) + 1, want))


def _pgq_setup_backlog(conn: Conn, q: str) -> None:
    _pgq_plain(conn, q)
    # the ticker ticks at each call that finds new events: a batch is then one producer transaction
    conn.execute("SELECT pgq.set_queue_config(%s, 'ticker_max_count', '1')", (q,))


def _pgq_grow_backlog(conn: Conn, q: str, have: int, want: int) -> None:
    """What producers of PGQ_PAGE events per transaction leave with the ticker running between them:
    each page INSERTed into the queue's current event table as insert_event does (its id from the
    queue's sequence, the transaction's txid), committed, then ticked by pgq.ticker(q) in a
    transaction of its own; on the server, for speed."""
    conn.execute("SET synchronous_commit = off")  # set-up only: thousands of commits
    try:
        conn.execute(sql.SQL(
            "DO $$ DECLARE t text := pgq.quote_fqname(pgq.current_event_table({q})); BEGIN"
            "  FOR i IN 1..{n} LOOP"
            "    EXECUTE format('INSERT INTO %s (ev_time, ev_type, ev_data)"
            "                    SELECT now(), $1, $2 FROM generate_series(1, {page})', t) USING {type}, {data};"
            "    COMMIT;"
            "    PERFORM pgq.ticker({q});"
            "    COMMIT;"
            "  END LOOP; END $$").format(q=sql.Literal(q), n=sql.Literal((want - have) // PGQ_PAGE),
                                        page=sql.Literal(PGQ_PAGE), type=sql.Literal(PGQ_TYPE),
                                        data=sql.Literal(PAYLOAD)))
    finally:
        conn.execute("RESET synchronous_commit")
    conn.execute("ANALYZE pgq.tick")


def _pgq_grow_retries(conn: Conn, q: str, have: int, want: int) -> None:
    """Events the consumer put back for tomorrow: the rows pgq.event_retry leaves, INSERTed in bulk."""
    qid, sub = _pgq_ids(conn, q)
    conn.execute(
        "INSERT INTO pgq.retry_queue (ev_retry_after, ev_queue, ev_id, ev_time, ev_txid, ev_owner, ev_retry,"
        "                             ev_type, ev_data)"
        " SELECT now() + interval '1 day' + g * interval '1 ms', %s, g, now(), NULL, %s, 1, %s, %s"
        "   FROM generate_series(%s::int, %s::int) g",
        (qid, sub, PGQ_TYPE, PAYLOAD, have + 1, want))
    conn.execute("ANALYZE pgq.retry_queue")


def _pgq_grow_ticks(conn: Conn, q: str, have: int, want: int) -> None:
    """A consumer far behind keeps every tick: ``want`` ticks 10 ms apart up to now after the one it
    stands on, each closing one event (ids drawn, the events rotated away: each tick has the
    snapshot of the one before, so the batch between two of them is empty), then a real event and
    tick after them."""
    conn.execute("SELECT pgq.drop_queue(%s, true)", (q,))
    _pgq_plain(conn, q)
    conn.execute(
        "INSERT INTO pgq.tick (tick_queue, tick_id, tick_time, tick_snapshot, tick_event_seq)"
        " SELECT l.tick_queue, l.tick_id + g, clock_timestamp() - (%(n)s + 1 - g) * interval '10 ms',"
        "        l.tick_snapshot, l.tick_event_seq + g"
        "   FROM (SELECT t.* FROM pgq.tick t WHERE t.tick_queue = %(qid)s ORDER BY t.tick_id DESC LIMIT 1) l,"
        "        generate_series(1, %(n)s::int) g", {"n": want, "qid": _pgq_ids(conn, q)[0]})
    conn.execute("SELECT pgq.seq_setval(q.queue_tick_seq, m.tick_id),"
                 "       pgq.seq_setval(q.queue_event_seq, m.tick_event_seq)"
                 "  FROM pgq.queue q, LATERAL (SELECT t.tick_id, t.tick_event_seq FROM pgq.tick t"
                 "                             WHERE t.tick_queue = q.queue_id ORDER BY t.tick_id DESC LIMIT 1) m"
                 " WHERE q.queue_name = %s", (q,))
    conn.execute("ANALYZE pgq.tick")
    _pgq_one_event(conn, q)


PGQ_RECEIVE = Call("receive + ack (next_batch, get_batch_events, finish_batch)", None, _pgq_receive_ack())
PGQ_QUEUE_INFO = Call("get_queue_info(q)", None, _stmt("SELECT * FROM pgq.get_queue_info(%s)"))
PGQ_CONSUMER_INFO = Call("get_consumer_info(q, c)", None, _stmt("SELECT * FROM pgq.get_consumer_info(%s, 'c')"))


def _twin(name: str, setup: Callable[[Conn, str], None], grow: Callable[[Conn, str, int, int], None],
          calls: tuple[Call, ...]) -> Dimension:
    """PgQ's dimension ``name``: pglogq's sizes and unit, PgQ's set-up, growth and calls."""
    base = next(d for d in DIMENSIONS if d.name == name)
    return replace(base, setup=setup, grow=grow, calls=calls, drop=_pgq_drop)


PGQ_TWINS: dict[str, Dimension] = {d.name: d for d in (
    _twin("idle queues", _pgq_plain, _pgq_grow_idle,
          (Call("ticker() idle pass", None, _stmt("SELECT pgq.ticker()", lambda q: ())),
           Call("maint_operations() idle", None, _stmt("SELECT * FROM pgq.maint_operations()", lambda q: ())),
           PGQ_RECEIVE)),
    _twin("consumers", _pgq_plain, _pgq_grow_consumers,
          (Call("get_consumer_info() of all", None, _stmt("SELECT * FROM pgq.get_consumer_info()", lambda q: ())),
           PGQ_CONSUMER_INFO, PGQ_RECEIVE)),
    _twin("backlog", _pgq_setup_backlog, _pgq_grow_backlog,
          (Call(f"receive + ack (a batch of {PGQ_PAGE})", None, _pgq_receive_ack(fresh=False)),
           PGQ_QUEUE_INFO, PGQ_CONSUMER_INFO)),
    _twin("retries due tomorrow", _pgq_plain, _pgq_grow_retries,
          (Call("maint_retry_events(), nothing due", None, _stmt("SELECT pgq.maint_retry_events()", lambda q: ())),
           PGQ_CONSUMER_INFO, PGQ_RECEIVE)),
    # PgQ hands a consumer behind one tick's batch at a time: catching up takes a batch per tick
    # kept, so its receive + ack here is one batch (one kept tick), not the way to the new event
    _twin("ticks kept", _pgq_plain, _pgq_grow_ticks,
          (Call("receive + ack (the next batch: one kept tick)", None, _pgq_receive_ack(fresh=False)),
           PGQ_QUEUE_INFO, PGQ_CONSUMER_INFO)),
)}
assert set(PGQ_TWINS) | set(PGQ_NONE) == {d.name for d in DIMENSIONS}, "every dimension: a PgQ twin or a reason"


# -- measuring and the slopes ----------------------------------------------------------------------------


def _drop(conn: Conn, q: str) -> None:
    conn.execute("SELECT pglogq.drop_queue(%s, true)", (q,))
    for (name,) in conn.execute("SELECT queue_name FROM pglogq.queue WHERE queue_name LIKE %s",
                                (q + "_%",)).fetchall():
        conn.execute("SELECT pglogq.drop_queue(%s, true)", (name,))
    conn.execute("SELECT pglogq.maint_rotate_meta(true)")  # as the daemon does: drops their tick tables


def label(system: str, dimension: str) -> str:
    """How a curve is named: the dimension for pglogq's, prefixed by the system for the others."""
    return dimension if system == PGLOGQ else f"{system} {dimension}"


def case(dim: Dimension, call: str, size: int, system: str = PGLOGQ) -> str:
    return f"{label(system, dim.name)}: {call}, {size:,} {dim.unit}"


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) on log(size); None with fewer than two sizes."""
    pts = [(math.log(s), math.log(max(v, 1e-3))) for s, v in points if s > 0 and v == v]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def curves(measures: list[Measure]) -> dict[tuple[str, str], tuple[float | None, list[tuple[int, float]]]]:
    """(curve label, call) -> (target, [(size, ms)]) from this scenario's measures; the target is
    None for a reference curve (PgQ's)."""
    out: dict[tuple[str, str], tuple[float | None, list[tuple[int, float]]]] = {}
    for m in measures:
        if m.scenario != SCENARIO or m.unit != "ms":
            continue
        key = (label(str(m.extra.get("system", PGLOGQ)), str(m.extra["dimension"])), str(m.extra["call"]))
        target = m.extra.get("target")
        out.setdefault(key, (None if target is None else float(target), []))[1].append((int(m.extra["size"]),
                                                                                          m.value))
    return out


Emit = Callable[[str, float, str, dict[str, Any]], object]


def _measure_dimension(dsn: str, system: str, dim: Dimension, quick: bool, repeat: int, emit: Emit,
                       note: Callable[[str], None], budget_s: float, keep: bool) -> None:
    name = label(system, dim.name)
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
                note(f"{name}: growing to {size:,} {dim.unit} failed: {type(exc).__name__}: "
                     f"{str(exc).splitlines()[0]}")
                break
            have = size
            grown = time.perf_counter() - t0
            for call in dim.calls:
                try:
                    call.run(conn, q)  # warm-up: plans, caches
                    times = [call.run(conn, q) for _ in range(repeat)]
                except psycopg.Error as exc:
                    note(f"{name}: {call.name} failed at {size:,} {dim.unit}: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                    continue
                emit(case(dim, call.name, size, system), statistics.median(times), "ms",
                     {"dimension": dim.name, "call": call.name, "size": size, "target": call.target,
                      "samples": len(times), "system": system})
            if time.perf_counter() - t_dim > budget_s:
                note(f"{name}: stopped after {size:,} {dim.unit} (its time budget of {budget_s:.0f} s; "
                     f"growing to it took {grown:.0f} s)")
                break
        if not keep:
            dim.drop(conn, q)
    note(f"{name}: {time.perf_counter() - t_dim:.0f} s")


def measure(dsn: str | None, dims: tuple[Dimension, ...], quick: bool, repeat: int, emit: Emit,
            note: Callable[[str], None], budget_s: float, keep: bool = False,
            pgq: tuple[str, str] | None = None) -> None:
    """Each dimension on pglogq (in the database ``dsn``; None: pglogq not measured), then with
    ``pgq`` (PgQ's label and the dsn of its own database) PgQ's twin of it: the two curves of a
    dimension measured back to back, under much the same load of the machine."""
    for dim in dims:
        last = keep and dim is dims[-1]
        if dsn is not None:
            _measure_dimension(dsn, PGLOGQ, dim, quick, repeat, emit, note, budget_s, last)
        if pgq is None:
            continue
        twin = PGQ_TWINS.get(dim.name)
        if twin is None:
            note(f"{label(pgq[0], dim.name)}: not measured, PgQ has no equivalent call: {PGQ_NONE[dim.name]}")
        else:  # at the sizes of the dimension given, whatever they are
            twin = replace(twin, full=dim.full, quick=dim.quick)
            _measure_dimension(pgq[1], pgq[0], twin, quick, repeat, emit, note, budget_s, last)


def slope_lines(measures: list[Measure]) -> list[str]:
    """One line per curve: sizes, medians, slope, and its target met or not (PgQ's: a reference)."""
    lines = []
    for (name, call), (target, pts) in curves(measures).items():
        s = slope(pts)
        if s is None:
            continue
        pts.sort()
        figures = ", ".join(f"{n:,}: {v:.2f}" for n, v in pts)
        verdict = ("reference, no target" if target is None
                   else f"target <= {target:g}: {'met' if s <= target else 'MISSED'}")
        lines.append(f"slope {s:+.2f} ({verdict}) {name}: {call} [ms at {figures}]")
    return lines


def pgq_database(admin_dsn: str, db: str) -> tuple[str | None, str]:
    """PgQ's scratch database ``db`` (made afresh) with the pgq extension: (its dsn, PgQ's label such
    as "PgQ 3.5"), or (None, why PgQ is not measured)."""
    from psycopg.conninfo import make_conninfo

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'pgq'").fetchone()
        if row is None:
            return None, "not installed on this server (Debian's postgresql-15-pgq3), not measured"
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{db}"'.encode())
    dsn = make_conninfo(admin_dsn, dbname=db)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgq")
            got = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgq'").fetchone()
    except psycopg.Error as exc:
        return None, f"CREATE EXTENSION pgq failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return dsn, f"PgQ {got[0] if got else row[0]}"


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    db = f"pglogq_bench_growth_{os.getpid()}"
    pgq_db = f"pglogq_bench_growth_pgq_{os.getpid()}"
    with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{db}"'.encode())
    from psycopg.conninfo import make_conninfo

    import pglogq

    dsn = make_conninfo(ctx.admin_dsn, dbname=db)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        pgq_dsn, pgq_label = pgq_database(ctx.admin_dsn, pgq_db)
        if pgq_dsn is None:
            ctx.results.skip(SCENARIO, PGQ, pgq_label)
        measure(dsn, DIMENSIONS, s.quick, 3 if s.quick else 7,
                lambda c, v, unit, extra: ctx.results.add(
                    Measure(SCENARIO, c, str(extra["system"]), v, unit, higher_is_better=False, extra=extra)),
                lambda text: ctx.results.note(SCENARIO, text), 15 if s.quick else 60,
                pgq=None if pgq_dsn is None else (pgq_label, pgq_dsn))
        for line in slope_lines(ctx.results.measures):
            ctx.results.note(SCENARIO, line)
    finally:
        with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
            for name in (db, pgq_db):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def main(argv: list[str] | None = None) -> int:
    import argparse

    from psycopg.conninfo import make_conninfo

    import pglogq
    from pglogq.dsn import resolve_dsn

    ap = argparse.ArgumentParser(description="cost of each call as one dimension of a queue grows")
    ap.add_argument("--dsn", help="a server (its maintenance database); a scratch database is made there")
    ap.add_argument("--db", default="pglogq_measure_growth", help="the scratch database (PgQ's: its name + _pgq)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated dimension names")
    ap.add_argument("--systems", default="pglogq,pgq",
                    help="comma-separated, of pglogq and pgq (PgQ 3.5, when the server has it); default both")
    ap.add_argument("--keep", action="store_true", help="keep the scratch databases (and the last queue)")
    args = ap.parse_args(argv)
    chosen = {x.strip().lower() for x in args.systems.split(",") if x.strip()}
    if not chosen or chosen - {"pglogq", "pgq"}:
        ap.error(f"--systems: pglogq and/or pgq, not {args.systems!r}")
    server = resolve_dsn(args.dsn)
    wanted = {x.strip() for x in args.only.split(",") if x.strip()}
    dims = tuple(d for d in DIMENSIONS if not wanted or d.name in wanted)
    got: list[Measure] = []

    def emit(c: str, v: float, unit: str, extra: dict[str, Any]) -> None:
        got.append(Measure(SCENARIO, c, str(extra["system"]), v, unit, extra=extra))
        print(f"{c:75} {v:10.2f} {unit}", flush=True)

    def note(text: str) -> None:
        print(f"note: {text}", flush=True)

    t0 = time.perf_counter()
    dsn: str | None = None
    pgq: tuple[str, str] | None = None
    try:
        if "pglogq" in chosen:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)'.encode())
                conn.execute(f'CREATE DATABASE "{args.db}"'.encode())
            dsn = make_conninfo(server, dbname=args.db)
            with pglogq.Client(dsn) as client:
                client.install_schema()
        if "pgq" in chosen:
            pgq_dsn, pgq_label = pgq_database(server, args.db + "_pgq")
            if pgq_dsn is None:
                print(f"skipped: {PGQ}: {pgq_label}", flush=True)
            else:
                pgq = (pgq_label, pgq_dsn)
        measure(dsn, dims, args.quick, args.repeat, emit, note, 15 if args.quick else 60, args.keep, pgq)
        print("\n".join(slope_lines(got)))
    finally:
        if not args.keep:
            with psycopg.connect(server, autocommit=True) as conn:
                for name in (args.db, args.db + "_pgq"):
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
    print(f"wall time: {time.perf_counter() - t0:.0f} s (databases made and dropped included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
