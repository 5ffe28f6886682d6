"""The admin calls cost what they return, whatever the planner's statistics say: consumer_info of
every consumer reads each consumer's rows once (not once per consumer), and the tick reads of
seek_plan, lookup and queue_info are index probes, not walks over every kept tick.  Counted with
pg_stat_xact_user_tables (rows read) and EXPLAIN, never timed."""

from __future__ import annotations

from typing import Any

import psycopg

import pglogq
from tests.support.db import TableReads

CONSUMERS = 400


def _consumer_info_reads(conn: psycopg.Connection[Any]) -> TableReads:
    before = TableReads(conn, "sub_state%")
    rows = conn.execute("SELECT count(*) FROM pglogq.consumer_info()").fetchone()
    after = TableReads(conn, "sub_state%")
    assert rows is not None and rows[0] == CONSUMERS
    return after - before


def test_consumer_info_of_every_consumer_reads_each_consumer_once(client: pglogq.Client, dsn: str) -> None:
    """400 consumers on a fresh sub_state (no statistics: the planner guesses a few hundred rows)
    and again once analyzed: one consumer_info() reads each consumer's state a small constant
    number of times, not once per consumer per subquery (160,000s of rows before)."""
    client.create_queue("q")
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.subscribe('q', 'c' || g) FROM generate_series(1, %s) g", (CONSUMERS,))
        conn.commit()
        fresh = _consumer_info_reads(conn)
        conn.rollback()
        conn.execute("ANALYZE pglogq.sub_state")
        conn.execute("ANALYZE pglogq.subscriber")
        conn.commit()
        analyzed = _consumer_info_reads(conn)
        conn.rollback()
    for reads in (fresh, analyzed):
        assert reads.rows_read() <= 4 * CONSUMERS, reads


def test_consumer_info_of_one_consumer_reads_its_rows_only(client: pglogq.Client, dsn: str) -> None:
    """consumer_info(q, c) beside 400 consumers of q, all behind (their ticks are read): it read
    every consumer's rows and ticks of the queue, then kept one (14 ms at 1,000 consumers).
    Now its own rows and ticks only, the same with 4 consumers as with 400."""
    client.create_queue("q")
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.subscribe('q', 'c' || g) FROM generate_series(1, %s) g", (CONSUMERS,))
        conn.execute("SELECT pglogq.send('q', '{}'::jsonb)")
        conn.commit()
        conn.execute("SELECT pglogq.force_tick('q')")
        conn.commit()
        before = (TableReads(conn, "sub_state%"), TableReads(conn, "subscriber"), TableReads(conn, "tick%"))
        rows = conn.execute("SELECT consumer_name, lag_events FROM pglogq.consumer_info('q', 'c7')").fetchall()
        after = (TableReads(conn, "sub_state%"), TableReads(conn, "subscriber"), TableReads(conn, "tick%"))
        spent = [b2 - b1 for b1, b2 in zip(before, after, strict=True)]
        conn.rollback()
        assert rows == [("c7", 1)]
        for reads in spent:
            assert reads.rows_read() <= 12, spent
        # the same consumer on every queue (for_queue NULL): its rows of subscriber, its ticks;
        # sub_state (no statistics yet) may be joined by one scan, never once per consumer
        before = (TableReads(conn, "sub_state%"), TableReads(conn, "subscriber"), TableReads(conn, "tick%"))
        rows = conn.execute("SELECT queue_name, consumer_name FROM pglogq.consumer_info(NULL, 'c7')").fetchall()
        after = (TableReads(conn, "sub_state%"), TableReads(conn, "subscriber"), TableReads(conn, "tick%"))
        state, subscriber, ticks = (b2 - b1 for b1, b2 in zip(before, after, strict=True))
        conn.rollback()
        assert rows == [("q", "c7")]
        assert subscriber.rows_read() <= 12 and ticks.rows_read() <= 12, (subscriber, ticks)
        assert state.rows_read() <= 3 * CONSUMERS, state


TICKS = 20_000


def _kept_ticks(conn: psycopg.Connection[Any], queue: str, n: int) -> None:
    """``n`` kept ticks on ``queue`` (a consumer far behind keeps them all), 10 ms apart up to now,
    each closing one event; then a real send and tick after them."""
    conn.execute("SELECT pglogq.create_queue(%s)", (queue,))
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (queue,))
    conn.execute(
        "INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq, tick_event_total)"
        " SELECT l.queue_id, 1 + g, clock_timestamp() - (%(n)s + 1 - g) * interval '10 ms', l.tick_snapshot, g, g"
        "   FROM (SELECT t.* FROM pglogq.tick t JOIN pglogq.queue q USING (queue_id)"
        "          WHERE q.queue_name = %(q)s ORDER BY t.tick_id DESC LIMIT 1) l, generate_series(1, %(n)s) g",
        {"n": n, "q": queue})
    conn.execute("SELECT setval(q.event_seq, %s + 1) FROM pglogq.queue q WHERE q.queue_name = %s", (n, queue))
    conn.commit()
    conn.execute("SELECT pglogq.send(%s, '{\"n\": 1}'::jsonb)", (queue,))
    conn.commit()
    conn.execute("SELECT pglogq.force_tick(%s)", (queue,))
    conn.commit()


