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
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from typing_extensions import LiteralString

import pglogq
from pglogq.dsn import resolve_dsn
from tests.harness import child_env
from tests.harness.bench import payload


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


# -- the drain comparison: the Python consumer against the SQL loop, same run, interleaved ----

SQL_RECEIVE: LiteralString = "SELECT * FROM pglogq.receive(%s, %s, %s)"
SQL_ACK: LiteralString = "SELECT pglogq.ack(%s)"
COMPARE_QUEUE = "measure_consumer_compare"


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def preload(client: pglogq.Client, queue: str, events: int, tick_every: int) -> None:
    """A fresh queue with one consumer ``m`` and ``events`` events of about 130 bytes (the
    benchmark's payload), ticked every ``tick_every`` events."""
    _fresh_queue(client, queue)
    rows = [payload.make(i) for i in range(1000)]
    sent = since = 0
    while sent < events:
        n = min(1000, events - sent)
        client.send_batch(queue, rows[:n])
        sent += n
        since += n
        if since >= tick_every or sent == events:
            client.tick(queue, force=True)
            since = 0


def sql_loop(dsn: str, queue: str, page: int) -> tuple[int, float]:
    """The SQL-level drain: ``SELECT * FROM pglogq.receive(...)`` then ``pglogq.ack(batch_id)``
    over psycopg (jsonb decoded by psycopg's default loader): (events, seconds)."""
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        t0 = time.perf_counter()
        while True:
            rows = conn.execute(SQL_RECEIVE, (queue, "m", page)).fetchall()
            if not rows:
                return n, time.perf_counter() - t0
            n += len(rows)
            conn.execute(SQL_ACK, (rows[0][0],))


def consumer_drain(dsn: str, queue: str, mode: str, options: dict[str, Any]) -> tuple[int, float]:
    """Drain ``queue`` with ``Consumer`` (mode ``thread``) or ``AsyncConsumer`` (``asyncio``) and a
    no-op handler, ``options`` passed as given (none: the defaults): (events handled, seconds)."""
    if mode == "thread":
        consumer = pglogq.Consumer(dsn, queue, "m", **options)
        consumer.handler()(lambda msg: None)
        consumer.client.consumer_info(queue)  # open the pool before the clock starts
        try:
            t0 = time.perf_counter()
            handled = consumer.run(stop_when_idle=True).handled
            return handled, time.perf_counter() - t0
        finally:
            consumer.close()

    async def main() -> tuple[int, float]:
        ac = pglogq.AsyncConsumer(dsn, queue, "m", **options)

        @ac.handler()
        async def noop(msg: pglogq.AsyncDelivery) -> None:
            pass

        await ac.client.consumer_info(queue)
        try:
            t0 = time.perf_counter()
            handled = (await ac.run(stop_when_idle=True)).handled
            return handled, time.perf_counter() - t0
        finally:
            await ac.aclose()

    return asyncio.run(main())


@dataclass
class Compared:
    """One contender of :func:`compare`: events/s and client CPU µs/event of each round."""

    name: str
    rates: list[float]
    cpu_us: list[float]


def compare(
    dsn: str, events: int = 200_000, tick_every: int = 5_000, sql_page: int = 10_000, page: int = 1000,
    rounds: int = 3,
) -> list[Compared]:
    """The Python consumer (threads and asyncio; default options and ``max_messages=page``)
    against the SQL loop (page ``sql_page``), each draining the same backlog, ``rounds`` rounds
    with the order rotated every round.  The client's CPU time per event (this process: the
    drains run in it) is reported beside the rate: unlike the rate, it hardly depends on what
    else the machine runs."""
    contenders: list[tuple[str, Callable[[], tuple[int, float]]]] = [
        (f"SQL loop (receive {sql_page:,} + ack)", lambda: sql_loop(dsn, COMPARE_QUEUE, sql_page)),
        ("Consumer (threads, default options)", lambda: consumer_drain(dsn, COMPARE_QUEUE, "thread", {})),
        ("AsyncConsumer (default options)", lambda: consumer_drain(dsn, COMPARE_QUEUE, "asyncio", {})),
        (f"Consumer (threads, max_messages={page:,})",
         lambda: consumer_drain(dsn, COMPARE_QUEUE, "thread", {"max_messages": page})),
        (f"AsyncConsumer (max_messages={page:,})",
         lambda: consumer_drain(dsn, COMPARE_QUEUE, "asyncio", {"max_messages": page})),
    ]
    out = {name: Compared(name, [], []) for name, _ in contenders}
    with pglogq.Client(dsn) as client:
        for r in range(rounds):
            shift = r % len(contenders)
            for name, drain in contenders[shift:] + contenders[:shift]:
                preload(client, COMPARE_QUEUE, events, tick_every)
                cpu = time.process_time()
                count, seconds = drain()
                cpu = time.process_time() - cpu
                assert count == events, (name, count, events)
                out[name].rates.append(count / seconds)
                out[name].cpu_us.append(1e6 * cpu / count)
        client.drop_queue(COMPARE_QUEUE, force=True)
    return list(out.values())


