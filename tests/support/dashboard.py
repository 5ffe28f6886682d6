"""Helpers for the dashboard tests, the screenshot tool and the page-time measurement.

``serve(app)`` runs an ASGI app with uvicorn in a thread on a free port; the ``make_*``
functions put a database into the states the pages show (dead letters, a stuck consumer, a
long job reporting progress) through the public client API only.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import uvicorn

import pglogq

CHROMIUM = "/usr/bin/chromium"
SCRIPT = "<script>alert('pwned')</script>"


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="dashboard-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the dashboard server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def make_dead_letters(client: pglogq.Client, queue: str, consumer: str, payloads: Sequence[Any], *,
                      type: str | None = None, reason: str = "failed", headers: dict[str, Any] | None = None
                      ) -> list[int]:
    """Send ``payloads`` and nack them until each is a dead letter of ``consumer``; returns their msg ids.

    The queue gets ``max_retries`` 1 (one redelivery, then the dead-letter queue)."""
    client.set_queue_config(queue, "max_retries", 1)
    ids = client.send_batch(queue, list(payloads), type=type, headers=headers)
    wanted = set(ids)
    for _ in range(20):
        client.maintain()  # pumps due retries back into the queue
        client.tick(queue, force=True)
        while True:
            batch = client.receive(queue, consumer, max_messages=1000)
            if not batch:
                break
            for m in batch:
                if m.msg_id in wanted:
                    batch.nack(m, retry_after=timedelta(0), reason=reason)
            batch.ack()
        dead = {d.msg_id for d in client.dlq_search(queue, consumer, limit=1000, preview_chars=1)}
        if wanted <= dead:
            return ids
    raise AssertionError("the events did not all reach the dead-letter queue")


def make_stuck_consumer(client: pglogq.Client, queue: str, consumer: str, events: int = 3) -> int:
    """A consumer that received a batch and never acknowledged it, with more events waiting; returns its batch id."""
    client.subscribe(queue, consumer)
    client.send_batch(queue, [{"n": i} for i in range(events)], type="stuck.demo")
    client.tick(queue, force=True)
    batch = client.receive(queue, consumer)
    assert batch.id is not None
    client.send_batch(queue, [{"n": i} for i in range(events)], type="stuck.demo")
    client.tick(queue, force=True)
    return batch.id


class LongJob:
    """A worker handling one event for ``seconds``, reporting its progress in ``steps`` (in a thread)."""

    def __init__(self, dsn: str, queue: str, consumer: str, *, seconds: float = 3.0, steps: int = 10,
                 worker: str = "worker-1", stepped: bool = False) -> None:
        self.dsn, self.queue, self.consumer = dsn, queue, consumer
        self.seconds, self.steps, self.worker = seconds, steps, worker
        self.msg_id: int | None = None
        self.started = threading.Event()
        self.done = threading.Event()
        self.stepped = stepped
        """stepped: each step waits for :meth:`step` (a test follows the job step by step)"""
        self._go = threading.Semaphore(0)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="long-job", daemon=True)

    def start(self) -> LongJob:
        with pglogq.Client(self.dsn) as c:
            c.subscribe(self.queue, self.consumer)
            self.msg_id = c.send(self.queue, {"report": "yearly"}, type="report.build")
            c.tick(self.queue, force=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with pglogq.Client(self.dsn) as c:
                batch = c.receive(self.queue, self.consumer, worker=self.worker)
                assert batch.id is not None
                for m in batch:
                    for step in range(self.steps + 1):
                        if self.stepped and not self._go.acquire(timeout=120):
                            raise TimeoutError("nobody stepped the job")
                        c.report_progress(batch.id, m.msg_id, percent=100 * step / self.steps,
                                          stage=f"step {step} of {self.steps}", worker=self.worker)
                        self.started.set()
                        if not self.stepped:
                            time.sleep(self.seconds / self.steps)
                if self.stepped and not self._go.acquire(timeout=120):
                    raise TimeoutError("nobody stepped the job")
                batch.ack()
        except BaseException as exc:
            self.error = exc
            self.started.set()
        finally:
            self.done.set()

    def step(self) -> None:
        """Let a stepped job report its next progress (after the last one: acknowledge)."""
        self._go.release()

    def join(self, timeout: float = 60) -> None:
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error


def run(coro: Any) -> Any:
    return asyncio.run(coro)
