"""Measure the consumer runtime: drain rates and takeover time.

    python -m tests.harness.measure.consumer [--dsn DSN] [--events 50000] [--page 500] [--json]

1. drain rate of one worker with a no-op handler (thread Consumer and AsyncConsumer), on a
   backlog of ``--events`` events;
2. drain rate of ``--workers`` cooperating worker processes on the same backlog (batches of
   ``--batch`` events, so that there are batches to share);
3. takeover time: a worker process is SIGKILLed in the middle of a batch; the time until another
   worker starts on that batch, with ``dead_interval`` = ``--dead`` seconds.

Each measurement uses its own queue (``measure_consumer_*``), dropped at the end.  The DSN
follows the project's rule (``--dsn``, ``PGLOGQ_DSN``, else the embedded server).  The benchmark
suite may import :func:`drain_one`, :func:`drain_many` and :func:`takeover`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

import pglogq
from pglogq.dsn import resolve_dsn
from tests.harness import child_env


@dataclass
class Result:
    name: str
    events: int
    seconds: float
    workers: int = 1

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return f"{self.name:58} {self.events:>7} events  {self.seconds:7.2f} s  {self.rate:>10,.0f} events/s"


def _fresh_queue(client: pglogq.Client, queue: str, **config: Any) -> None:
    client.drop_queue(queue, force=True)
    client.create_queue(queue)
    client.subscribe(queue, "m")
    for key, value in config.items():
        client.set_queue_config(queue, key, value)


def _backlog(client: pglogq.Client, queue: str, events: int, per_tick: int) -> None:
    """``events`` small events, ticked every ``per_tick`` events."""
    sent = 0
    while sent < events:
        n = min(1000, events - sent, per_tick - sent % per_tick)
        client.send_batch(queue, [{"n": sent + i} for i in range(n)], type="noop")
        sent += n
        if sent % per_tick == 0 or sent == events:
            client.tick(queue, force=True)


def drain_one(dsn: str, events: int = 50000, page: int = 500, mode: str = "thread", work_ms: float = 0.0) -> Result:
    """One worker, a no-op handler (or one sleeping ``work_ms``), a backlog of ``events``: events/s."""
    queue = f"measure_consumer_{mode}"
    with pglogq.Client(dsn) as client:
        _fresh_queue(client, queue)
        _backlog(client, queue, events, per_tick=10000)
        if mode == "thread":
            consumer = pglogq.Consumer(dsn, queue, "m", worker="auto", max_messages=page)
            consumer.handler()(lambda msg: time.sleep(work_ms / 1000) if work_ms else None)
            consumer.client.consumer_info(queue)  # open the pool
            t0 = time.perf_counter()
            stats = consumer.run(stop_when_idle=True)
            seconds = time.perf_counter() - t0
            consumer.close()
        else:

            async def main() -> tuple[pglogq.RunStats, float]:
                ac = pglogq.AsyncConsumer(dsn, queue, "m", worker="auto", max_messages=page)

                @ac.handler()
                async def noop(msg: pglogq.AsyncDelivery) -> None:
                    if work_ms:
                        await asyncio.sleep(work_ms / 1000)

                await ac.client.consumer_info(queue)
                t0 = time.perf_counter()
                result = await ac.run(stop_when_idle=True)
                elapsed = time.perf_counter() - t0
                await ac.aclose()
                return result, elapsed

            stats, seconds = asyncio.run(main())
        assert stats.handled == events, stats
        client.drop_queue(queue, force=True)
    work = f", {work_ms:g} ms/event" if work_ms else ""
    return Result(f"1 worker ({mode}, page {page}{work})", events, seconds)


def _coop_child(dsn: str, queue: str, name: str, page: int, work_ms: float, go: Any, out: Any) -> None:
    consumer = pglogq.Consumer(dsn, queue, "m", worker=name, max_messages=page, poll_interval=0.05)
    consumer.handler()(lambda msg: time.sleep(work_ms / 1000) if work_ms else None)
    consumer.client.consumer_info(queue)
    go.wait()
    stats = consumer.run(stop_when_idle=True)
    out.put((name, stats.handled, time.time()))
    consumer.close()


def drain_many(
    dsn: str, events: int = 50000, workers: int = 4, page: int = 500, batch: int = 1000, work_ms: float = 0.0
) -> Result:
    """``workers`` cooperating worker processes on one backlog: events per second."""
    queue = "measure_consumer_coop"
    ctx = mp.get_context("spawn")
    with pglogq.Client(dsn) as client:
        _fresh_queue(client, queue, batch_max_events=batch)
        _backlog(client, queue, events, per_tick=batch)
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_coop_child, args=(dsn, queue, f"m{i}", page, work_ms, go, out)) for i in range(workers)
        ]
        for p in procs:
            p.start()
        time.sleep(3)  # let every child import and connect
        t0 = time.time()
        go.set()
        done = [out.get(timeout=600) for _ in procs]
        for p in procs:
            p.join()
        handled = sum(d[1] for d in done)
        seconds = max(d[2] for d in done) - t0
        assert handled == events, done
        client.drop_queue(queue, force=True)
    work = f", {work_ms:g} ms/event" if work_ms else ""
    return Result(f"{workers} cooperating workers (page {page}, batch {batch}{work})", events, seconds, workers)


_TAKEOVER_WORKER = """
import os, sys, time
import pglogq
dsn, queue, name, sleep = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
c = pglogq.Consumer(dsn, queue, "m", worker=name, heartbeat_interval=0.2, poll_interval=0.05)
import psycopg
rec = psycopg.connect(dsn, autocommit=True)
@c.handler()
def slow(msg):
    rec.execute("INSERT INTO measure_takeover VALUES (%s, %s, clock_timestamp())", (msg.msg_id, name))
    time.sleep(sleep)
