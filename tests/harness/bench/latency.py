"""Scenario 3, end to end: latency from the producer's commit to the start of the handler, at
offered rates of 100, 1,000 and 10,000 events/s.  pglogq runs with default queue settings, the
ticker running, and a consumer woken by LISTEN on "pglogq.<queue>" (pglogq.Consumer)."""

from __future__ import annotations

import threading
import time

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.stats import percentile
from tests.harness.bench.systems import Pglogq, PgQue, System
from tests.harness.bench.systems.pglogq_system import preload
from tests.harness.bench.ticking import ticker_running

SCENARIO = "latency"
GRACE = 10.0  # seconds a consumer may lag behind the producer before the run is cut


def run(ctx: BenchContext, systems: list[System]) -> None:
    s = ctx.settings
    ctx.results.note(SCENARIO, "latency = time the handler started - time the producer's send call carrying "
                               "the event started (its commit or the broker's acknowledgement is inside it); "
                               "one clock: both stamps are CLOCK_MONOTONIC, one machine-wide counter read by "
                               "the producer's process and the consumer's, paired by the event's sequence "
                               "number in the consumer's process.  A chunk of events due together is one send "
                               "call (one transaction or pipeline) stamped with the call's start; RabbitMQ "
                               "publishes (and confirms) one message at a time, each stamped with its own "
                               "start.  Measured this way a latency cannot be below 0; the run fails if one is.")
    ctx.results.note(SCENARIO, f"each rate runs on a new queue: {s.latency_warmup_seconds:g} s of load first, on the "
                               "same producer, ticker and consumer sessions, reported apart as the new queue's "
                               "first events (every session's first calls on it); then the measured "
                               f"{s.latency_seconds:g} s")
    ctx.results.note(SCENARIO, "the jobs-table baseline polls every 10 ms (the seeds' design has no wake-up); "
                               "PGQueuer and Procrastinate use their own LISTEN/NOTIFY wake-ups")
    with ticker_running(ctx.dsn) as how:
        ctx.results.note(SCENARIO, f"pglogq ticker: {how}")
        for system in systems:
            if not system.supports("latency_consumer") or system.latency_producer is None:
                continue
            rates = (s.latency_rates if isinstance(system, Pglogq)
                     else s.peer_latency_rates if isinstance(system, PgQue) else s.baseline_latency_rates)
            for rate in rates:
                measure(ctx, system, rate)
            if isinstance(system, Pglogq):
                system.cleanup()
                bystander(ctx, system)
                system.cleanup()
            kind = getattr(system, "latency_consumer_kind", None)
            if kind:
                ctx.results.note(SCENARIO, f"pglogq consumer: {kind}")


def ticker_round_ms(ctx: BenchContext, rounds: int = 5) -> float:
    """Average duration of one ``SELECT pglogq.ticker()`` (one pass over every queue)."""
    with ctx.connect() as conn:
        conn.execute("SELECT pglogq.ticker()")  # warm-up: plans, caches
        t0 = time.perf_counter()
        for _ in range(rounds):
            conn.execute("SELECT pglogq.ticker()")
        return (time.perf_counter() - t0) / rounds * 1000


def bystander(ctx: BenchContext, system: Pglogq) -> None:
    """The 1,000 events/s run again while another queue stores many (already ticked) events.

    "A 1,000,000-event queue stored beside it" is read as: present in the same
    database -- a second queue of the same database holding them (sent, ticked, nobody subscribed,
    so nothing ever consumes them) while the measured queue runs at defaults.  Every ticker pass
    visits every queue, so a pass that is slow on a big queue delays them all."""
    n = ctx.settings.bystander_events
    before = ticker_round_ms(ctx)
    with ctx.client() as c:
        c.create_queue("bystander")
        preload(c, "bystander", n, tick_every=0, chunk=10_000)
    after = ticker_round_ms(ctx)
    ctx.results.add(Measure(SCENARIO, "ticker pass, ms (SELECT pglogq.ticker())", "pglogq", before, "ms",
                            higher_is_better=False))
    name = f"pglogq ({n:,} events stored in another queue)"
    ctx.results.add(Measure(SCENARIO, "ticker pass, ms (SELECT pglogq.ticker())", name + ", just loaded", after,
                            "ms", higher_is_better=False))
    measure(ctx, system, 1000, name=name)
    # by now autovacuum has analysed the big table: the pass is timed again
    ctx.results.add(Measure(SCENARIO, "ticker pass, ms (SELECT pglogq.ticker())", name + ", after the run",
                            ticker_round_ms(ctx), "ms", higher_is_better=False))


