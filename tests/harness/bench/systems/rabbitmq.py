"""RabbitMQ through pika: a durable queue, persistent messages, publisher confirms for single
publishes (an AMQP transaction per batch for batches: pika's blocking channel waits for one
confirm per message), manual acks (multiple=True per page) with a prefetch window."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, ClassVar

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

URL = os.environ.get("PGLOGQ_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
PREFETCH = 1000
ACK_EVERY = 100


def _connect() -> Any:
    import pika

    params = pika.URLParameters(URL)
    params.socket_timeout = 5
    params.heartbeat = 0
    return pika.BlockingConnection(params)


def _props() -> Any:
    import pika

    return pika.BasicProperties(delivery_mode=2, content_type="application/json")


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    conn = _connect()
    ch = conn.channel()
    props = _props()
    body = payload.encoded(idx)
    if mode == "single":
        ch.confirm_delivery()
    else:
        ch.tx_select()
    n = 0
    wait_until(start_at)
    while time.time() < stop_at:
        if mode == "single":
            ch.basic_publish("", conf["queue"], body, props)
            n += 1
        else:
            for _ in range(batch):
                ch.basic_publish("", conf["queue"], body, props)
            ch.tx_commit()
            n += batch
    conn.close()
    return n


def publish_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    conn = _connect()
    ch = conn.channel()
    ch.confirm_delivery()
    props = _props()

    def send(seqs: list[int]) -> list[float]:
        started = []
        for s in seqs:  # each publish returns once confirmed: each message has its own send time
            started.append(clock())
            ch.basic_publish("", conf["queue"], payload.encoded(s), props)
        return started

    try:
        return paced(rate, seconds, send, start_at=start_at)
    finally:
        conn.close()


def consume(queue: str, start_at: float, expected: int | None = None, deadline: float | None = None,
            record: Record | None = None, ready: threading.Event | None = None,
            idle: float = 1.0) -> tuple[int, float, float]:
    """Consume with manual acks until ``expected`` messages (or idle for ``idle`` seconds)."""
    conn = _connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=PREFETCH)
    n = 0
    unacked = 0
    last_tag = 0
    wait_until(start_at)
    start = time.time()
    end = start
    if ready is not None:
        ready.set()
    for method, _, body in ch.consume(queue, inactivity_timeout=0.2 if expected else idle):
        if method is None:
            if unacked:
                ch.basic_ack(last_tag, multiple=True)
                unacked = 0
            if expected is None or time.time() > (deadline or 0):
                break
            continue
        msg = json.loads(body)
        if record is not None:
            record(int(msg["seq"]), clock())
        n += 1
        end = time.time()
        last_tag = method.delivery_tag
        unacked += 1
        if unacked >= ACK_EVERY or expected is not None:
            ch.basic_ack(last_tag, multiple=True)
            unacked = 0
        if expected is not None and (n >= expected or time.time() > (deadline or 0)):
            break
    if unacked:
        ch.basic_ack(last_tag, multiple=True)
    ch.cancel()
    conn.close()
    return n, start, end


def consume_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    return consume(conf["drain_queue"], start_at)


class RabbitMQ(System):
    name: ClassVar[str] = "RabbitMQ"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(publish_paced)
    durability: ClassVar[str] = ("durable per publish: a durable queue and persistent messages; the publisher "
                                 "confirm (single sends) and tx.commit (batches) come once the broker has "
                                 "written the message to disk")

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        tag = os.getpid()
        self.queue = f"pglogq_bench_produce_{tag}"
        self.drain_queue = f"pglogq_bench_drain_{tag}"
        self.lat_queue = f"pglogq_bench_lat_{tag}"
        self._version = ""

    def unavailable(self) -> str | None:
        try:
            import pika  # noqa: F401
        except ImportError:
            return "the pika Python package is not installed (pip install -e '.[peers]')"
        try:
            conn = _connect()
        except Exception as exc:
            return f"no RabbitMQ answers at {URL.split('@')[-1]}: {type(exc).__name__} {exc}"
        props = conn._impl.server_properties
        v = props.get("version", b"")
        self._version = v.decode() if isinstance(v, bytes) else str(v)
        conn.close()
        return None

    def _declare(self, *names: str) -> None:
        conn = _connect()
        ch = conn.channel()
        for q in names:
            ch.queue_delete(q)
            ch.queue_declare(q, durable=True)
        conn.close()

    def setup(self) -> None:
        self._declare(self.queue)

    def teardown(self) -> None:
        try:
            conn = _connect()
            ch = conn.channel()
            for q in (self.queue, self.drain_queue, self.lat_queue):
                ch.queue_delete(q)
            conn.close()
        except Exception:
            pass

    def conf(self) -> dict[str, Any]:
        return {"queue": self.queue, "drain_queue": self.drain_queue}

    def version(self) -> str:
        return f"RabbitMQ {self._version}"

    def preload(self, n: int) -> None:
        self._declare(self.drain_queue)
        conn = _connect()
        ch = conn.channel()
        ch.tx_select()
        props = _props()
        for i in range(n):
            ch.basic_publish("", self.drain_queue, payload.encoded(i % 1000), props)
            if i % 1000 == 999:
                ch.tx_commit()
        ch.tx_commit()
        conn.close()

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers == 1:
            count, start, end = consume(self.drain_queue, 0.0)
            return count, end - start
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(consume_worker, self.conf(), i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def latency_setup(self, rate: int) -> None:
        self._declare(self.lat_queue)

    def latency_conf(self) -> dict[str, Any]:
        return {"queue": self.lat_queue}

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        consume(self.lat_queue, 0.0, expected=expected, deadline=deadline, record=record, ready=ready)
