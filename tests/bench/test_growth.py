"""The growth scenario's PgQ side: its curves are references beside pglogq's (no target, never met
or missed), and on a server with the pgq extension every PgQ twin of a dimension yields a number
for each of its calls at each size while the dimensions PgQ has no call for get a note."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from tests.harness.bench import growth
from tests.harness.bench.results import Measure, Results
from tests.harness.bench.targets import evaluate


def _add(r: Results, system: str, dim: str, call: str, target: float | None, points: list[tuple[int, float]]) -> None:
    for size, ms in points:
        extra = {"dimension": dim, "call": call, "size": size, "target": target, "samples": 7, "system": system}
        r.add(Measure(growth.SCENARIO, f"{growth.label(system, dim)}: {call}, {size:,} x", system, ms, "ms",
                      higher_is_better=False, extra=extra), echo=False)


def test_pgq_curves_are_references_beside_pglogq_verdicts() -> None:
    r = Results()
    _add(r, growth.PGLOGQ, "consumers", "consumer_info() of all", growth.LISTING, [(1, 1.0), (10, 2.0), (100, 4.0)])
    _add(r, "PgQ 3.5", "consumers", "get_consumer_info() of all", None, [(1, 1.0), (10, 10.0), (100, 100.0)])
    verdicts = {v.target: v for v in evaluate(r, quick=False) if v.target.startswith("growth:")}
    ours = verdicts["growth: consumers: consumer_info() of all: log-log slope <= 1 (1 to 100)"]
    assert ours.met is True
    theirs = verdicts["growth: PgQ 3.5 consumers: get_consumer_info() of all: log-log slope (1 to 100), "
                      "reference beside pglogq's"]
    assert theirs.met is None and theirs.measured == "+1.00" and "no target" in theirs.gap
    lines = growth.slope_lines(r.measures)
    assert lines[0].startswith("slope +0.30 (target <= 1: met) consumers: consumer_info() of all")
    assert lines[1].startswith("slope +1.00 (reference, no target) PgQ 3.5 consumers: get_consumer_info() of all")


def test_every_dimension_has_a_pgq_twin_with_its_sizes_or_a_reason() -> None:
    for dim in growth.DIMENSIONS:
        twin = growth.PGQ_TWINS.get(dim.name)
        if twin is None:
            assert growth.PGQ_NONE[dim.name]
            continue
        assert (twin.unit, twin.full, twin.quick) == (dim.unit, dim.full, dim.quick)
        assert all(c.target is None for c in twin.calls)


def test_pgq_twins_measure_every_call_at_every_size(server_dsn: str) -> None:
    db = f"pglogq_t_growth_pgq_{os.getpid()}"
    pgq_dsn, pgq_label = growth.pgq_database(server_dsn, db)
    try:
        if pgq_dsn is None:
            if os.environ.get("PGLOGQ_REQUIRE_PGQ"):  # a skip would hide the test where PgQ is installed
                pytest.fail(f"PgQ: {pgq_label}, and PGLOGQ_REQUIRE_PGQ is set")
            pytest.skip(f"PgQ: {pgq_label}")
        got: list[tuple[str, dict[str, Any]]] = []
        notes: list[str] = []
        # the two smallest sizes of each dimension keep the test short; pglogq's side is not measured
        dims = tuple(replace(d, quick=d.quick[:2]) for d in growth.DIMENSIONS)
        growth.measure(None, dims, True, 1, lambda c, v, unit, extra: got.append((c, extra)), notes.append, 60,
                       pgq=(pgq_label, pgq_dsn))
        assert not [n for n in notes if " failed at " in n or "growing to" in n or "stopped after" in n], notes
        for dim in dims:
            twin = growth.PGQ_TWINS.get(dim.name)
            if twin is None:
                assert any(n.startswith(f"{pgq_label} {dim.name}: not measured") for n in notes), dim.name
                continue
            for call in twin.calls:
                sizes = [e["size"] for c, e in got if e["dimension"] == dim.name and e["call"] == call.name]
                assert sizes == list(dim.quick), (dim.name, call.name, sizes)
        assert all(c.startswith(f"{pgq_label} ") and e["system"] == pgq_label and e["target"] is None for c, e in got)
        with psycopg.connect(pgq_dsn) as conn:  # each dimension dropped its queues
            assert conn.execute("SELECT count(*) FROM pgq.queue").fetchone() == (0,)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
