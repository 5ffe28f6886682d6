"""Helpers for the ticker tests: run the real daemon as a subprocess, read its lock and ticks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from pglogq.tickerd import queries as tq


class Daemon:
    """A ``python -m pglogq.tickerd`` subprocess whose JSON log goes to a file."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pglogq.tickerd", "--log-format", "json", *args],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env={**os.environ, **(env or {})},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def logged(self, event: str) -> bool:
        return any(e.get("event") == event for e in self.events())

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def terminate(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        self._log.close()


def lock_holder_pids(dsn: str) -> list[int]:
    """Operating-system pids of the ticker processes holding the database's ticker lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(tq.LOCK_HOLDER, (tq.LOCK_CLASSID, tq.LOCK_OBJID)).fetchall()
    return [int(r[1].rsplit(":", 1)[1]) for r in rows if r[1] and ":" in r[1]]


def ticker_backends(dsn: str, pid: int) -> int:
    """How many connections the ticker process ``pid`` holds to the database."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE %s",
            (f"pglogq-ticker % %:{pid}",),
        ).fetchone()
    return int(row[0]) if row else 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ticks(dsn: str, queue: str) -> list[tuple[int, int]]:
    """(tick_id, snapshot xmax) of a queue's stored ticks, in tick order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT t.tick_id, pg_snapshot_xmax(t.tick_snapshot)::text::bigint FROM pglogq.tick t"
            " JOIN pglogq.queue q USING (queue_id) WHERE q.queue_name = %s ORDER BY t.tick_id",
            (queue,),
        ).fetchall()
    return [(int(a), int(b)) for a, b in rows]
