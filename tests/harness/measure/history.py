"""Measure the outcome log (job history): its cost to the consumer runtime, its pages, results.

    python -m tests.harness.measure.history [--dsn DSN] [--part throughput,pages,result,cost]
        [--events 100000] [--rounds 7] [--outcomes 1000000] [--repeat 20] [--rate 100] [--seconds 20]
        [--page 7000]

``--dsn`` names a server (its maintenance database); a scratch database ``pglogq_bench_history``
is created there, used and dropped.  Without it the embedded PostgreSQL is used.  Four parts
(the first three by default):

* throughput: a Consumer (threads, no-op handlers, adaptive pages) drains a backlog of
  ``--events`` events with the queue's ``history_retention`` 1 day (the log on) and 0 (off),
  ``--rounds`` rounds interleaved (on first in one round, off first in the next); handled
  events per second of each, the ratio of their medians, and the median of each round's ratio
  (its two drains ran back to back: steadier on a machine whose load changes);
* pages: ``--outcomes`` outcomes recorded for one consumer (through record_outcomes, pages of
  10,000, 2 % failed, two types), then ``jobs(state='finished')``, ``state='failed'`` and
  ``state='done', type=...`` first pages (100 rows) and the page after a cursor half-way, and
  the look-up of one event's runs (what lookup and result read), each timed ``--repeat`` times
  (median, max in ms, as the client sees it);
* result: ``--rate`` jobs/s sent for ``--seconds``, a Consumer with ``store_result`` handling
  them, and for each a waiting ``client.result``: the round trip send → handler → result back,
  p50 / p99;
* cost: what the log adds to the acknowledgement of one page of ``--page`` no-op runs, as CPU
  time rather than a rate, so that a machine whose load changes blurs it less than the drains'
  ratio: ``--repeat`` pages of each of three queues (log on with this checkout's runtime, log
  off), their acks in turns, the ack's CPU time in the client (``time.process_time``) and in its
  server backend (``/proc/<pid>/schedstat``: a server on this machine; else not measured), and
  the median of each page's difference on minus off, per event.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import pglogq

DB = "pglogq_bench_history"


def fresh_database(admin_dsn: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    dsn = make_conninfo(admin_dsn, dbname=DB)
    with pglogq.Client(dsn) as c:
        c.install_schema()
    return dsn


def drain_rate(dsn: str, queue: str, events: int, retention: str) -> float:
    with pglogq.Client(dsn) as c:
        c.create_queue(queue)
        c.subscribe(queue, "c")
        c.set_queue_config(queue, "history_retention", retention)
        for i in range(0, events, 10_000):
            c.send_batch(queue, [{"n": j} for j in range(i, min(events, i + 10_000))], type="t")
            c.tick(queue, force=True)
    consumer = pglogq.Consumer(dsn, queue, "c")
    consumer.handler("t")(lambda msg: None)
    try:
        t0 = time.perf_counter()
        stats = consumer.run(stop_when_idle=True)
        took = time.perf_counter() - t0
    finally:
        consumer.close()
    assert stats.handled == events, stats
    return events / took


def throughput(dsn: str, events: int, rounds: int) -> dict[str, Any]:
    on: list[float] = []
    off: list[float] = []
    pair = (("on", "1 day", on), ("off", "0", off))
    for r in range(rounds):
        # the order turns each round: the first drain of a pair met a colder cache and the
        # second the first's autovacuum, which in one fixed order read as the log's cost
        for label, retention, into in pair if r % 2 == 0 else pair[::-1]:
            into.append(drain_rate(dsn, f"t{r}{label}", events, retention))
    pairs = [a / b for a, b in zip(on, off, strict=True)]  # each round's two drains ran back to back
    return {"on": on, "off": off, "ratio": statistics.median(on) / statistics.median(off),
            "pair_ratio": statistics.median(pairs)}


def fill_outcomes(dsn: str, outcomes: int) -> None:
    """``outcomes`` runs for consumer c of queue p, through record_outcomes on one open batch, as
    the runtime sends them: per page of 10,000, the done ones as one group (two types), the
    failed ones one by one."""
    with pglogq.Client(dsn) as c:
        c.create_queue("p")
        c.subscribe("p", "c")
        c.send("p", {"x": 1}, type="t")
        c.tick("p", force=True)
        batch = c.receive("p", "c")
    now = time.time() - 3600
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(0, outcomes, 10_000):
            n = min(10_000, outcomes - i)
            ids = list(range(i + 1, i + n + 1))
            states = ["failed" if k % 50 == 0 else "done" for k in ids]
            types = ["mail" if k % 10 else "report" for k in ids]
            started = [now + k * 0.003 for k in ids]
            done = [k for k, state in enumerate(states) if state == "done"]
            failed = [k for k, state in enumerate(states) if state != "done"]
            for sel, group in ((done, True), (failed, False)):
                conn.execute("SELECT pglogq.record_outcomes(%s, %s, %s, %s, %s, %s, %s, NULL, %s)",
                             (batch.id, [ids[k] for k in sel], None if group else [1] * len(sel),
                              [started[k] for k in sel], [started[k] + 0.002 for k in sel],
                              None if group else [states[k] for k in sel],
                              None if group else ["boom"] * len(sel), [types[k] for k in sel]))
        conn.execute("VACUUM ANALYZE pglogq.outcome")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    fn()  # warm
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000)
    return statistics.median(ms), max(ms)


def pages(dsn: str, outcomes: int, repeat: int) -> dict[str, tuple[float, float]]:
    fill_outcomes(dsn, outcomes)
    out: dict[str, tuple[float, float]] = {}
    with pglogq.Client(dsn) as c:
        cursor: str | None = None
        after = 0
        while after < outcomes // 2:  # walk to the page half-way (pages of 10,000)
            page = c.jobs("p", "c", state="finished", limit=10_000, after=cursor)
            cursor = page[-1].cursor
            after += len(page)
        failed_half = c.jobs("p", "c", state="failed", limit=outcomes // 100, after=None)[-1].cursor
        out["finished, first page"] = timed(lambda: c.jobs("p", "c", state="finished"), repeat)
        out["finished, page half-way"] = timed(lambda: c.jobs("p", "c", state="finished", after=cursor), repeat)
        out["failed, first page"] = timed(lambda: c.jobs("p", "c", state="failed"), repeat)
        out["failed, page half-way"] = timed(lambda: c.jobs("p", "c", state="failed", after=failed_half), repeat)
        out["done of type report, first page"] = timed(lambda: c.jobs("p", "c", state="done", type="report"), repeat)
        out["every consumer, finished, first page"] = timed(lambda: c.jobs("p", state="finished"), repeat)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # queue p's consumer c: the throughput and result parts' queues have a consumer c too
        row = conn.execute("SELECT s.sub_id FROM pglogq.subscription s JOIN pglogq.queue q USING (queue_id)"
                           " WHERE q.queue_name = 'p' AND s.consumer_name = 'c'").fetchone()
        assert row is not None
        for label, wanted in (("one event's runs (lookup's), half-way", outcomes // 2),
                              ("one event's runs (lookup's), a failed one", 50)):
            found = conn.execute("SELECT count(*) FROM pglogq._event_outcomes(%s, %s, '-infinity')",
                                 (row[0], wanted)).fetchone()
            assert found == (1,), found
            out[label] = timed(lambda w=wanted: conn.execute(  # type: ignore[misc]
                "SELECT * FROM pglogq._event_outcomes(%s, %s, '-infinity')", (row[0], w)).fetchall(), repeat)
    return out


def result_round_trip(dsn: str, rate: float, seconds: float) -> dict[str, float]:
    with pglogq.Client(dsn) as c:
        c.create_queue("r")
        c.subscribe("r", "c")
        c.set_queue_config("r", "ticker_max_lag", "0")
    ticker = pglogq.start_ticker(dsn, idle_interval=0.01, maint_interval=1.0)
    consumer = pglogq.Consumer(dsn, "r", "c", store_result=True, poll_interval=0.5)
    consumer.handler("t")(lambda msg: {"n": msg.payload["n"] * 2})
    runner = threading.Thread(target=consumer.run, daemon=True)
    runner.start()
    trips: list[float] = []
    lock = threading.Lock()

    def one(client: pglogq.Client, n: int) -> None:
        t0 = time.perf_counter()
        m = client.send("r", {"n": n}, type="t")
        got = client.result("r", m, "c", timeout=60)
        assert got is not None and got.result == {"n": n * 2}
        with lock:
            trips.append(time.perf_counter() - t0)

    waiters: list[threading.Thread] = []
    with pglogq.Client(dsn, max_size=64) as client:
        start = time.perf_counter()
        n = 0
        while time.perf_counter() - start < seconds:
            t = threading.Thread(target=one, args=(client, n))
            t.start()
            waiters.append(t)
            n += 1
            time.sleep(max(0.0, start + n / rate - time.perf_counter()))
        for t in waiters:
            t.join(120)
    consumer.stop()
    runner.join(60)
    consumer.close()
    ticker.stop()
    trips.sort()
    return {"jobs": len(trips), "p50_ms": 1000 * trips[len(trips) // 2],
            "p99_ms": 1000 * trips[min(len(trips) - 1, int(len(trips) * 0.99))]}


def _backend_cpu(pid: int) -> float | None:
    """Seconds on CPU of a server backend of this machine (None: not readable here)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def page_cost(dsn: str, page_events: int, repeat: int) -> dict[str, float | None]:
    """The client and server CPU time the outcome log adds to the ack of one page (seconds per
    event, the median of ``repeat`` pairs: log on minus log off, acked in turns)."""
    from pglogq import _outcomes
    from pglogq._consumer_loop import Delivery, _Page

    class Loop:  # what _outcomes.ack reads of a receive loop
        def __init__(self, client: pglogq.Client) -> None:
            self.client = client

    took: dict[str, list[tuple[float, float | None]]] = {"on": [], "off": []}
    with pglogq.Client(dsn) as c:
        for label, retention in (("cost_on", "1 day"), ("cost_off", "0")):
            c.create_queue(label)
            c.subscribe(label, "c")
            c.set_queue_config(label, "history_retention", retention)
        pid = int(c._rows("SELECT pg_catalog.pg_backend_pid()", (), None)[0][0])
        loops = {"on": Loop(c), "off": Loop(c)}  # one each: a log found off is not offered outcomes for a while
        for i in range(repeat + 2):  # the first two pairs warm the caches and prepare the statements
            for label in ("on", "off") if i % 2 == 0 else ("off", "on"):
                queue = f"cost_{label}"
                c.send_batch(queue, [{"n": j} for j in range(page_events)], type="t")
                c.tick(queue, force=True)
                batch = c._receive(queue, "c", max_messages=page_events, worker=None, start_first=None, conn=None,
                                   cls=Delivery)
                assert batch.id is not None
                page = _Page(batch.id, queue, "c")
                now = time.time()
                for k, d in enumerate(batch.messages):  # as the runtime leaves a page of no-op runs
                    d._wall = now + k * 1e-5  # type: ignore[attr-defined]
                    d._ended = d._wall + 3e-6  # type: ignore[attr-defined]
                page.deliveries = batch.messages  # type: ignore[assignment]
                server0 = _backend_cpu(pid)
                client0 = time.process_time()
                _outcomes.ack(loops[label], page, batch.messages[-1])  # type: ignore[arg-type]
                client = time.process_time() - client0
                server1 = _backend_cpu(pid)
                if i >= 2:
                    took[label].append((client, None if server0 is None or server1 is None else server1 - server0))
    out: dict[str, float | None] = {"events": float(page_events)}
    for j, side in ((0, "client"), (1, "server")):
        pairs = [(a[j], b[j]) for a, b in zip(took["on"], took["off"], strict=True)]
        known = [(x, y) for x, y in pairs if x is not None and y is not None]
        out[f"{side}_extra"] = statistics.median([x - y for x, y in known]) / page_events if known else None
        out[f"{side}_off"] = statistics.median([y for _, y in known]) / page_events if known else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.measure.history", description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", help="server to use (default: PGLOGQ_DSN, else the embedded PostgreSQL)")
    ap.add_argument("--part", default="throughput,pages,result")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--outcomes", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--page", type=int, default=7_000, help="cost: events of each page")
    args = ap.parse_args(argv)
    from pglogq.dsn import resolve_dsn

    dsn = fresh_database(resolve_dsn(args.dsn))
    parts = args.part.split(",")
    try:
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(f"PostgreSQL {version[0] if version else '?'}")
        if "throughput" in parts:
            t = throughput(dsn, args.events, args.rounds)
            print(f"throughput, {args.events:,} no-op events per drain, {args.rounds} rounds interleaved:")
            print("   history on:  " + ", ".join(f"{x:,.0f}" for x in t["on"]) + " events/s")
            print("   history off: " + ", ".join(f"{x:,.0f}" for x in t["off"]) + " events/s")
            print(f"   ratio on/off (medians): {t['ratio']:.3f}; median of each round's ratio: {t['pair_ratio']:.3f}")
        if "pages" in parts:
            print(f"jobs(...) on {args.outcomes:,} outcomes of one consumer, 100 rows, median / max of {args.repeat}:")
            for name, (med, top) in pages(dsn, args.outcomes, args.repeat).items():
                print(f"   {name:<40} {med:7.2f} ms / {top:7.2f} ms")
        if "result" in parts:
            r = result_round_trip(dsn, args.rate, args.seconds)
            print(f"result round trip at {args.rate:g} jobs/s ({r['jobs']:.0f} jobs): p50 {r['p50_ms']:.1f} ms,"
                  f" p99 {r['p99_ms']:.1f} ms")
        if "cost" in parts:
            k = page_cost(dsn, args.page, args.repeat)
            print(f"cost of the log in the ack of a page of {args.page:,} no-op runs, median of {args.repeat} pairs"
                  " (on minus off), CPU time per event:")
            for side in ("client", "server"):
                extra, off = k[f"{side}_extra"], k[f"{side}_off"]
                print(f"   {side}: " + ("not measured (the server runs elsewhere)" if extra is None or off is None
                                      else f"{extra * 1e9:.0f} ns (the ack alone: {off * 1e9:.0f} ns)"))
    finally:
        with psycopg.connect(resolve_dsn(args.dsn), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
