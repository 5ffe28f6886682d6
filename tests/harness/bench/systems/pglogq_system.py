"""pglogq itself: sends through the client, drains at SQL level, by cooperating workers and
through the Python consumer, and a LISTEN-woken consumer for the latency runs."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, ClassVar

import psycopg

import pglogq
from tests.harness.bench import payload
from tests.harness.bench.pacing import paced, wait_until
from tests.harness.bench.systems.base import Record, System

PRODUCE_QUEUE = "bench_produce"
DRAIN_QUEUE = "bench_drain"
RECEIVE = "SELECT batch_id, msg_id, payload::text FROM pglogq.receive(%s, %s, %s, %s)"
"""The SQL drain reads the payload as text and decodes it with ``json.loads``, as every other
system's drain does (PgQue's ``ev_data``, the ceiling's rows): one decoder for all, so that the
rows compare the engines.  psycopg's own jsonb loader would add a Python-level call and a
``bytes`` copy per row (about 1.5 us per event on the bench machine) that PgQue's drain does not pay."""
ACK = "SELECT pglogq.ack(%s)"
APP_INSERT = "INSERT INTO bench_app_order (customer, amount) VALUES (%s, %s)"


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    """One producer client: send until stop_at; returns the events sent."""
    dsn, queue = conf["dsn"], conf["queue"]
    client = pglogq.Client(dsn)
    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(start_at)
        while time.time() < stop_at:
            if mode == "single":
                client.send(queue, rows[0], conn=conn)
                n += 1
            elif mode == "batch":
                client.send_batch(queue, rows, conn=conn)
                n += batch
            elif mode == "app_txn":
                with conn.transaction():
                    conn.execute(APP_INSERT, (idx, 99.95))
                    client.send(queue, rows[0], conn=conn)
                n += 1
            else:
                raise ValueError(mode)
    return n


def send_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    """Latency producer: ``rate`` events/s, one transaction per call (send or send_batch)."""
    dsn, queue = conf["dsn"], conf["queue"]
    client = pglogq.Client(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:

        def send(seqs: list[int]) -> None:
            if len(seqs) == 1:
                client.send(queue, payload.make(seqs[0]), conn=conn)
            else:
                client.send_batch(queue, [payload.make(s) for s in seqs], conn=conn)

        return paced(rate, seconds, send, start_at=start_at)


def drain_worker(dsn: str, queue: str, consumer: str, page: int, worker: str | None) -> tuple[int, float, float]:
    """Receive, decode and ack pages until there is nothing left: (events, start, end)."""
    n = 0
    loads = json.loads
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        start = time.time()
        while True:
            rows = conn.execute(RECEIVE, (queue, consumer, page, worker)).fetchall()
            if not rows:
                break
            for row in rows:  # decode, as a consumer would (see RECEIVE)
                loads(row[2])
            n += len(rows)
            conn.execute(ACK, (rows[0][0],))
        return n, start, time.time()


def coop_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    wait_until(start_at)
    return drain_worker(conf["dsn"], conf["queue"], conf["consumer"], conf["page"], f"w{idx}")


def preload(client: pglogq.Client, queue: str, n: int, tick_every: int, chunk: int = 1000) -> None:
    """Send ``n`` events in batches, forcing a tick every ``tick_every`` events and at the end."""
    rows = [payload.make(i) for i in range(chunk)]
    sent = 0
    since_tick = 0
    while sent < n:
        k = min(chunk, n - sent)
        client.send_batch(queue, rows[:k])
        sent += k
        since_tick += k
        if tick_every and since_tick >= tick_every:
            client.tick(queue, force=True)
            since_tick = 0
    client.tick(queue, force=True)


class Pglogq(System):
    name: ClassVar[str] = "pglogq"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch", "app_txn")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(send_paced)

    def setup(self) -> None:
        with self.ctx.client() as c:
            c.create_queue(PRODUCE_QUEUE)

    def conf(self) -> dict[str, Any]:
        return {"dsn": self.ctx.dsn, "queue": PRODUCE_QUEUE}

    def cleanup(self) -> None:
        """Drop every queue but the produce queue (recreated empty)."""
        with self.ctx.client() as c:
            for info in c.queue_info():
                c.drop_queue(info.queue_name, force=True)
            c.create_queue(PRODUCE_QUEUE)

    def version(self) -> str:
        return pglogq.__version__

    # -- consume: a fresh queue with one consumer for every drain
    def preload(self, n: int) -> None:
        self._drains = getattr(self, "_drains", 0) + 1
        self._drain_queue = f"{DRAIN_QUEUE}_{self._drains}"
        with self.ctx.client() as c:
            c.create_queue(self._drain_queue)
            c.subscribe(self._drain_queue, "c")
            preload(c, self._drain_queue, n, self.ctx.settings.backlog_tick_every)

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        page = self.ctx.settings.page_size
        if workers == 1:
            count, start, end = drain_worker(self.ctx.dsn, self._drain_queue, "c", page, None)
            return count, end - start
        conf = {"dsn": self.ctx.dsn, "queue": self._drain_queue, "consumer": "c", "page": page}
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(coop_worker, conf, i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def drain_python_consumer(self, **options: Any) -> tuple[int, float]:
        """Drain with pglogq.Consumer and a no-op handler: (events, seconds)."""
        from tests.harness.bench.consumer_adapter import run_consumer

        return run_consumer(self.ctx.dsn, self._drain_queue, "c", **options)

    # -- latency: a consumer woken by LISTEN "pglogq.<queue>" ----------------------------------
    def latency_setup(self, rate: int) -> None:
        self._lat_queue = f"lat_{rate}"
        with self.ctx.client() as c:
            c.create_queue(self._lat_queue)
            c.subscribe(self._lat_queue, "lat")

    def latency_conf(self) -> dict[str, Any]:
        return {"dsn": self.ctx.dsn, "queue": self._lat_queue}

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        from tests.harness.bench.consumer_adapter import consumer_latency

        self.latency_consumer_kind = consumer_latency(self.ctx.dsn, self._lat_queue, "lat", expected,
                                                      deadline, record, ready)
