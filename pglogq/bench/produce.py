"""Scenario 1, produce: one event per transaction with 1/4/16 clients, batches of 100 and 1,000,
and sending inside an application transaction; every system, same payload, same clients."""

from __future__ import annotations

from pglogq.bench.context import BenchContext
from pglogq.bench.results import Measure
from pglogq.bench.systems import RawPostgres, System

SCENARIO = "produce"


def display(system: System, mode: str) -> tuple[str, bool]:
    """Name of the row and whether it is the group's ceiling."""
    if isinstance(system, RawPostgres):
        return ("COPY", False) if mode == "copy" else ("raw INSERT", True)
    return system.name, False


def run(ctx: BenchContext, systems: list[System]) -> None:
    s = ctx.settings
    points: list[tuple[str, str, int, int]] = []  # case, mode, batch, clients
    for n in s.clients:
        points.append((f"1 event/txn, {n} client{'s' if n > 1 else ''}", "single", 1, n))
    for b in s.batch_sizes:
        points.append((f"batch of {b:,}/txn, 1 client", "batch", b, 1))
    for n in s.clients[:2]:
        points.append((f"app INSERT + 1 event in one txn, {n} client{'s' if n > 1 else ''}", "app_txn", 1, n))
    for case, mode, batch, clients in points:
        for system in systems:
            modes = system.produce_modes
            worker = system.produce_worker
            if worker is None:
                continue
            runs = [mode] if mode in modes else []
            if mode == "batch" and "copy" in modes:
                runs.append("copy")
            for m in runs:
                rate = ctx.run_clients(worker, clients, system.conf(), m, batch)
                name, ceiling = display(system, m)
                ctx.results.add(Measure(SCENARIO, case, name, rate, "events/s", ceiling=ceiling,
                                        extra={"clients": clients, "batch": batch, "mode": m}))
    for system in systems:
        system.cleanup()
