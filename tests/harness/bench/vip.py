"""Scenario: priority that jumps a backlog.  A queue holds 12,000 newsletters
(priority 100) and 3,000 cleanups (priority 30); a pglogq.Consumer with default options drains
them (the handler takes 0.5 ms per event) with the ticker running; one second into the drain
three VIP mails (priority 150) are sent in one transaction.  Measured: the time from that send
to the start of each VIP mail's handler, over many trials -- on a queue with the urgent lane
(``create_queue(..., urgent_lane=True)``) and, once, on a queue without it (where the VIP
mails wait for the backlog's batch to be done)."""

from __future__ import annotations

import json
import threading
import time

import psycopg

import pglogq
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.stats import percentile
from tests.harness.bench.systems import Pglogq, System
from tests.harness.bench.ticking import ticker_running

SCENARIO = "vip"
HANDLER_S = 0.0005
VIPS = 3


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    backlog = s.vip_backlog
    ctx.results.note(SCENARIO, f"{backlog * 4 // 5:,} newsletters (priority 100) and {backlog // 5:,} cleanups "
                               f"(priority 30) waiting, handler {HANDLER_S * 1000:g} ms per event, pglogq.Consumer "
                               f"with default options, ticker running; {VIPS} VIP mails (priority 150) sent in one "
                               f"transaction {s.vip_after_seconds:g} s into the drain; time from the send to the "
                               "start of each VIP mail's handler")
    with ticker_running(ctx.dsn):
        for lane, trials in ((True, s.vip_trials), (False, s.vip_baseline_trials)):
            waits: list[float] = []
            for t in range(trials):
                waits += trial(ctx.dsn, f"vip_{int(lane)}_{t}", lane, backlog, s.vip_after_seconds)
            if not waits:
                continue
            waits.sort()
            name = "pglogq (urgent lane)" if lane else "pglogq (no urgent lane)"
            extra = {"trials": trials, "vip_mails": len(waits), "max_s": round(max(waits), 3)}
            ctx.results.add(Measure(SCENARIO, "VIP mail: send to handler start, p50", name,
                                    percentile(waits, 50) * 1000, "ms", higher_is_better=False, extra=extra))
            ctx.results.add(Measure(SCENARIO, "VIP mail: send to handler start, p99", name,
                                    percentile(waits, 99) * 1000, "ms", higher_is_better=False, extra=extra))


def trial(dsn: str, queue: str, lane: bool, backlog: int, after_s: float) -> list[float]:
    """One drain with the VIP mails sent into it: each VIP mail's wait, in seconds."""
    with pglogq.Client(dsn) as client:
        client.create_queue(queue, urgent_lane=lane)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.subscribe(%s, 'mailer')", (queue,))
        news, cleanups = backlog * 4 // 5, backlog // 5
        for kind, count, prio in (("newsletter", news, 100), ("cleanup", cleanups, 30)):
            for start in range(0, count, 1000):
                rows = [json.dumps({"n": i}) for i in range(start, min(count, start + 1000))]
                conn.execute("SELECT pglogq.send_batch(%s, %s::jsonb[], type => %s, priority => %s)",
                             (queue, rows, kind, prio))
        conn.execute("SELECT pglogq.force_tick(%s)", (queue,))
    started: dict[int, float] = {}
    done = threading.Event()
    with pglogq.Client(dsn) as client:
        consumer = pglogq.Consumer(client, queue, "mailer")

        @consumer.handler("vip")
        def vip(msg: pglogq.Delivery) -> None:
            started[msg.msg_id] = time.monotonic()
            if len(started) >= VIPS:
                done.set()

        @consumer.handler()
        def ordinary(msg: pglogq.Delivery) -> None:
            time.sleep(HANDLER_S)

        runner = threading.Thread(target=consumer.run, daemon=True)
        runner.start()
        time.sleep(after_s)
        sent_at = time.monotonic()
        client.send_batch(queue, [{"vip": i} for i in range(VIPS)], type="vip", priority=150)  # one transaction
        done.wait(60)
        consumer.stop()
        runner.join(30)
        client.drop_queue(queue, force=True)
    return [t - sent_at for t in started.values()]
