"""The ticker during the timed pglogq scenarios: the project's in-process ticker
(``pglogq.start_ticker``, the daemon's engine) when it is there, else a loop calling
``pglogq.ticker()`` every 5 ms plus maintenance every second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import pglogq


@contextmanager
def ticker_running(dsn: str, **overrides: Any) -> Iterator[str]:
    """Run a ticker for the bench database; yields a description of what runs."""
    start = getattr(pglogq, "start_ticker", None)
    if start is not None:
        handle = start(dsn, **overrides)
        try:
            handle.wait_active(30)
            yield "pglogq.start_ticker (in-process daemon engine)" + (f" {overrides}" if overrides else "")
        finally:
            handle.stop()
        return
    stop = threading.Event()
    thread = threading.Thread(target=_loop, args=(dsn, stop), daemon=True)
    thread.start()
    try:
        yield "a loop calling pglogq.ticker() every 5 ms (pglogq.start_ticker not available)"
    finally:
        stop.set()
        thread.join()


def _loop(dsn: str, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, pglogq.Client(dsn) as client:
        last_maint = 0.0
        while not stop.is_set():
            conn.execute("SELECT pglogq.ticker()")
            if time.time() - last_maint > 1.0:
                client.maintain()
                last_maint = time.time()
            stop.wait(0.005)