def _tick_rows_read(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...]) -> int:
    before = TableReads(conn, "tick%")
    conn.execute(sql, args).fetchall()
    reads = TableReads(conn, "tick%") - before
    conn.rollback()
    return reads.rows_read()


def test_admin_calls_probe_the_ticks_instead_of_walking_them(client: pglogq.Client, dsn: str) -> None:
    """20,000 kept ticks: seek_plan by events and to a time, lookup of the oldest events and
    queue_info each read a few ticks (index probes on the count, the id sequence and the time of
    the ticks), not the thousands between the newest tick and the one they look for."""
    with psycopg.connect(dsn) as conn:
        _kept_ticks(conn, "t", TICKS)
        calls = {
            "seek_plan by events (to the middle)": ("SELECT * FROM pglogq.seek_plan('t', 'c', by_events => %s)",
                                                    (TICKS // 2,)),
            "seek_plan by events (an exact tick)": ("SELECT * FROM pglogq.seek_plan('t', 'c', by_events => 7)", ()),
            "seek_plan to a time": ("SELECT * FROM pglogq.seek_plan('t', 'c', to_position => %s)",
                                    (f"{TICKS // 200} seconds ago",)),
            "lookup of an old event": ("SELECT * FROM pglogq.lookup('t', 5)", ()),
            "lookup of the newest event": ("SELECT * FROM pglogq.lookup('t', %s)", (TICKS + 2,)),
            "queue_info": ("SELECT * FROM pglogq.queue_info('t')", ()),
        }
        read = {name: _tick_rows_read(conn, sql, args) for name, (sql, args) in calls.items()}
    assert all(n <= 40 for n in read.values()), read


def test_seek_plan_by_events_lands_on_the_nearest_tick(client: pglogq.Client, dsn: str) -> None:
    """The nearest kept tick to the count asked for, the later one on a tie, as before the probes:
    ticks closing 0, 3, 3, 3, 10 events (totals 0, 3, 3, 3, 10 from tick 1 on)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        conn.execute(
            "INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq, tick_event_total)"
            " SELECT l.queue_id, l.tick_id + g, clock_timestamp(), l.tick_snapshot, x, x"
            "   FROM (SELECT t.* FROM pglogq.tick t WHERE t.queue_id = (SELECT queue_id FROM pglogq.queue"
            "          WHERE queue_name = 'q') ORDER BY t.tick_id DESC LIMIT 1) l,"
            "        unnest(ARRAY[3, 3, 3, 10]) WITH ORDINALITY AS u(x, g)")
        conn.commit()

        def target(by: int) -> int:
            row = conn.execute("SELECT target_tick FROM pglogq.seek_plan('q', 'c', by_events => %s)", (by,)).fetchone()
            assert row is not None
            return int(row[0])

        # tick 1 holds 0; ticks 2, 3, 4 hold 3 (the latest of them wins); tick 5 holds 10
        assert [target(b) for b in (0, 1, 2, 3, 5, 6, 7, 10)] == [1, 1, 4, 4, 4, 4, 5, 5]


BACKLOG = 30_000


def _event_rows_read(conn: psycopg.Connection[Any], queue: str) -> tuple[int, int]:
    """queue_info(queue)'s pending_estimate and the rows it read from the event tables."""
    before = TableReads(conn, "event%")
    row = conn.execute("SELECT pending_estimate FROM pglogq.queue_info(%s)", (queue,)).fetchone()
    reads = TableReads(conn, "event%") - before
    conn.rollback()
    assert row is not None
    return int(row[0]), reads.rows_read()


def test_queue_info_reads_the_pending_events_not_the_backlog(client: pglogq.Client, dsn: str) -> None:
    """30,000 events sent and ticked, their child table never analysed (the planner guessed a
    third of it "after the last tick" and scanned it all): queue_info(q) reads no event while
    nothing is pending, and only the pending ones once some are, not the ticked backlog."""
    client.create_queue("b")
    client.subscribe("b", "c")
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.send_batch('b', array_fill('{\"n\": 1}'::jsonb, ARRAY[%s]))", (BACKLOG,))
        conn.commit()
        conn.execute("SELECT pglogq.force_tick('b')")
        conn.commit()
        assert _event_rows_read(conn, "b") == (0, 0)
        conn.execute("SELECT pglogq.send_batch('b', array_fill('{\"n\": 1}'::jsonb, ARRAY[3]))")
        conn.commit()
        pending, read = _event_rows_read(conn, "b")
        assert pending == 3 and read <= 10, read
