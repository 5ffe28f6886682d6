"""Procrastinate (from PyPI): its schema applied with ``schema_manager.apply_schema_async()``
in the bench database, jobs deferred with ``defer_async`` / ``batch_defer_async`` and run by
``run_worker_async`` with a no-op task and default worker settings (concurrency 1,
LISTEN/NOTIFY on), over its psycopg connector."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any, ClassVar

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

_state: dict[str, Any] = {"record": None, "count": 0, "end": 0.0, "expected": None, "done": None}


def _app(dsn: str) -> Any:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=dsn))

    @app.task(name="bench_noop")
    async def noop(seq: int, **_: Any) -> None:
        now = time.time()
        rec = _state["record"]
        if rec is not None:
            rec(int(seq), clock())
        _state["count"] += 1
        _state["end"] = now
        done = _state["done"]
        if done is not None and _state["count"] >= (_state["expected"] or 0):
            done.set()

    app.bench_noop = noop  # type: ignore[attr-defined]
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    return app


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    async def run() -> int:
        app = _app(conf["dsn"])
        body = payload.make(idx)
        n = 0
        async with app.open_async():
            wait_until(start_at)
            while time.time() < stop_at:
                if mode == "single":
                    await app.bench_noop.defer_async(**body)
                    n += 1
                else:
                    await app.bench_noop.batch_defer_async(*([body] * batch))
                    n += batch
        return n

    return asyncio.run(run())


def defer_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    async def run() -> list[tuple[int, float]]:
        app = _app(conf["dsn"])
        async with app.open_async():
            loop = asyncio.get_running_loop()

            def send(seqs: list[int]) -> None:
                bodies = [payload.make(s) for s in seqs]
                coro = (app.bench_noop.defer_async(**bodies[0]) if len(bodies) == 1
                        else app.bench_noop.batch_defer_async(*bodies))
                asyncio.run_coroutine_threadsafe(coro, loop).result()

            return await asyncio.to_thread(paced, rate, seconds, send, start_at=start_at)

    return asyncio.run(run())


def run_worker(dsn: str, expected: int | None, deadline: float | None, record: Record | None,
               ready: threading.Event | None) -> tuple[int, float, float]:
    async def run() -> tuple[int, float, float]:
        app = _app(dsn)
        _state.update(record=record, count=0, end=time.time(), expected=expected, done=asyncio.Event())
        async with app.open_async():
            start = time.time()
            if ready is not None:
                ready.set()
            if expected is None:
                await app.run_worker_async(wait=False, install_signal_handlers=False)
            else:
                task = asyncio.create_task(app.run_worker_async(wait=True, install_signal_handlers=False))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(_state["done"].wait(), max(0.1, (deadline or 0) - time.time()))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        return int(_state["count"]), start, float(_state["end"])

    return asyncio.run(run())


def drain_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    wait_until(start_at)
    return run_worker(conf["dsn"], None, None, None, None)


class Procrastinate(System):
    name: ClassVar[str] = "Procrastinate"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(defer_paced)

    def unavailable(self) -> str | None:
        try:
            import procrastinate  # noqa: F401
        except ImportError as exc:
            return f"procrastinate is not installed (pip install -e '.[peers]'): {exc}"
        return None

    def version(self) -> str:
        from importlib.metadata import version

        return f"procrastinate {version('procrastinate')}"

    def setup(self) -> None:
        async def run() -> None:
            app = _app(self.ctx.dsn)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(run())

    def _clear(self) -> None:
        self.ctx.sql("TRUNCATE procrastinate_jobs CASCADE")

    def preload(self, n: int) -> None:
        self._clear()

        async def run() -> None:
            app = _app(self.ctx.dsn)
            async with app.open_async():
                bodies = [payload.make(i) for i in range(1000)]
                for start in range(0, n, 1000):
                    await app.bench_noop.batch_defer_async(*bodies[: min(1000, n - start)])

        asyncio.run(run())
        self.ctx.sql("VACUUM ANALYZE procrastinate_jobs")

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers == 1:
            count, start, end = run_worker(self.ctx.dsn, None, None, None, None)
            return count, end - start
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(drain_worker, self.conf(), i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def latency_setup(self, rate: int) -> None:
        self._clear()

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        run_worker(self.ctx.dsn, expected, deadline, record, ready)
