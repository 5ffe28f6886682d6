"""A worker's job in flight, made through the SQL API (receive, report_progress), optionally made
silent by moving its last report back in time: what status and the metrics see of a hung worker."""

from __future__ import annotations

from typing import Any

import psycopg


def _sql(dsn: str, query: str, params: Any = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query, params)


def in_flight_job(dsn: str, worker_label: str, silent: str | None) -> None:
    """A worker's job as the runtime reports it (through the SQL API), optionally made silent
    by moving its last report back in time."""
    _sql(dsn, "SELECT pglogq.create_queue('reports_queue_with_a_long_name')")
    _sql(dsn, "SELECT pglogq.subscribe('reports_queue_with_a_long_name', 'nightly_report_builder')")
    # no takeover while the test looks (the job is silent on purpose)
    _sql(dsn, "SELECT pglogq.set_queue_config('reports_queue_with_a_long_name', 'dead_interval', '1 hour')")
    _sql(dsn, "SELECT pglogq.send('reports_queue_with_a_long_name', '{\"report\": 1}')")
    _sql(dsn, "SELECT pglogq.force_tick('reports_queue_with_a_long_name')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('reports_queue_with_a_long_name',"
                           " 'nightly_report_builder', 10)").fetchone()
        assert row is not None
        conn.execute("SELECT pglogq.report_progress(%s, %s, 42.5, 'rendering the quarterly pages', NULL, %s)",
                     (row[0], row[1], worker_label))
        if silent:
            conn.execute("UPDATE pglogq.progress SET heartbeat_at = heartbeat_at - %s::interval,"
                         " started_at = started_at - %s::interval", (silent, silent))
            conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - %s::interval"
                         " WHERE batch_id IS NOT NULL", (silent,))


def silence(dsn: str, worker: str) -> None:
    """Make a worker look silent for an hour (as if it died holding its lease or batch)."""
    _sql(dsn, "UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
              " WHERE worker_name = %s", (worker,))
