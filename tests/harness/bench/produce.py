"""Scenario 1, produce: one event per transaction with 1/4/16 clients, batches of 100 and 1,000,
and sending inside an application transaction; every system, same payload, same clients."""

from __future__ import annotations

import statistics

from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.systems import RawPostgres, System

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
        runs: list[tuple[System, str]] = []
        for system in systems:
            if system.produce_worker is None:
                continue
            if mode in system.produce_modes:
                runs.append((system, mode))
            if mode == "batch" and "copy" in system.produce_modes:
                runs.append((system, "copy"))
        rates: dict[int, list[float]] = {i: [] for i in range(len(runs))}
        for _ in range(ctx.settings.rounds):  # interleaved: a burst of load elsewhere hits all alike
            for i, (system, m) in enumerate(runs):
                assert system.produce_worker is not None
                rates[i].append(ctx.run_clients(system.produce_worker, clients, system.conf(), m, batch))
        for i, (system, m) in enumerate(runs):
            name, ceiling = display(system, m)
            ctx.results.add(Measure(SCENARIO, case, name, statistics.median(rates[i]), "events/s",
                                    ceiling=ceiling, extra={"clients": clients, "batch": batch, "mode": m,
                                                            "rounds": [round(r) for r in rates[i]]}))
    for system in systems:
        system.cleanup()
