"""PGQueuer (from PyPI): its own schema installed with ``Queries.install()`` in the bench
database, jobs enqueued with ``Queries.enqueue`` and run by a ``QueueManager`` with a no-op
entrypoint, default settings (batch_size 10, LISTEN/NOTIFY wake-ups), over psycopg."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, ClassVar

import psycopg

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

ENTRYPOINT = "bench"


async def _queries(dsn: str) -> tuple[psycopg.AsyncConnection[Any], Any]:
    from pgqueuer.db import PsycopgDriver
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return conn, Queries(PsycopgDriver(conn))


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    async def run() -> int:
        conn, q = await _queries(conf["dsn"])
        body = payload.encoded(idx)
        n = 0
        wait_until(start_at)
        while time.time() < stop_at:
            if mode == "single":
                await q.enqueue(ENTRYPOINT, body, 0)
                n += 1
            else:
                await q.enqueue([ENTRYPOINT] * batch, [body] * batch, [0] * batch)
                n += batch
        await conn.close()
        return n

    return asyncio.run(run())


def enqueue_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    async def run() -> list[tuple[int, float]]:
        conn, q = await _queries(conf["dsn"])
        loop = asyncio.get_running_loop()

        def send(seqs: list[int]) -> None:
            bodies = [payload.encoded(s) for s in seqs]
            fut = asyncio.run_coroutine_threadsafe(
                q.enqueue([ENTRYPOINT] * len(bodies), bodies, [0] * len(bodies)), loop)
            fut.result()

        out = await asyncio.to_thread(paced, rate, seconds, send, start_at=start_at)
        await conn.close()
        return out

    return asyncio.run(run())


def run_manager(dsn: str, expected: int | None, deadline: float | None, record: Record | None,
                ready: threading.Event | None) -> tuple[int, float, float]:
    """Run a QueueManager with a no-op entrypoint: drain mode, or until ``expected`` jobs."""
    from pgqueuer.qm import QueueManager
    from pgqueuer.types import QueueExecutionMode

    async def run() -> tuple[int, float, float]:
        conn, q = await _queries(dsn)
        qm = QueueManager(q)
        n = 0
        end = time.time()

        @qm.entrypoint(ENTRYPOINT)
        async def noop(job: Any) -> None:
            nonlocal n, end
            end = time.time()
            if record is not None and job.payload:
                record(int(json.loads(job.payload)["seq"]), clock())
            n += 1
            if expected is not None and n >= expected:
                qm.shutdown.set()

        async def watchdog() -> None:
            while deadline is not None and time.time() < deadline and not qm.shutdown.is_set():
                await asyncio.sleep(0.1)
            qm.shutdown.set()

        start = time.time()
        if ready is not None:
            ready.set()
        if expected is None:
            await qm.run(mode=QueueExecutionMode.drain)
        else:
            dog = asyncio.create_task(watchdog())
            await qm.run()
            dog.cancel()
        await conn.close()
        return n, start, end

    return asyncio.run(run())


def drain_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    wait_until(start_at)
    return run_manager(conf["dsn"], None, None, None, None)


class PgQueuer(System):
    name: ClassVar[str] = "PGQueuer"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(enqueue_paced)

    def unavailable(self) -> str | None:
        try:
            import pgqueuer  # noqa: F401
        except ImportError as exc:
            return f"pgqueuer is not installed (pip install -e '.[peers]'): {exc}"
        return None

    def version(self) -> str:
        from importlib.metadata import version

        return f"pgqueuer {version('pgqueuer')}"

    def setup(self) -> None:
        async def run() -> None:
            conn, q = await _queries(self.ctx.dsn)
            await q.install()
            await conn.close()

        asyncio.run(run())

    def _clear(self) -> None:
        self.ctx.sql("TRUNCATE pgqueuer")

    def preload(self, n: int) -> None:
        self._clear()

        async def run() -> None:
            conn, q = await _queries(self.ctx.dsn)
            bodies = [payload.encoded(i) for i in range(1000)]
            for start in range(0, n, 1000):
                k = min(1000, n - start)
                await q.enqueue([ENTRYPOINT] * k, bodies[:k], [0] * k)
            await conn.close()

        asyncio.run(run())
        self.ctx.sql("VACUUM ANALYZE pgqueuer")

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers == 1:
            count, start, end = run_manager(self.ctx.dsn, None, None, None, None)
            return count, end - start
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(drain_worker, self.conf(), i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def latency_setup(self, rate: int) -> None:
        self._clear()

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        run_manager(self.ctx.dsn, expected, deadline, record, ready)
