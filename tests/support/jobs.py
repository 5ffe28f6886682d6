"""Helpers of the job-queue tests (cancel after receive, crashes as attempts)."""

from __future__ import annotations

from typing import Any

import psycopg

import pglogq


def rows(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit; its rows (none for a statement without a result)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else []


def setup(client: pglogq.Client, n: int, **config: Any) -> list[int]:
    """Queue ``q`` with consumer ``c`` (settings ``config``) and ``n`` events of type ``t``, ticked."""
    client.create_queue("q")
    client.subscribe("q", "c")
    for key, value in config.items():
        client.set_queue_config("q", key, value)
    ids = client.send_batch("q", [{"n": i} for i in range(n)], type="t")
    client.tick("q", force=True)
    return ids
