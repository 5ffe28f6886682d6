"""Two calls that really overlap: one runs in a thread on its own connection, the test waits
until it is blocked on a lock, then acts."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from tests.support.waiting import wait_for


def wait_blocked(dsn: str, pid: int) -> None:
    """Wait until backend ``pid`` is waiting for a lock (proves two calls really overlap)."""

    def blocked() -> bool:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            return bool(row and row[0] == "Lock")

    wait_for(blocked, f"backend {pid} to wait for a lock", interval=0.02)


class Call(threading.Thread):
    """Run fn(conn) in a thread on its own connection; result or exception kept."""

    def __init__(self, dsn: str, fn: Callable[[psycopg.Connection[Any]], Any]) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert pid is not None
        self.pid = int(pid[0])
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(self.conn)
        except BaseException as exc:
            self.error = exc

    def outcome(self, timeout: float = 60.0) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the concurrent call never finished"
        self.conn.close()
        if self.error is not None:
            raise self.error
        return self.result