def measure(ctx: BenchContext, system: System, rate: int, name: str | None = None) -> None:
    """One offered rate on a new queue: ``latency_warmup_seconds`` of load, then
    ``latency_seconds`` measured, one producer, ticker and consumer session throughout.

    The warm-up's events are reported apart (``first ... s: max``): they meet every session's
    first use of the new queue (the producer's first send, the ticker's first tick of it, the
    consumer's first page, start marks and acknowledgement), which compile and plan the queue's
    functions in that session, 5-15 ms each and some 40 ms end to end once; a long-running
    service pays it once per session and queue.  The percentiles and the maximum are the
    measured window's."""
    s = ctx.settings
    warm = s.latency_warmup_seconds
    expected = int(rate * (warm + s.latency_seconds))
    first = int(rate * warm)  # events of the warm-up: sequence numbers below this
    system.latency_setup(rate)
    seen: dict[int, float] = {}
    lock = threading.Lock()

    def record(seq: int, ts: float) -> None:
        with lock:
            seen.setdefault(seq, ts)

    ready = threading.Event()
    grace = GRACE if not s.quick else 3.0
    deadline = time.time() + warm + s.latency_seconds + grace + 5
    consumer = threading.Thread(target=system.latency_consumer, args=(expected, deadline, record, ready),
                                daemon=True)
    consumer.start()
    pool = ctx.pool()
    ready.wait(10)
    time.sleep(0.2)
    start_at = time.time() + 0.3
    assert system.latency_producer is not None
    sent = pool.submit(system.latency_producer, system.latency_conf(), rate, warm + s.latency_seconds,
                       start_at).result()
    produced_s = time.time() - start_at
    consumer.join(max(0.0, deadline - time.time()) + 5)
    window = time.time() - start_at  # no event can have taken longer than this to arrive
    with lock:
        lat = sorted((seen[q] - t) * 1000 for q, t in sent if q in seen and q >= first)
        cold = [(seen[q] - t) * 1000 for q, t in sent if q in seen and q < first]
    measured = sum(1 for q, _t in sent if q >= first)
    got = len(lat)
    case = f"{rate:,} events/s offered"
    extra = {"offered_rate": rate, "sent": measured, "received": got, "warmup_sent": len(sent) - measured,
             "producer_seconds": round(produced_s, 2), "window_seconds": round(window, 2)}
    label = name or system.name
    if not got:
        ctx.results.skip(SCENARIO, label, f"no event arrived at {rate} ev/s within the run")
        return
    for p in (50, 95, 99):
        ctx.results.add(Measure(SCENARIO, f"{case}: p{p}", label, percentile(lat, p), "ms",
                                higher_is_better=False, extra=extra))
    ctx.results.add(Measure(SCENARIO, f"{case}: max", label, lat[-1], "ms", higher_is_better=False,
                            extra=extra))
    if cold:
        ctx.results.add(Measure(SCENARIO, f"{case}: max of the first {warm:g} s (a new queue's first events)",
                                label, max(cold), "ms", higher_is_better=False, extra=extra))
    if got < measured:
        ctx.results.note(SCENARIO, f"{label} at {rate:,} ev/s: only {got:,} of {measured:,} events "
                                   f"arrived within {grace:.0f} s after the producer stopped (it cannot keep up); "
                                   "percentiles are over those that arrived")
    if rate == 1000 or len(ctx.settings.latency_rates) == 1:
        step = max(1, len(lat) // 200)
        ctx.results.series.append(Series(SCENARIO, f"{label} @ {rate:,} ev/s",
                                         [100 * i / len(lat) for i in range(0, len(lat), step)],
                                         lat[::step], "percentile", "latency (ms)"))
