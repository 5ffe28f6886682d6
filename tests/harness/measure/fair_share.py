"""One tenant's backlog beside small tenants' jobs: how long the small tenants wait, with and
without the big tenant, for a share consumer on one log and on a queue partitioned by tenant.

    python -m tests.harness.measure.fair_share --dsn SERVER_DSN [--big 100000] [--small 100] \\
        [--tenants 9] [--workers 4] [--job-ms 1] [--partitions 16,64] [--spread 5]

In a database of its own (``fair_share``, made again), with the in-process ticker: for each
layout (one log; a queue of ``P`` partitions with the tenant as the key) and each load (the big
tenant's ``--big`` jobs sent first in one go, or not at all), ``--tenants`` small tenants send
``--small`` jobs each, spread over ``--spread`` seconds, while ``--workers`` worker threads (a
``pglogq.Consumer`` each, default options, share consumer) handle every job for ``--job-ms``
milliseconds.  Measured: each small tenant's jobs' wait (send to handler start), p50 and p99
over all small jobs, and the worst tenant's p99; the run of a layout ends when every small job
has started.  Prints which tenants share a partition with the big one (``key_partition``).

The question it answers: how far a partitioned queue keyed by tenant already keeps one tenant's
backlog from holding every worker (at most one worker per partition at a time), and where
hashing tenants to partitions fails (a small tenant in the big tenant's partition waits behind
its backlog, in send order).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import pglogq
from tests.harness.bench.ticking import ticker_running
from tests.harness.measure.share_ab import fresh_db

DB = "fair_share"
BIG = "tenant-big"


def _p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def run_one(dsn: str, queue: str, partitions: int, big: int, args: argparse.Namespace) -> dict[str, Any]:
    small = [f"tenant-{i}" for i in range(args.tenants)]
    with pglogq.Client(dsn) as c:
        c.create_queue(queue, partitions=partitions)
        c.subscribe(queue, "workers", share=True)
        for start in range(0, big, 1000):
            n = min(1000, big - start)
            c.send_batch(queue, [{"t": BIG, "i": start + i} for i in range(n)], type="job",
                         keys=[BIG] * n if partitions > 1 else None)
    sent: dict[tuple[str, int], float] = {}
    started: dict[tuple[str, int], float] = {}
    lock = threading.Lock()
    done = threading.Event()
    expected = len(small) * args.small

    def handle(msg: pglogq.Delivery) -> None:
        now = time.monotonic()
        t = msg.payload["t"]
        if t != BIG:
            with lock:
                started.setdefault((t, msg.payload["i"]), now)
                if len(started) >= expected:
                    done.set()
        time.sleep(args.job_ms / 1000)

    consumers: list[pglogq.Consumer] = []

    def worker(i: int) -> None:
        with pglogq.Client(dsn) as client:
            consumer = pglogq.Consumer(client, queue, "workers", worker=f"w{i}")
            consumer.handler()(handle)
            consumers.append(consumer)
            consumer.run()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.workers)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the big backlog is being worked on when the small tenants send
    with pglogq.Client(dsn) as c:
        gap = args.spread / args.small
        t0 = time.monotonic()
        for i in range(args.small):
            time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
            for tenant in small:
                sent[(tenant, i)] = time.monotonic()
                c.send(queue, {"t": tenant, "i": i}, type="job", key=tenant if partitions > 1 else None)
    done.wait(args.big / 100 + 600)
    for consumer in consumers:
        consumer.stop()
    for t in threads:
        t.join(60)
    waits = {k: (started[k] - sent[k]) * 1000 for k in sent if k in started}
    per_tenant = {t: _p99([w for k, w in waits.items() if k[0] == t]) for t in small}
    worst = max(per_tenant, key=lambda t: per_tenant[t])
    shared = [t for t in small if pglogq.key_partition(t, partitions) == pglogq.key_partition(BIG, partitions)]
    values = list(waits.values())
    return {"started": len(waits), "of": expected, "p50": statistics.median(values), "p99": _p99(values),
            "worst": worst, "worst_p99": per_tenant[worst], "shared_with_big": shared}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="an admin connection to the server")
    ap.add_argument("--big", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--tenants", type=int, default=9)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--job-ms", type=float, default=1.0)
    ap.add_argument("--spread", type=float, default=5.0)
    ap.add_argument("--partitions", default="16,64", help="partition counts to try (1: one log is always run)")
    args = ap.parse_args(argv)
    dsn = fresh_db(args.dsn, DB, [])
    pglogq.Client(dsn).install_schema()
    layouts = [1, *(int(x) for x in args.partitions.split(",") if x and int(x) > 1)]
    with ticker_running(dsn):
        for p in layouts:
            for big in (0, args.big):
                r = run_one(dsn, f"fair_p{p}_b{big}", p, big, args)
                print(f"{'one log' if p == 1 else f'{p} partitions'}, big tenant {big:,} jobs: "
                      f"small jobs started {r['started']} of {r['of']}, wait p50 {r['p50']:.0f} ms, "
                      f"p99 {r['p99']:.0f} ms, worst tenant {r['worst']} p99 {r['worst_p99']:.0f} ms"
                      + (f"; in the big tenant's partition: {', '.join(r['shared_with_big']) or 'none'}"
                         if p > 1 else ""), flush=True)


if __name__ == "__main__":
    main()
