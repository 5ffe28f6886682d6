"""Reading a test database directly: its pglogq tables, as text, to compare before/after a call."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import make_conninfo

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
