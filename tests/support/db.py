"""Reading a test database directly: its pglogq tables, as text, to compare before/after a call."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import make_conninfo

from tests.support.waiting import wait_for

# how many functions _queue_functions copies for each queue (its list of names): receive's path,
# jobs', cancel's, consumer_info's tick figures and ack_receive's short way
QUEUE_COPIES = 20

SIDE_TABLES = (
    "event",
    "retry",
    "delayed",
    "dead_letter",
    "idempotency_key",
    "cancelled",
    "subscription",
    "queue",
    "tick",
    "progress",
)


def with_db(dsn: str, dbname: str) -> str:
    """``dsn`` with its database replaced by ``dbname``."""
    return make_conninfo(dsn, dbname=dbname)


def is_superuser(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        return bool(row and row[0])


def state(dsn: str) -> dict[str, list[str]]:
    """Every row of pglogq's tables, as text: compare before/after a refused call."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn) as conn:
        for t in SIDE_TABLES:
            rows = conn.execute(f"SELECT x::text FROM pglogq.{t} x ORDER BY 1").fetchall()
            out[t] = [r[0] for r in rows]
        seq = conn.execute("SELECT last_value FROM pglogq.batch_seq").fetchone()
        out["batch_seq"] = [str(seq[0] if seq else None)]
    return out


def current_table(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT cur_table FROM pglogq.queue WHERE queue_name = %s", (queue,)).fetchone()
        assert row is not None
        return int(row[0])


def event_count(dsn: str, queue: str, msg_id: int | None = None) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
            " WHERE q.queue_name = %s AND (%s::bigint IS NULL OR e.ev_id = %s)",
            (queue, msg_id, msg_id),
        ).fetchone()
        assert row is not None
        return int(row[0])


class TableReads:
    """What the current transaction of ``conn`` did to some pglogq tables so far
    (``pg_stat_xact_user_tables``: exact, counted in this backend, no wait for the statistics
    collector): take one before and one after a call, and subtract."""

    def __init__(self, conn: psycopg.Connection[tuple[object, ...]], like: str) -> None:
        row = conn.execute(
            "SELECT coalesce(sum(seq_scan), 0), coalesce(sum(seq_tup_read), 0), coalesce(sum(idx_scan), 0),"
            "       coalesce(sum(idx_tup_fetch), 0), coalesce(sum(n_tup_del), 0)"
            "  FROM pg_stat_xact_user_tables WHERE schemaname = 'pglogq' AND relname LIKE %s",
            (like,),
        ).fetchone()
        assert row is not None
        self.seq_scan, self.seq_read, self.idx_scan, self.idx_fetch, self.deleted = (int(str(v)) for v in row)

    def rows_read(self) -> int:
        """Rows read by sequential and index scans."""
        return self.seq_read + self.idx_fetch

    def __sub__(self, other: TableReads) -> TableReads:
        out = object.__new__(TableReads)
        out.seq_scan = self.seq_scan - other.seq_scan
        out.seq_read = self.seq_read - other.seq_read
        out.idx_scan = self.idx_scan - other.idx_scan
        out.idx_fetch = self.idx_fetch - other.idx_fetch
        out.deleted = self.deleted - other.deleted
        return out

    def __repr__(self) -> str:
        return (f"TableReads(seq_scan={self.seq_scan}, seq_read={self.seq_read}, idx_scan={self.idx_scan},"
                f" idx_fetch={self.idx_fetch}, deleted={self.deleted})")


# After a test ages tick rows (UPDATE pglogq.tick SET tick_time = ...): each queue's tick_head
# row takes the times of its ticks again (its last tick, its last tick of events), as the tick
# that wrote them left it, so that what reads tick_head and what reads the ticks agree.
TICK_HEAD_FOLLOWS = (
    "UPDATE pglogq.tick_head h"
    "   SET tick_time = coalesce((SELECT t.tick_time FROM pglogq.tick t"
    "                              WHERE t.queue_id = h.queue_id AND t.tick_id = h.tick_id), h.tick_time),"
    "       event_time = coalesce((SELECT t.tick_time FROM pglogq.tick t"
    "                               WHERE t.queue_id = h.queue_id AND t.tick_id = h.event_tick), h.event_time),"
    "       prev_event_time = coalesce((SELECT t.tick_time FROM pglogq.tick t"
    "                                    WHERE t.queue_id = h.queue_id AND t.tick_id = h.prev_event_tick),"
    "                                  h.prev_event_time)"
)


def closed_everything(dsn: str) -> None:
    """Every other session of the database is gone (a closed connection's backend ends a moment
    after the close: waited for; one left open never ends and fails the test)."""
    wait_for(lambda: _backends(dsn) == 0, "the client's backends to end")


def _backends(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])