_RSS_CHILD = """
import json, sys, time
import pglogq
dsn, queue, mode = sys.argv[1], sys.argv[2], sys.argv[3]
def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0
if mode == "thread":
    c = pglogq.Consumer(dsn, queue, "m")
    c.handler()(lambda msg: None)
    c.client.consumer_info(queue)
    start = rss("VmRSS")
    t0 = time.perf_counter()
    n = c.run(stop_when_idle=True).handled
else:
    import asyncio
    async def main():
        c = pglogq.AsyncConsumer(dsn, queue, "m")
        @c.handler()
        async def noop(msg):
            pass
        await c.client.consumer_info(queue)
        s = rss("VmRSS")
        t0 = time.perf_counter()
        n = (await c.run(stop_when_idle=True)).handled
        await c.aclose()
        return s, t0, n
    start, t0, n = asyncio.run(main())
print(json.dumps({"events": n, "seconds": time.perf_counter() - t0, "rss_start_kb": start,
                  "rss_peak_kb": rss("VmHWM")}))
"""


def large_batch_rss(
    dsn: str, events: int = 1_000_000, modes: tuple[str, ...] = ("thread", "asyncio")
) -> list[dict[str, Any]]:
    """Peak resident memory (VmHWM) of a process draining one batch of ``events`` events (one
    tick) with default options, for each mode in a fresh child process."""
    queue = "measure_consumer_large"
    out = []
    with pglogq.Client(dsn) as client:
        for mode in modes:
            preload(client, queue, events, tick_every=events)
            done = subprocess.run([sys.executable, "-c", _RSS_CHILD, dsn, queue, mode], env=child_env(),
                                  check=True, capture_output=True, text=True)
            out.append({"mode": mode, **json.loads(done.stdout)})
        client.drop_queue(queue, force=True)
    return out


def print_compare(results: list[Compared], load_before: str, load_after: str) -> None:
    """Per contender: the median rate, the median of its ratios to the SQL loop of the same
    round (neighbours in time: the fairest pairing on a shared machine), the client CPU per event."""
    base = results[0]
    print(f"load average before: {load_before}; after: {load_after}")
    for c in results:
        ratio = statistics.median(x / b for x, b in zip(c.rates, base.rates, strict=True))
        each = ", ".join(f"{x:,.0f}" for x in c.rates)
        print(f"{c.name:42} {statistics.median(c.rates):>9,.0f} events/s  x{ratio:5.2f} of the SQL loop  "
              f"client CPU {statistics.median(c.cpu_us):5.2f} us/event   rounds: {each}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dsn")
    ap.add_argument("--mode", choices=("drain", "workers", "all"), default="drain",
                    help="drain: the Python consumer against the SQL loop and the large batch's memory "
                         "(default); workers: the rates of cooperating workers and the takeover time; all: both")
    ap.add_argument("--events", type=int, default=200_000, help="backlog of each drain (default 200,000)")
    ap.add_argument("--tick-every", type=int, default=5_000, help="events per tick of the backlog (default 5,000)")
    ap.add_argument("--sql-page", type=int, default=10_000, help="page of the SQL loop (default 10,000)")
    ap.add_argument("--page", type=int, default=1000, help="the consumer's non-default page (default 1,000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--large", type=int, default=1_000_000,
                    help="events of the one-batch memory measurement (0: skip; default 1,000,000)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--dead", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    with pglogq.Client(dsn) as client:
        client.install_schema()
    report: dict[str, Any] = {}
    if args.mode in ("drain", "all"):
        before = load_average()
        compared = compare(dsn, args.events, args.tick_every, args.sql_page, args.page, args.rounds)
        after = load_average()
        report["drain"] = {"load_before": before, "load_after": after,
                           "contenders": [asdict(c) for c in compared]}
        if not args.json:
            print_compare(compared, before, after)
        if args.large:
            large = large_batch_rss(dsn, args.large)
            report["large_batch"] = large
            if not args.json:
                for one in large:
                    print(f"one batch of {one['events']:,} events, {one['mode']}, default options: peak RSS "
                          f"{one['rss_peak_kb'] / 1024:,.0f} MB (at start {one['rss_start_kb'] / 1024:,.0f} MB), "
                          f"{one['events'] / one['seconds']:,.0f} events/s")
    if args.mode in ("workers", "all"):
        events = args.events // 4
        results = [
            drain_many(dsn, events, args.workers, 500, args.batch),
            # an I/O-bound handler (2 ms per event): where cooperating workers pay off
            drain_one(dsn, events // 10, 100, "thread", work_ms=2),
            drain_many(dsn, events // 10, args.workers, 100, 100, work_ms=2),
            takeover(dsn, args.dead),
        ]
        report["workers"] = [asdict(r) | {"rate": r.rate} for r in results]
        if not args.json:
            for r in results:
                print(r.line() if r.events > 1 else f"{r.name:58} {r.seconds:7.2f} s")
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
