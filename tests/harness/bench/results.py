"""What a benchmark run measured: numbers, skips with their reasons, and the printed table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
        self.measures.append(m)
        if echo:
            print(f"  {m.scenario:<12} {m.case:<36} {m.system:<24} {fmt_value(m.value)} {m.unit}", flush=True)
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
            "measures": [dict(asdict(m), ratio_to_ceiling=self.ratio(m)) for m in self.measures],
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
