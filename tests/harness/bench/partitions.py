"""Scenario: partitions inside a queue.  One consumer of a queue of 8 partitions is
drained by 1, 2, 4 and 8 cooperating workers whose handler sleeps 2 ms per event, so that the
machine's cores are not the limit: throughput should grow with the workers up to the number of
partitions.  The same events on an unpartitioned queue, drained by the same workers, show what
cooperating workers get without partitions (whole batches, no per-key order).  Each drain also
counts per-key order violations and events of one key handled at the same time (both must be 0
on the partitioned queue).

The workers are threads of this process, each with its own connection, calling the SQL API
(receive, ack) directly: what is measured is the engine's sharing of the partitions, not a
runtime's scheduling."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg

import pglogq
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.systems import Pglogq, System

SCENARIO = "partitions"
PARTITIONS = 8
KEYS = 64
PAGE = 20
RECEIVE = "SELECT batch_id, msg_id, payload::text, txid::text FROM pglogq.receive(%s, %s, %s, %s)"
ACK = "SELECT pglogq.ack(%s, %s, %s::xid8)"


@dataclass
class Tally:
    """What the workers of one drain saw, shared under a lock."""

    handled: int = 0
    order_violations: int = 0
    overlaps: int = 0  # an event started while another event of its key was running
    last_seq: dict[str, int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock)


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    n = ctx.settings.partition_events
    sleep_s = ctx.settings.partition_handler_ms / 1000
    series: dict[str, list[tuple[int, float]]] = {}
    for partitions in (PARTITIONS, 1):
        label = f"pglogq, {partitions} partitions" if partitions > 1 else "pglogq, unpartitioned"
        queue = f"parts_{partitions}"
        consumers = [f"c{w}" for w in ctx.settings.partition_workers]
        setup(ctx, queue, partitions, consumers, n)
        for workers, consumer in zip(ctx.settings.partition_workers, consumers, strict=True):
            seconds, tally = drain(ctx.dsn, queue, consumer, workers, n, sleep_s)
            rate = tally.handled / seconds
            plural = "s" if workers > 1 else ""
            case = f"drain, {workers} worker{plural}, handler {ctx.settings.partition_handler_ms:g} ms"
            ctx.results.add(Measure(SCENARIO, case, label, rate, "events/s", extra={
                "events": tally.handled, "seconds": round(seconds, 3), "workers": workers,
                "per_key_order_violations": tally.order_violations, "same_key_overlaps": tally.overlaps,
                "ideal_events_per_s": round(min(workers, partitions if partitions > 1 else workers) / sleep_s),
            }))
            series.setdefault(label, []).append((workers, rate))
            if partitions > 1 and (tally.order_violations or tally.overlaps or tally.handled != n):
                ctx.results.note(SCENARIO, f"{label}, {workers} workers: {tally.handled} of {n} handled, "
                                           f"{tally.order_violations} order violations, {tally.overlaps} overlaps")
    for label, points in series.items():
        ctx.results.series.append(Series(SCENARIO, label, [p[0] for p in points], [p[1] for p in points],
                                         "workers", "events/s"))
    ctx.results.note(SCENARIO, f"{n} events of {KEYS} keys, handler sleeping {ctx.settings.partition_handler_ms:g} ms "
                               f"per event, pages of {PAGE}; workers are threads with their own connections")


def setup(ctx: BenchContext, queue: str, partitions: int, consumers: list[str], n: int) -> None:
    """The queue, one consumer per drain (all subscribed before the events), the keyed events."""
    with psycopg.connect(ctx.dsn, autocommit=True) as conn:
        with pglogq.Client(ctx.dsn) as client:
            client.create_queue(queue, partitions=partitions)
        for c in consumers:
            conn.execute("SELECT pglogq.subscribe(%s, %s)", (queue, c))
        seq: dict[str, int] = defaultdict(int)
        for start in range(0, n, 500):
            keys = [f"k{(start + i) % KEYS}" for i in range(min(500, n - start))]
            payloads = []
            for k in keys:
                payloads.append({"k": k, "s": seq[k]})
                seq[k] += 1
            conn.execute("SELECT pglogq.send_batch_keyed(%s, %s::jsonb, %s)", (queue, json.dumps(payloads), keys))
            conn.execute("SELECT pglogq.force_tick(%s)", (queue,))


def drain(dsn: str, queue: str, consumer: str, workers: int, n: int, sleep_s: float) -> tuple[float, Tally]:
    tally = Tally()
    deadline = time.monotonic() + max(60.0, 4 * n * sleep_s)
    ready = threading.Barrier(workers + 1)

    def worker(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT 1")
            ready.wait()
            while time.monotonic() < deadline:
                with tally.lock:
                    if tally.handled >= n:
                        return
                rows = conn.execute(RECEIVE, (queue, consumer, PAGE, f"w{i}")).fetchall()
                if not rows:
                    time.sleep(0.002)
                    continue
                for row in rows:
                    handle(tally, json.loads(row[2]), sleep_s)
                last = rows[-1]
                conn.execute(ACK, (last[0], last[1], last[3]))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    ready.wait()
    start = time.monotonic()
    for t in threads:
        t.join()
    return time.monotonic() - start, tally


def handle(tally: Tally, event: dict[str, Any], sleep_s: float) -> None:
    key, seq = event["k"], event["s"]
    with tally.lock:
        tally.running[key] += 1
        if tally.running[key] > 1:
            tally.overlaps += 1
        if seq != tally.last_seq.get(key, -1) + 1:
            tally.order_violations += 1
        tally.last_seq[key] = max(seq, tally.last_seq.get(key, -1))
    time.sleep(sleep_s)
    with tally.lock:
        tally.running[key] -= 1
        tally.handled += 1
