"""Consuming pglogq in the benchmark: the library's Python consumer, and a minimal LISTEN-woken
receive/ack loop (what any consumer does) for the held-xmin runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

import pglogq
from tests.harness.bench.pacing import clock
from tests.harness.bench.systems.base import Record

RECEIVE = "SELECT batch_id, msg_id, payload FROM pglogq.receive(%s, %s, %s, %s)"
ACK = "SELECT pglogq.ack(%s)"


def run_consumer(dsn: str, queue: str, name: str, **options: Any) -> tuple[int, float]:
    """Drain ``queue`` as consumer ``name`` with pglogq.Consumer and a no-op handler.

    Returns (events handled, seconds)."""
    count = 0
    with pglogq.Client(dsn) as client:
        consumer = pglogq.Consumer(client, queue, name, **options)

        def noop(msg: Any) -> None:
            nonlocal count
            count += 1

        consumer.handler()(noop)

        start = time.time()
        consumer.run(stop_when_idle=True)
        return count, time.time() - start


def consumer_latency(
    dsn: str,
    queue: str,
    consumer: str,
    expected: int,
    deadline: float,
    record: Record,
    ready: threading.Event,
) -> str:
    """Latency consumer: pglogq.Consumer (LISTEN wake-ups, default options) recording the start
    of every handler call.  Returns a description of what ran."""
    seen = 0
    with pglogq.Client(dsn) as client:
        c = pglogq.Consumer(client, queue, consumer)

        def on_event(msg: Any) -> None:
            nonlocal seen
            record(int(msg.payload["seq"]), clock())
            seen += 1
            if seen >= expected:
                c.stop()

        c.handler()(on_event)

        def watchdog() -> None:
            while seen < expected and time.time() < deadline:
                time.sleep(0.05)
            c.stop()

        threading.Thread(target=watchdog, daemon=True).start()
        ready.set()
        c.run()
    return "pglogq.Consumer (default options: max_messages 100, LISTEN wake-ups)"


def listen_consume(
    dsn: str,
    queue: str,
    consumer: str,
    expected: int,
    deadline: float,
    record: Record,
    ready: threading.Event,
    page: int = 1000,
) -> None:
    """Receive/ack loop woken by NOTIFY "pglogq.<queue>" (sent with every tick)."""
    seen = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "pglogq.{queue}"'.encode())
        ready.set()
        while seen < expected and time.time() < deadline:
            rows = conn.execute(RECEIVE, (queue, consumer, page, None)).fetchall()
            if rows:
                for _batch, _msg, body in rows:
                    record(int(body["seq"]), clock())
                seen += len(rows)
                conn.execute(ACK, (rows[0][0],))
                continue
            for _ in conn.notifies(timeout=0.5, stop_after=1):
                pass
