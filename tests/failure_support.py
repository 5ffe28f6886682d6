"""Helpers shared by the failure-handling tests (nack/retry, dead letters, send options)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

import pglogq

T = TypeVar("T")

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


def drain(client: Any, queue: str, consumer: str, *, worker: str | None = None) -> list[pglogq.Message]:
    """Receive and ack until the consumer has nothing left."""
    got: list[pglogq.Message] = []
    while True:
        batch = client.receive(queue, consumer, max_messages=500, worker=worker)
        if not batch:
            return got
        got.extend(batch)
        batch.ack()


def pump_and_tick(client: Any, queue: str) -> None:
    """One round of the maintenance loop: pump due retries/delays, then tick the queue."""
    client.maintain()
    client.tick(queue, force=True)


def poll(fn: Callable[[], T | None], *, deadline: float = 60.0, pause: float = 0.05) -> T:
    """Call fn until it returns something truthy; fail after a generous deadline."""
    end = time.monotonic() + deadline
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {deadline} s")
        time.sleep(pause)


def current_table(dsn: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT cur_table FROM pglogq.queue WHERE queue_name = %s", (queue,)).fetchone()
        assert row is not None
        return int(row[0])


def rotate_all(client: Any, dsn: str, queue: str, consumers: list[str], times: int = 3) -> list[pglogq.Message]:
    """Rotate the queue's tables ``times`` times (3: every table has been truncated once),
    ticking and draining every consumer first so rotation is allowed.  Returns what the
    drains delivered (callers assert on it)."""
    delivered: list[pglogq.Message] = []
    for _ in range(times):
        before = current_table(dsn, queue)
        for _attempt in range(20):
            client.tick(queue, force=True)
            for c in consumers:
                delivered.extend(drain(client, queue, c))
            if client.rotate(queue):
                break
        else:
            raise AssertionError("rotation never became possible")
        assert current_table(dsn, queue) != before
    return delivered


def event_count(dsn: str, queue: str, msg_id: int | None = None) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
            " WHERE q.queue_name = %s AND (%s::bigint IS NULL OR e.ev_id = %s)",
            (queue, msg_id, msg_id),
        ).fetchone()
        assert row is not None
        return int(row[0])


def wait_blocked(dsn: str, pid: int) -> None:
    """Wait until backend ``pid`` is waiting for a lock (proves two calls really overlap)."""

    def blocked() -> bool:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            return bool(row and row[0] == "Lock")

    poll(blocked, deadline=60.0, pause=0.02)


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
