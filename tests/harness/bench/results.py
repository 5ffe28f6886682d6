"""What a benchmark run measured: numbers, skips with their reasons, and the printed table."""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

BUSY_POINT_LOAD = 1.5
"""A point measured while the 1-minute load average was above this is marked for a rerun."""


def load_1min() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


@dataclass
class Measure:
    """One number: ``system`` did ``case`` of ``scenario`` at ``value`` ``unit``.

    Rows of one (scenario, case) form a group; the row with ``ceiling=True`` (raw INSERT,
    COPY or plain SELECT) is what the others are divided by in the ratio column.
    """

    scenario: str
    case: str
    system: str
    value: float
    unit: str
    ceiling: bool = False
    higher_is_better: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    load: float | None = None  # 1-minute load average when the point was recorded (set by Results.add)

    @property
    def busy(self) -> bool:
        """Measured while the machine was busy (load > 1.5): rerun this point."""
        return self.load is not None and self.load > BUSY_POINT_LOAD


@dataclass
class Skip:
    """A system or scenario that was not measured, and why."""

    scenario: str
    system: str
    reason: str


@dataclass
class Series:
    """Numbers over time or over a parameter, for a plot."""

    scenario: str
    name: str
    x: list[float]
    y: list[float]
    x_label: str
    y_label: str


class Results:
    """Everything one run produced, in the order it was measured."""

    def __init__(self) -> None:
        self.measures: list[Measure] = []
        self.skips: list[Skip] = []
        self.series: list[Series] = []
        self.notes: dict[str, list[str]] = {}
        self.details: dict[str, Any] = {}

    def add(self, m: Measure, *, echo: bool = True) -> Measure:
        if m.load is None:
            m.load = load_1min()
        self.measures.append(m)
        if echo:
            mark = f"  (load {m.load}: rerun)" if m.busy else ""
            print(f"  {m.scenario:<12} {m.case:<36} {m.system:<24} {fmt_value(m.value)} {m.unit}{mark}",
                  flush=True)
        return m

    def skip(self, scenario: str, system: str, reason: str) -> None:
        self.skips.append(Skip(scenario, system, reason))
        print(f"  {scenario:<12} SKIPPED {system}: {reason}", flush=True)

    def note(self, scenario: str, text: str) -> None:
        self.notes.setdefault(scenario, []).append(text)

    def find(self, scenario: str, case: str, system: str) -> Measure | None:
        for m in self.measures:
            if (m.scenario, m.case, m.system) == (scenario, case, system):
                return m
        return None

    def ratio(self, m: Measure) -> float | None:
        """``m`` divided by the ceiling of its group (None when the group has none)."""
        for c in self.measures:
            if c.ceiling and c.scenario == m.scenario and c.case == m.case and c.value:
                return m.value / c.value
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "measures": [dict(asdict(m), ratio_to_ceiling=self.ratio(m), busy=m.busy) for m in self.measures],
            "skips": [asdict(s) for s in self.skips],
            "series": [asdict(s) for s in self.series],
            "notes": self.notes,
            "details": self.details,
        }


def fmt_value(v: float) -> str:
    if v != v:  # NaN
        return "n/a"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table_rows(results: Results) -> list[list[str]]:
    """Rows of the results table: scenario, case, system, value, unit, ratio to the ceiling."""
    rows = []
    for m in results.measures:
        r = results.ratio(m)
        ratio = "ceiling" if m.ceiling else ("" if r is None else f"{r:.2f}")
        rows.append([m.scenario, m.case, m.system, fmt_value(m.value), m.unit, ratio])
    return rows


HEADER = ["scenario", "case", "system", "value", "unit", "ratio to ceiling"]


def text_table(results: Results) -> str:
    rows = [HEADER, *table_rows(results)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = []
    for n, r in enumerate(rows):
        cells = [c.rjust(w) if i in (3, 5) else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    for s in results.skips:
        lines.append(f"SKIPPED  {s.scenario} / {s.system}: {s.reason}")
    return "\n".join(lines)


# -- impossible figures ------------------------------------------------------------------------------
class ImpossibleFigures(Exception):
    """The run produced a figure that cannot be true (a measurement or pairing error): the run fails."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("impossible figures in the results:\n- " + "\n- ".join(problems))
        self.problems = problems


_PERCENTILE = re.compile(r"^(?P<case>.*): (?P<p>p\d+|max)$")
_ORDER = {"p50": 0, "p95": 1, "p99": 2, "max": 3}


def impossible(results: Results) -> list[str]:
    """Every figure of ``results`` that cannot be true; an empty list when all are possible.

    - a negative number (a latency, a rate, a size: none can be below 0), or one that is not finite
      (NaN is the "not measured" value and is let through);
    - a latency above the time window it was measured in (``extra["window_seconds"]``);
    - percentiles out of order within one (scenario, case, system): p50 <= p95 <= p99 <= max;
    - more events received / drained / consumed than were sent / preloaded;
    - events lost by a durable system: a drain to empty that returned fewer than were preloaded.
    """
    out: list[str] = []
    by_group: dict[tuple[str, str, str], dict[str, Measure]] = {}
    for m in results.measures:
        where = f"{m.scenario} / {m.case} / {m.system}"
        v = m.value
        if v != v:  # NaN: not measured
            continue
        if v in (float("inf"), float("-inf")):
            out.append(f"{where}: {v} is not a finite number")
            continue
        if v < 0:
            out.append(f"{where}: {fmt_value(v)} {m.unit} is negative")
        window = m.extra.get("window_seconds")
        if m.unit == "ms" and window is not None and v > window * 1000:
            out.append(f"{where}: {fmt_value(v)} ms is longer than the {window:.1f} s it was measured in")
        mp = _PERCENTILE.match(m.case)
        if mp and m.unit == "ms":
            by_group.setdefault((m.scenario, mp["case"], m.system), {})[mp["p"]] = m
        e = m.extra
        for got, of in (("received", "sent"), ("drained", "backlog"), ("drained", "events"),
                         ("consumed_total", "sent")):
            if isinstance(e.get(got), int) and isinstance(e.get(of), int) and e[got] > e[of]:
                out.append(f"{where}: {e[got]:,} {got} but only {e[of]:,} {of}")
        if (e.get("durable") and isinstance(e.get("drained"), int) and isinstance(e.get("backlog"), int)
                and e["drained"] < e["backlog"]):
            out.append(f"{where}: a durable system lost events: drained {e['drained']:,} of {e['backlog']:,}")
    for (scenario, case, system), ps in by_group.items():
        ordered = sorted(ps.items(), key=lambda kv: _ORDER.get(kv[0], 9))
        for (p1, m1), (p2, m2) in itertools.pairwise(ordered):
            if m1.value > m2.value:
                out.append(f"{scenario} / {case} / {system}: {p1} {fmt_value(m1.value)} ms > "
                           f"{p2} {fmt_value(m2.value)} ms")
    return out
