"""The run's shared state: the bench database, settings, results, and the worker processes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq
from tests.harness.bench.results import Results
from tests.harness.bench.settings import Settings


@dataclass
class BenchContext:
    admin_dsn: str  # the server's maintenance database, as given
    dsn: str  # the dedicated bench database
    settings: Settings
    results: Results = field(default_factory=Results)
    _pool: ProcessPoolExecutor | None = None

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=autocommit)

    def client(self) -> pglogq.Client:
        return pglogq.Client(self.dsn)

    def pool(self) -> ProcessPoolExecutor:
        """Worker processes (spawned once, reused): one per concurrent client."""
        if self._pool is None:
            n = max(*self.settings.clients, 4) + 1
            self._pool = ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn"))
            list(self._pool.map(_warm, range(n)))
        return self._pool

    def close(self, *, interrupted: bool = False) -> None:
        """Stop the worker processes (at once when the run was interrupted: a paced producer
        may have minutes to go)."""
        if self._pool is not None:
            if interrupted:
                for proc in list(getattr(self._pool, "_processes", {}).values()):
                    proc.terminate()
            self._pool.shutdown(wait=not interrupted, cancel_futures=True)
            self._pool = None

    def run_clients(self, fn: Callable[..., int], n: int, *args: Any, seconds: float | None = None) -> float:
        """Run ``fn(*args, start_at, stop_at)`` in ``n`` worker processes at once; each returns
        how many events it handled between start_at and stop_at.  Returns events per second."""
        pool = self.pool()
        seconds = seconds if seconds is not None else self.settings.point_seconds
        start_at = time.time() + 0.3
        stop_at = start_at + seconds
        futures = [pool.submit(fn, *args, i, start_at, stop_at) for i in range(n)]
        total = sum(f.result() for f in futures)
        return total / seconds

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            cur = conn.execute(query.encode(), params)
            return cur.fetchall() if cur.description else []


def _warm(_: int) -> int:
    import tests.harness.bench.workers  # noqa: F401  (import everything a worker needs once)

    return os.getpid()


APP_DDL = b"""
CREATE TABLE bench_app_order (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer int NOT NULL,
    amount numeric NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
"""An application's own table: written in the same transaction as a send, read by the
session that holds a snapshot in the held-xmin scenario."""


@contextmanager
def bench_database(admin_dsn: str) -> Iterator[str]:
    """A fresh database on the server with the pglogq schema installed; dropped afterwards."""
    name = f"pglogq_bench_{os.getpid()}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = make_conninfo(admin_dsn, dbname=name)
    try:
        with pglogq.Client(dsn) as client:
            client.install_schema()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(APP_DDL)
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
