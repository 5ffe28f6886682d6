"""The held-xmin scenario's figures from hand-made samples (no database): metadata growth is the
peak above the first sample after the warm-up, event tables are kept apart, and the names the
targets table reads are the ones the scenario records."""

from __future__ import annotations

from tests.harness.bench.held_xmin import MB, Phase, Sample, compare, record
from tests.harness.bench.results import Results
from tests.harness.bench.targets import evaluate


def phase(held: bool, meta_mb: list[float], p99: float = 20.0, rate: float = 2000.0, seconds: float = 30.0) -> Phase:
    samples = [Sample(t=5.0 * i - 5.0, tables={"pglogq.tick": (int(m * MB), 10 * i, 1),
                                                "pglogq.event_1_0": (50 * MB, 0, 1000)})
               for i, m in enumerate(meta_mb)]
    return Phase(system="pglogq", held=held, seconds=seconds, warmup=10.0, rate=2000, sent=80_000,
                 sent_in_window=60_000, unsent=0, rotations=1, held_xmin="1234" if held else None,
                 consumers={"c1": {"events_per_s": rate, "not_handled": 0}},
                 latency_ms={"p50": 5.0, "p95": 10.0, "p99": p99, "max": 30.0}, negative_latencies=0,
                 samples=samples, events=["pglogq.event_1_0"], throughput={"c1": [rate] * 4}, bucket=10.0,
                 has_metadata=True)


def test_growth_is_the_peak_above_the_first_sample_after_the_warm_up() -> None:
    # t = -5, 0, 5, 10, 15, 20: the warm-up ends at 10 s (1.0 MB); peak 3.0 MB, then a TRUNCATE
    p = phase(True, [0.2, 0.5, 0.8, 1.0, 3.0, 0.4])
    assert p.after_warmup().t == 10.0
    assert abs(p.growth_mb - 2.0) < 1e-9
    assert p.net_growth_mb < 0  # what the end alone would say
    assert p.meta(p.samples[-1]) == int(0.4 * MB)  # the event table is not metadata
    assert p.event(p.samples[-1]) == 50 * MB


def test_a_saw_tooth_is_not_growth_but_a_rising_one_is() -> None:
    # 10 % of 200 s: the baseline is the largest of the samples at 10, 15, 20, 25, 30 s
    tooth = [0.5, 0.5, 0.5, 1.5, 2.0, 1.5, 2.0, 1.5] + [2.0, 1.5] * 10
    assert phase(True, tooth, seconds=200.0).growth_mb == 0
    rising = [x + 0.1 * i for i, x in enumerate(tooth)]
    assert abs(phase(True, rising, seconds=200.0).growth_mb - (rising[-2] - rising[6])) < 1e-6


def test_growth_is_zero_when_the_metadata_only_shrinks() -> None:
    assert phase(True, [1.0, 1.0, 1.0, 1.0, 0.5, 0.5]).growth_mb == 0


def test_the_targets_read_what_the_scenario_records() -> None:
    r = Results()
    free, held = phase(False, [0.3] * 6), phase(True, [0.3, 0.3, 0.3, 0.3, 0.6, 0.9], p99=40.0, rate=1900.0)
    for p in (free, held):
        record_into(r, p)
    compare_into(r, free, held)
    verdicts = {v.target: v for v in evaluate(r, quick=False)}
    held_rows = {k: v for k, v in verdicts.items()
                 if "held snapshot" in k and "PgQue" not in k and not k.startswith("share consumer")}
    assert held_rows and all(v.met is not None for v in held_rows.values()), held_rows
    met = {k: v.met for k, v in held_rows.items()}
    assert any("95 %" in k and v is True for k, v in met.items())  # 1,900 / 2,000
    assert any("1.5x" in k and v is False for k, v in met.items())  # 40 / 20 ms
    assert any("1 MB" in k and v is True for k, v in met.items())  # 0.6 MB
    assert any("zero dead tuples" in k and v is True for k, v in met.items())


class _Ctx:
    def __init__(self, results: Results) -> None:
        self.results = results


def record_into(r: Results, p: Phase) -> None:
    record(_Ctx(r), p)  # type: ignore[arg-type]


def compare_into(r: Results, free: Phase, held: Phase) -> None:
    compare(_Ctx(r), free, held)  # type: ignore[arg-type]
