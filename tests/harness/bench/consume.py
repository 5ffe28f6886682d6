"""Scenario 2, consume: drain a preloaded backlog by one consumer (pglogq at SQL level and
through the Python consumer with a no-op handler) and by four cooperating workers."""

from __future__ import annotations

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import Pglogq, PgQue, PgQueuer, Procrastinate, RawPostgres, System

SCENARIO = "consume"


def backlog_for(ctx: BenchContext, system: System) -> int:
    """The backlog each system drains: smaller for the slow job queues, so the run ends."""
    n = ctx.settings.backlog
    if isinstance(system, Procrastinate):
        return min(n, 200 if ctx.settings.quick else 3_000)
    if isinstance(system, PgQueuer):
        return min(n, 1_000 if ctx.settings.quick else 50_000)
    return n


def run(ctx: BenchContext, systems: list[System]) -> None:
    for workers in (1, 4):
        case = "drain, 1 consumer" if workers == 1 else "drain, 4 cooperating workers"
        for system in systems:
            if not system.supports("drain"):
                continue
            if system.max_drain_workers is not None and workers > system.max_drain_workers:
                ctx.results.skip(SCENARIO, system.name, f"{case}: not measured (the system drains with at most "
                                 f"{system.max_drain_workers} consumer here)")
                continue
            n = backlog_for(ctx, system)
            system.preload(n)
            count, seconds = system.drain(n, workers)
            system.cleanup()
            name = "plain SELECT" if isinstance(system, RawPostgres) else system.name
            if isinstance(system, Pglogq):
                name = "pglogq (SQL receive/ack)"
            if isinstance(system, PgQue):
                name = "PgQue (SQL next_batch/get_batch_events/finish_batch)"
            ctx.results.add(Measure(SCENARIO, case, name, count / seconds, "events/s",
                                    ceiling=isinstance(system, RawPostgres),
                                    extra={"backlog": n, "drained": count, "seconds": seconds,
                                           "durable": system.durable}))
            if count != n:
                ctx.results.note(SCENARIO, f"{name} drained {count} of {n} events ({case})")
            if isinstance(system, Pglogq) and workers == 1:
                python_consumer(ctx, system, n, case)
            if isinstance(system, PgQue) and workers == 1:
                ctx.results.skip(SCENARIO, system.name, "Python Consumer drain: not applicable (PgQue is "
                                 "consumed through its SQL API here; no Python consumer of PgQue is measured)")


def python_consumer(ctx: BenchContext, system: Pglogq, n: int, case: str) -> None:
    """pglogq.Consumer with a no-op handler: default options, then a page as big as a batch."""
    page = ctx.settings.page_size
    for label, options in (("default options", {}), (f"max_messages={page:,}", {"max_messages": page})):
        system.preload(n)
        count, seconds = system.drain_python_consumer(**options)
        system.cleanup()
        name = f"pglogq (Python Consumer, {label})"
        ctx.results.add(Measure(SCENARIO, case, name, count / seconds, "events/s",
                                extra={"backlog": n, "drained": count, "seconds": seconds, "durable": True,
                                       **options}))
