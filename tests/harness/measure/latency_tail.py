"""Where the end-to-end latency's tail comes from: each event's latency beside what the sessions of
the database waited for at that moment.

    python -m tests.harness.measure.latency_tail --dsn SERVER_DSN [--rate 1000] [--seconds 30] [--top 10]

In a database of its own (``latency_tail``, made again): the in-process ticker with its defaults,
a ``pglogq.Consumer`` woken by LISTEN (threads, a no-op handler that stamps the time it starts),
and a producer sending one event per ``1/rate`` s, each carrying the time its send started (one
process, one monotonic clock).  Meanwhile a sampler reads ``pg_stat_activity`` every 2 ms and
keeps every session that waits (wait_event_type Lock, LWLock, IO, ...) with the first statement
of each session blocking it (``pg_blocking_pids``) and the relation it waits for.  Prints the
latency percentiles, then the ``--top`` slowest events, each with the waits sampled while it was
in flight, most frequent first.  A wait that stands behind each slow event is the tail's cause.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter

import psycopg

import pglogq
from tests.harness.bench.ticking import ticker_running

QUEUE = "tail"
DB = "latency_tail"


def _fresh_db(server: str) -> str:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    return psycopg.conninfo.make_conninfo(server, dbname=DB)


_WAITS = """
SELECT a.pid, a.wait_event_type, a.wait_event, left(a.query, 60),
       (SELECT left(b.query, 60) FROM pg_stat_activity b WHERE b.pid = (pg_blocking_pids(a.pid))[1])
       || coalesce(' on ' || (SELECT string_agg(l.relation::regclass::text, ',') FROM pg_locks l
                               WHERE l.pid = a.pid AND NOT l.granted), '')
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state = 'active'
   AND a.wait_event_type IS NOT NULL AND a.wait_event_type NOT IN ('Client', 'Activity')
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="an admin connection to the server")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args(argv)
    dsn = _fresh_db(args.dsn)
    with pglogq.Client(dsn) as c:
        c.install_schema()
        c.create_queue(QUEUE)
        c.subscribe(QUEUE, "tail")
    started: dict[int, float] = {}
    sent: dict[int, float] = {}
    waits: list[tuple[float, str]] = []
    stop = threading.Event()

    def sampler() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                now = time.monotonic()
                for _pid, kind, event, query, blocker in conn.execute(_WAITS).fetchall():
                    waits.append((now, f"{kind}/{event}: {query!r} behind {blocker!r}"))
                time.sleep(0.002)

    consumer = pglogq.Consumer(pglogq.Client(dsn), QUEUE, "tail")

    @consumer.handler()
    def stamp(msg: pglogq.Message) -> None:
        started.setdefault(int(msg.payload["n"]), time.monotonic())

    def produce() -> None:
        with pglogq.Client(dsn) as c:
            gap = 1.0 / args.rate
            t0 = time.monotonic()
            for n in range(int(args.rate * args.seconds)):
                due = t0 + n * gap
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                sent[n] = time.monotonic()
                c.send(QUEUE, {"n": n})

    with ticker_running(dsn):
        threads = [threading.Thread(target=sampler, daemon=True),
                   threading.Thread(target=lambda: consumer.run(), daemon=True)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        produce()
        end = time.monotonic() + 10
        while len(started) < len(sent) and time.monotonic() < end:
            time.sleep(0.05)
        consumer.stop()
        stop.set()
        for t in threads:
            t.join(10)
    lat = sorted(((started[n] - sent[n]) * 1000, n) for n in sent if n in started)
    values = [x for x, _ in lat]
    print(f"{len(values)} of {len(sent)} events; latency ms p50 {statistics.median(values):.1f}"
          f" p99 {values[int(len(values) * 0.99) - 1]:.1f} max {values[-1]:.1f}")
    for ms, n in lat[::-1][:args.top]:
        lo, hi = sent[n], started[n]
        seen: Counter[str] = Counter(w for t, w in waits if lo <= t <= hi)
        print(f"event {n}: {ms:.1f} ms" + "".join(f"\n    {k} x{v}" for k, v in seen.most_common(4)))


if __name__ == "__main__":
    main()
