"""The issue's targets, checked against what the run measured."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tests.harness.bench.results import Measure, Results, fmt_value


@dataclass
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run
    gap: str  # by how much it is missed (or the margin)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _pct(value: float, goal: float) -> str:
    if goal == 0:
        return f"{fmt_value(value)} over" if value else "exactly on target"
    return f"{(value / goal - 1) * 100:+.0f} % vs target"


def _at_least(target: str, m: Measure | None, goal: float, unit: str) -> Verdict:
    if m is None:
        return Verdict(target, "not measured", None, "")
    return Verdict(target, f"{fmt_value(m.value)} {unit}", m.value >= goal, _pct(m.value, goal))


def _at_most(target: str, m: Measure | None, goal: float, unit: str) -> Verdict:
    if m is None:
        return Verdict(target, "not measured", None, "")
    return Verdict(target, f"{fmt_value(m.value)} {unit}", m.value <= goal, _pct(m.value, goal))


def evaluate(results: Results, quick: bool) -> list[Verdict]:
    r = results
    out: list[Verdict] = []
    out.append(_at_least("send_batch of 1,000: >= 150,000 events/s",
                         r.find("produce", "batch of 1,000/txn, 1 client", "pglogq"), 150_000, "events/s"))
    for m in r.measures:
        if m.scenario == "produce" and m.case.startswith("1 event/txn") and m.system == "pglogq":
            ratio = r.ratio(m)
            if ratio is not None:
                out.append(Verdict(f"single send >= 80 % of raw INSERT ({m.case})",
                                   f"{ratio * 100:.0f} % ({fmt_value(m.value)} events/s)", ratio >= 0.8,
                                   f"{(ratio - 0.8) * 100:+.0f} points"))
    consumers = [m for m in r.measures
                 if m.scenario == "consume" and m.system.startswith("pglogq (Python Consumer")]
    for m in consumers:
        how = m.system.split(", ", 1)[-1].rstrip(")")
        out.append(_at_least(f"Python consumer drain, no-op handler: >= 100,000 events/s ({how})",
                             m, 100_000, "events/s"))
    if not consumers:
        out.append(Verdict("Python consumer drain, no-op handler: >= 100,000 events/s", "not measured", None, ""))
    peak = [m for m in r.measures if m.scenario == "large_batch" and m.case.endswith("peak RSS")]
    for m in peak:
        out.append(_at_most(f"peak memory draining the large batch < 200 MB ({m.system})", m, 200, "MB"))
    if not peak:
        out.append(Verdict("peak memory draining the large batch < 200 MB", "not measured", None, ""))
    out.append(_at_most("end to end at 1,000 events/s: p50 <= 20 ms",
                        r.find("latency", "1,000 events/s offered: p50", "pglogq"), 20, "ms"))
    out.append(_at_most("end to end at 1,000 events/s: p99 <= 100 ms",
                        r.find("latency", "1,000 events/s offered: p99", "pglogq"), 100, "ms"))
    # issue 20, requirement 1 (scenario 5): 3 consumers, rotation, one process's monotonic clock
    out.append(_at_least("under the held xmin: throughput >= 95 % of the run without",
                         r.find("held_xmin", "throughput held / without", "pglogq"), 0.95, "x"))
    out.append(_at_most("under the held xmin: p99 end to end <= 1.5x the run without",
                        r.find("held_xmin", "p99 held / without", "pglogq"), 1.5, "x"))
    held = "pglogq (held xmin)"
    out.append(_at_most("under the held xmin: zero dead tuples in event tables",
                        r.find("held_xmin", "dead tuples at end, event tables", held), 0, "dead tuples"))
    grow = r.find("held_xmin", "metadata growth after warm-up", held)
    out.append(Verdict("under the held xmin: metadata tables grow < 1 MB", "not measured", None, "")
               if grow is None else
               Verdict("under the held xmin: metadata tables grow < 1 MB", f"{grow.value:.3f} MB",
                       grow.value < 1.0, _pct(grow.value, 1.0)))
    fan = [m for m in r.measures if m.scenario == "fanout" and m.system == "pglogq" and m.unit == "bytes"]
    if fan:
        lo, hi = min(m.value for m in fan), max(m.value for m in fan)
        out.append(Verdict("fan-out: stored bytes independent of the number of subscribers",
                           f"{fmt_value(lo)} .. {fmt_value(hi)} bytes for {len(fan)} subscriber counts",
                           hi <= lo * 1.05, f"max/min {hi / lo:.3f}" if lo else ""))
    else:
        out.append(Verdict("fan-out: stored bytes independent of the number of subscribers", "not measured",
                           None, ""))
    return out
