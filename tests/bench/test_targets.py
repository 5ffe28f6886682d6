"""The benchmark's targets table: every row is there, and met / missed follows the measures
(results objects built by hand, no database)."""

from __future__ import annotations

from tests.harness.bench.results import Measure, Results
from tests.harness.bench.targets import evaluate


def add(r: Results, scenario: str, case: str, system: str, value: float, unit: str = "events/s",
        lower: bool = False) -> None:
    r.add(Measure(scenario, case, system, value, unit, ceiling=system == "raw INSERT",
                  higher_is_better=not lower), echo=False)


def verdicts(r: Results) -> dict[str, bool | None]:
    return {v.target: v.met for v in evaluate(r, quick=False)}


def test_every_row_of_the_issue_is_in_the_table_even_when_nothing_was_measured() -> None:
    rows = " | ".join(verdicts(Results()))
    for words in ("150,000", "0.9x raw INSERT", "0.8x raw single-row INSERT", "100,000 events/s", "0.85x",
                  "200 MB", "ahead of PgQue: SQL-level drain", "ahead of PgQue: Python drain",
                  "ahead of PgQue: end to end latency p50", "ahead of PgQue: metadata", "p50 <= 10 ms",
                  "p99 <= 50 ms", "1,000,000 events stored", "95 %", "1.5x", "< 1 MB", "zero dead tuples"):
        assert words in rows, words


def test_met_and_missed_follow_the_measures() -> None:
    r = Results()
    batch = "batch of 1,000/txn, 1 client"
    add(r, "produce", batch, "pglogq", 160_000)
    add(r, "produce", batch, "raw INSERT", 200_000)  # 0.8x: the 0.9x row is missed
    add(r, "produce", batch, "PgQue", 170_000)
    single = "1 event/txn, 4 clients"
    add(r, "produce", single, "pglogq", 900)
    add(r, "produce", single, "raw INSERT", 1000)
    add(r, "produce", single, "PgQue", 800)
    add(r, "latency", "1,000 events/s offered: p50", "pglogq", 4.0, "ms", lower=True)
    add(r, "latency", "1,000 events/s offered: p50", "PgQue", 260.0, "ms", lower=True)
    add(r, "latency", "1,000 events/s offered: p50", "pglogq (1,000,000 events stored in another queue)", 12.0,
        "ms", lower=True)
    v = verdicts(r)
    assert v["send_batch of 1,000 (Client.send_batch): >= 150,000 events/s"] is True
    assert next(m for t, m in v.items() if t.startswith("send_batch of 1,000: >= 0.9x")) is False
    assert v[f"single send (Client.send) >= 0.8x raw single-row INSERT ({single})"] is True
    assert v[f"ahead of PgQue: produce, {single}"] is True
    assert v[f"ahead of PgQue: produce, {batch}"] is False
    assert v["ahead of PgQue: end to end latency p50 at 1,000 events/s, defaults"] is True
    assert v["end to end at 1,000 events/s (defaults): p50 <= 10 ms"] is True
    assert v["end to end at 1,000 events/s (1,000,000 events stored in another queue): p50 <= 10 ms"] is False
    assert v["ahead of PgQue: Python drain"] is None  # not applicable
