"""Scenario: job history (the outcome log), pglogq only.  The measuring functions are those of
``tests.harness.measure.history`` (imported, one implementation); this module runs them at the
bench's sizes, in a scratch database of their own on the bench server (their queue and consumer
names are fixed), and records the figures the targets read:

- (a) a no-op handler's drain (``pglogq.Consumer``, threads, defaults) of ``history_events``
  events with the queue's ``history_retention`` 1 day (history on) and 0 (off), ``history_rounds``
  rounds, on and off back to back in each (the order turns each round); the ratio kept is the
  median of each round's ratio (target >= 0.9x);
- (b) the result round trip at ``history_rate`` jobs/s for ``history_seconds``: send → a
  ``store_result`` handler → ``client.result`` of a waiting client, p50 and p99 (reported; the
  issue sets no target);
- (c) ``jobs(...)`` of finished jobs on ``history_outcomes`` outcomes of one consumer: the first
  page and the page after a cursor half-way (target < 50 ms each at 1,000,000 outcomes), besides
  the failed ones, one type, every consumer and one event's runs.

- (d) the metadata under a held snapshot with history on and off: ``history_meta_events`` events
  through three consumers (one of two cooperating workers) while a REPEATABLE READ transaction
  holds its snapshot, maintenance (and the log's epoch switch) every 2,000 events, by
  ``tests.harness.measure.metadata.measure``: the metadata tables' growth and what the outcome
  log holds at the end (bounded: its tables are emptied by TRUNCATE as the epochs turn).
"""

from __future__ import annotations

import statistics

import psycopg

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, System
from tests.harness.measure import history as mh
from tests.harness.measure import metadata

SCENARIO = "history"
PGLOGQ = "pglogq"
ON, OFF = "pglogq (history on)", "pglogq (history off)"
DRAIN = "no-op handler drain"
RATIO = "throughput, history on / off"
TRIP = "result round trip"  # ": p50" / ": p99" appended
FIRST = "jobs(): finished, first page"
HALF = "jobs(): finished, page half-way"
HELD = "held snapshot: metadata growth"


def trip_case(rate: float, p: str) -> str:
    return f"{TRIP} at {rate:g} jobs/s: {p}"


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    dsn = mh.fresh_database(ctx.admin_dsn)
    try:
        _throughput(ctx, dsn)
        _round_trip(ctx, dsn)
        _pages(ctx, dsn)
    finally:
        with psycopg.connect(ctx.admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{mh.DB}" WITH (FORCE)'.encode())
    _held_metadata(ctx)
    ctx.results.note(SCENARIO, f"sizes: drains of {s.history_events:,} events x {s.history_rounds} rounds, "
                               f"{s.history_outcomes:,} outcomes for jobs(), {s.history_rate:g} jobs/s for "
                               f"{s.history_seconds:g} s of results")


def _throughput(ctx: BenchContext, dsn: str) -> None:
    s = ctx.settings
    t = mh.throughput(dsn, s.history_events, s.history_rounds)
    for system, rates in ((ON, t["on"]), (OFF, t["off"])):
        ctx.results.add(Measure(SCENARIO, f"{DRAIN}, {s.history_events:,} events", system,
                                statistics.median(rates), "events/s",
                                extra={"rounds": [round(x) for x in rates], "events": s.history_events}))
    ctx.results.add(Measure(SCENARIO, RATIO, PGLOGQ, t["pair_ratio"], "x",
                            extra={"ratio_of_medians": round(t["ratio"], 3), "rounds": s.history_rounds}))
    ctx.results.note(SCENARIO, f"{RATIO}: the median of each round's ratio (its two drains ran back to back); "
                               f"the ratio of the medians was {t['ratio']:.3f}")


def _round_trip(ctx: BenchContext, dsn: str) -> None:
    s = ctx.settings
    r = mh.result_round_trip(dsn, s.history_rate, s.history_seconds)
    for p in ("p50", "p99"):
        ctx.results.add(Measure(SCENARIO, trip_case(s.history_rate, p), PGLOGQ, r[f"{p}_ms"], "ms",
                                higher_is_better=False, extra={"jobs": int(r["jobs"])}))


def _pages(ctx: BenchContext, dsn: str) -> None:
    s = ctx.settings
    for label, (med, top) in mh.pages(dsn, s.history_outcomes, s.history_repeat).items():
        name = label if label.startswith("one event") else f"jobs(): {label}"
        ctx.results.add(Measure(SCENARIO, name, PGLOGQ, med, "ms", higher_is_better=False,
                                extra={"outcomes": s.history_outcomes, "repeat": s.history_repeat,
                                       "max_ms": round(top, 2)}))


def _held_metadata(ctx: BenchContext) -> None:
    s = ctx.settings
    for system, on in ((ON, True), (OFF, False)):
        r = metadata.measure(ctx.admin_dsn, s.history_meta_events, history=on)
        grew = (r["size_after"] - r["size_before"]) / 1e6
        ctx.results.add(Measure(SCENARIO, f"{HELD}, {s.history_meta_events:,} events", system, grew, "MB",
                                higher_is_better=False,
                                extra={"dead_tuples": r["dead_after"], "seconds": round(r["seconds"], 1)}))
        if on:
            log = sum(size for t, (_, size, _) in r["tables"].items() if t.startswith("outcome_"))
            ctx.results.add(Measure(SCENARIO, f"{HELD}: outcome log at the end", PGLOGQ, log / 1e6, "MB",
                                    higher_is_better=False, extra={"outcomes": r["received"]}))