c.run()
"""


def takeover(dsn: str, dead: float = 2.0) -> Result:
    """SIGKILL a worker in the middle of a batch: seconds until another worker starts on it."""
    queue = "measure_consumer_takeover"
    with pglogq.Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as conn:
        _fresh_queue(client, queue, batch_max_events=5, dead_interval=f"{dead} seconds")
        conn.execute("DROP TABLE IF EXISTS measure_takeover")
        conn.execute("CREATE TABLE measure_takeover (msg_id bigint, worker text, at timestamptz)")
        ids = client.send_batch(queue, [{"n": i} for i in range(5)], type="slow")
        client.tick(queue, force=True)

        def spawn(name: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, "-c", _TAKEOVER_WORKER, dsn, queue, name, "0.5"], env=child_env())

        a = spawn("A")
        b = None
        try:
            while not conn.execute("SELECT count(*) FROM measure_takeover WHERE worker = 'A'").fetchone()[0]:  # type: ignore[index]
                time.sleep(0.02)
            b = spawn("B")  # idle: every batch is A's
            time.sleep(1.0)
            killed = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
            os.kill(a.pid, signal.SIGKILL)
            a.wait()
            while True:
                row = conn.execute(
                    "SELECT min(at) FROM measure_takeover WHERE worker = 'B' AND msg_id = ANY(%s)", (ids,)
                ).fetchone()
                if row and row[0] is not None:
                    break
                time.sleep(0.02)
            seconds = (row[0] - killed).total_seconds()
        finally:
            for p in (a, b):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        conn.execute("DROP TABLE measure_takeover")
        client.drop_queue(queue, force=True)
    return Result(f"takeover after SIGKILL (dead_interval {dead:g} s)", 1, seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dsn")
    ap.add_argument("--events", type=int, default=50000)
    ap.add_argument("--page", type=int, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--dead", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    with pglogq.Client(dsn) as client:
        client.install_schema()
    results = [
        drain_one(dsn, args.events, args.page, "thread"),
        drain_one(dsn, args.events, args.page, "asyncio"),
        drain_one(dsn, args.events, 100, "thread"),
        drain_many(dsn, args.events, args.workers, args.page, args.batch),
        # an I/O-bound handler (2 ms per event): where cooperating workers pay off
        drain_one(dsn, args.events // 10, 100, "thread", work_ms=2),
        drain_many(dsn, args.events // 10, args.workers, 100, 100, work_ms=2),
        takeover(dsn, args.dead),
    ]
    if args.json:
        print(json.dumps([asdict(r) | {"rate": r.rate} for r in results], indent=2))
    else:
        for r in results:
            print(r.line() if r.events > 1 else f"{r.name:58} {r.seconds:7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
