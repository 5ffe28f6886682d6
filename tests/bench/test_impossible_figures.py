"""The benchmark's sanity check: a run whose results hold a figure that cannot be true fails (the
report is still written, so that the figures can be looked at), and the PgQue system is skipped
with its reason when its install file is not found.  No database: results objects are built by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.bench import report
from tests.harness.bench.results import ImpossibleFigures, Measure, Results, impossible
from tests.harness.bench.systems import pgque_system

META = {"mode": "quick", "machine": {}, "postgresql_settings": {"fsync": "on", "synchronous_commit": "on"}}


def latency(results: Results, system: str, values: dict[str, float], window: float = 10.0) -> None:
    extra = {"sent": 1000, "received": 1000, "window_seconds": window}
    for p, v in values.items():
        results.add(Measure("latency", f"1,000 events/s offered: {p}", system, v, "ms", higher_is_better=False,
                            extra=extra), echo=False)


def possible() -> Results:
    r = Results()
    latency(r, "pglogq", {"p50": 5.0, "p95": 9.0, "p99": 20.0, "max": 30.0})
    r.add(Measure("consume", "drain, 1 consumer", "pglogq (SQL receive/ack)", 100_000, "events/s",
                  extra={"backlog": 5000, "drained": 5000, "durable": True}), echo=False)
    return r


def test_possible_figures_pass_and_the_report_is_written(tmp_path: Path) -> None:
    r = possible()
    assert impossible(r) == []
    paths = report.write(tmp_path, META, r)
    assert tmp_path / "report.md" in paths
    assert json.loads((tmp_path / "results.json").read_text())["meta"]["impossible_figures"] == []


def test_a_negative_latency_makes_the_report_fail(tmp_path: Path) -> None:
    r = possible()
    latency(r, "Redis Streams", {"p50": -0.22, "p95": 0.5, "p99": 0.7, "max": 1.0})
    with pytest.raises(ImpossibleFigures) as exc:
        report.write(tmp_path, META, r)
    assert any("Redis Streams" in p and "negative" in p for p in exc.value.problems), exc.value.problems
    # written all the same, and saying that the run failed
    assert "FAILED its sanity check" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["meta"]["impossible_figures"]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda r: latency(r, "RabbitMQ", {"p50": 1.0, "p99": 12_000.0}, window=5.0), "longer than"),
        (lambda r: latency(r, "PgQue", {"p50": 300.0, "p99": 200.0}), "p50 300.0 ms > p99 200.0 ms"),
        (lambda r: r.add(Measure("consume", "drain, 1 consumer", "PgQue", 1.0, "events/s",
                                 extra={"backlog": 100, "drained": 90, "durable": True}), echo=False), "lost"),
        (lambda r: r.add(Measure("latency", "100 events/s offered: p50", "jobs", 1.0, "ms",
                                 extra={"sent": 100, "received": 120}), echo=False), "120 received"),
        (lambda r: r.add(Measure("produce", "batch", "x", float("inf"), "events/s"), echo=False), "finite"),
    ],
)
def test_every_kind_of_impossible_figure_is_caught(make: object, words: str) -> None:
    r = possible()
    make(r)  # type: ignore[operator]
    problems = impossible(r)
    assert any(words in p for p in problems), problems


def test_a_system_that_is_not_durable_may_drain_fewer_than_preloaded() -> None:
    r = possible()
    r.add(Measure("consume", "drain, 1 consumer", "Redis Streams", 1.0, "events/s",
                  extra={"backlog": 100, "drained": 90, "durable": False}), echo=False)
    assert impossible(r) == []


def test_every_point_records_the_load_average() -> None:
    r = possible()
    assert all(m.load is not None for m in r.measures)
    busy = Measure("produce", "c", "s", 1.0, "events/s", load=2.0)
    assert busy.busy and not Measure("produce", "c", "s", 1.0, "events/s", load=1.0).busy


def test_pgque_is_skipped_with_its_reason_when_its_sql_is_not_found(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.delenv(pgque_system.SQL_ENV, raising=False)
    monkeypatch.setenv(pgque_system.REPO_ENV, str(tmp_path / "no-such-clone"))
    sql, why = pgque_system.find_sql()
    assert sql is None and "--pgque-sql" in why
    monkeypatch.setenv(pgque_system.SQL_ENV, str(tmp_path / "missing.sql"))
    sql, why = pgque_system.find_sql()
    assert sql is None and "not a file" in why
    (tmp_path / "pgque.sql").write_text("select 1;\n")
    monkeypatch.setenv(pgque_system.SQL_ENV, str(tmp_path / "pgque.sql"))
    assert pgque_system.find_sql() == ("select 1;\n", str(tmp_path / "pgque.sql"))
