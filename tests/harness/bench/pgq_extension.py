"""PgQ 3.5 itself as a baseline (Debian's ``postgresql-NN-pgq3``): whether a bench database can
have it.  The scenarios that measure it beside pglogq (queues, held_xmin, share_jobs) ask here."""

from __future__ import annotations

from typing import Any

import psycopg


def install(conn: psycopg.Connection[Any]) -> bool:
    """Whether PgQ is installed in the connection's database, installed here when the server has
    the extension (autocommit connection)."""
    if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pgq'").fetchone() is None:
        return False
    conn.execute("CREATE EXTENSION IF NOT EXISTS pgq")
    return True
