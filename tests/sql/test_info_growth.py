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
