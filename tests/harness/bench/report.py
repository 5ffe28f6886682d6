"""Write a run: results.json (everything), report.md (tables, targets, skips), PNG plots."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tests.harness.bench.results import BUSY_POINT_LOAD, ImpossibleFigures, Measure, Results, fmt_value, impossible
from tests.harness.bench.targets import Verdict, evaluate

TITLES = {
    "produce": "1. Produce",
    "consume": "2. Consume (drain a preloaded backlog)",
    "latency": "3. End to end latency (start of the send call → handler start, one monotonic clock)",
    "fanout": "4. Fan-out",
    "held_xmin": "5. Sustained load under a held xmin",
    "large_batch": "6. One large batch",
    "shards": "7. One queue across shards (1, 2, 3 servers) and the router's overhead",
    "share_jobs": "8. Share consumers beside the SKIP LOCKED jobs table (no-op jobs, held snapshot, takeover, "
                  "metadata)",
    "queues": "9. A call on one queue as the database holds more queues (1, 100, 1,000)",
    "history": "10. Job history: handler throughput with it on / off, results' round trip, jobs() of finished jobs",
    "growth": "11. Cost as one dimension of a queue grows (partitions, cancels, idle queues, schedules, dead "
              "letters, consumers, backlog, retries, ticks): the log-log slope of every call",
}
BUSY_LOAD = 1.0


def write(out: Path, meta: dict[str, Any], results: Results) -> list[Path]:
    """Write results.json, the plots and report.md; raise ImpossibleFigures (after writing, so that
    the figures can be looked at) when the run produced any figure that cannot be true."""
    out.mkdir(parents=True, exist_ok=True)
    problems = impossible(results)
    meta = {**meta, "impossible_figures": problems}
    verdicts = evaluate(results, meta.get("mode") == "quick")
    data = {"meta": meta, "targets": [v.to_json() for v in verdicts], **results.to_json()}
    paths = [out / "results.json"]
    paths[0].write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    plots = write_plots(out, results)
    paths += plots
    md = out / "report.md"
    md.write_text(markdown(meta, results, verdicts, [p.name for p in plots]), encoding="utf-8")
    paths.append(md)
    if problems:
        raise ImpossibleFigures(problems)
    return paths


def _groups(results: Results, scenario: str) -> OrderedDict[str, list[Measure]]:
    groups: OrderedDict[str, list[Measure]] = OrderedDict()
    for m in results.measures:
        if m.scenario == scenario:
            groups.setdefault(m.case, []).append(m)
    return groups


def _short(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f} M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.0f} k"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f} k"
    return fmt_value(v)


def pivot(results: Results, scenario: str, keep: Any = None) -> list[str]:
    """One row per case, one column per system: value (ratio to the ceiling)."""
    groups = _groups(results, scenario)
    if keep is not None:
        groups = OrderedDict((k, v) for k, v in groups.items() if keep(k))
    if not groups:
        return []
    systems: list[str] = []
    for ms in groups.values():
        for m in ms:
            if m.system not in systems:
                systems.append(m.system)
    unit = next(iter(groups.values()))[0].unit
    lines = [f"| {scenario} ({unit}) | " + " | ".join(systems) + " |",
             "| --- |" + " ---: |" * len(systems)]
    for case, ms in groups.items():
        cells = []
        for name in systems:
            found = next((x for x in ms if x.system == name), None)
            if found is None:
                cells.append("")
                continue
            r = results.ratio(found)
            cell = _short(found.value) + (" †" if found.busy else "")
            if found.ceiling:
                cell += " (ceiling)"
            elif r is not None:
                cell += f" ({r:.2f})"
            cells.append(cell)
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def summary(results: Results) -> list[str]:
    out: list[str] = []
    for scenario, keep in (("produce", None), ("consume", None),
                           ("latency", lambda c: c.endswith(("p50", "p99")))):
        rows = pivot(results, scenario, keep)
        if rows:
            out += [*rows, ""]
    return out


def markdown(meta: dict[str, Any], results: Results, verdicts: list[Verdict], plots: list[str]) -> str:
    mach = meta.get("machine", {})
    loads = mach.get("load_average_at_start", []), mach.get("load_average_at_end", [])
    lines = [f"# pglogq benchmark ({meta.get('mode')} run, {meta.get('started_at')})", ""]
    busy = any(lst and lst[0] > BUSY_LOAD for lst in loads)
    if busy:
        lines += [f"> **The machine was busy during this run** (load average {loads[0]} at the start, "
                  f"{loads[1]} at the end, on {mach.get('cpus')} cores): other work shared the CPUs, so "
                  "absolute numbers are noisy and lower than on a quiet machine. Ratios within one group "
                  "were measured minutes apart under the same conditions.", ""]
    if meta.get("mode") == "quick":
        lines += ["> `--quick` smoke run: short points, small backlogs; numbers are indicative only.", ""]
    problems = meta.get("impossible_figures") or []
    if problems:
        lines += ["> **This run FAILED its sanity check**: it produced figures that cannot be true (a "
                  "measurement or pairing error); do not quote it.", ""]
        lines += [f"> - {p}" for p in problems]
        lines.append("")
    busy_points = [m for m in results.measures if m.busy]
    if busy_points:
        lines += [f"> {len(busy_points)} of {len(results.measures)} points were measured while the 1-minute "
                  f"load average was above {BUSY_POINT_LOAD} (marked † in the tables, listed under "
                  "*Points to rerun*): rerun them on a quiet machine before quoting them.", ""]
    lines += [
        "Every system ran in the same run, against the same PostgreSQL server, with the same payload "
        f"(a JSON object of {meta.get('payload_bytes')} bytes). *ratio* divides by the group's ceiling: "
        "raw `INSERT` into a plain table for producing, a plain keyset `SELECT` for consuming.",
        "",
        "## Machine and versions",
        "",
        f"- machine: {mach.get('cpu')}, {mach.get('cpus')} CPUs, "
        f"{round((mach.get('memory_bytes') or 0) / 2**30)} GiB, {mach.get('platform')}",
        f"- load average (1, 5, 15 min): {loads[0]} at the start, {loads[1]} at the end",
        f"- PostgreSQL: {meta.get('postgresql')}",
        "- PostgreSQL settings: " + ", ".join(f"{k}={v}" for k, v in meta.get("postgresql_settings", {}).items()),
        f"- Python {meta.get('python')}; packages: "
        + ", ".join(f"{k} {v}" for k, v in meta.get("packages", {}).items() if v),
        "- systems: " + ", ".join(f"{k}: {v}" for k, v in meta.get("versions", {}).items() if v),
        f"- duration: {meta.get('duration_seconds')} s; settings: `{json.dumps(meta.get('settings'))}`",
        "",
        "## Durability",
        "",
        *durability(meta),
        "",
        "## Summary",
        "",
        "Numbers per system; in brackets the ratio to the ceiling of the same case (raw `INSERT` "
        "for producing, plain `SELECT` for consuming). Every number, with its unit, is in the "
        "sections below.",
        "",
        *summary(results),
        "## Targets",
        "",
        "| target | measured | met | margin |",
        "| --- | --- | --- | --- |",
    ]
    for v in verdicts:
        met = "n/a" if v.met is None else ("yes" if v.met else "**no**")
        lines.append(f"| {v.target} | {v.measured} | {met} | {v.gap} |")
    lines.append("")
    all_skips = [s for s in results.skips if s.scenario == "all"]
    if all_skips:
        lines += ["## Systems not measured", ""]
        lines += [f"- **{s.system}**: {s.reason}" for s in all_skips]
        lines.append("")
    for scenario, title in TITLES.items():
        groups = _groups(results, scenario)
        skips = [s for s in results.skips if s.scenario == scenario]
        if not groups and not skips:
            continue
        lines += [f"## {title}", ""]
        if groups:
            lines += ["| case | system | value | ratio |", "| --- | --- | ---: | ---: |"]
            for case, ms in groups.items():
                for m in ms:
                    r = results.ratio(m)
                    ratio = "ceiling" if m.ceiling else ("" if r is None else f"{r:.2f}")
                    name = f"**{m.system}**" if m.system.startswith("pglogq") else m.system
                    mark = f" † (load {m.load})" if m.busy else ""
                    lines.append(f"| {case} | {name} | {fmt_value(m.value)} {m.unit}{mark} | {ratio} |")
            lines.append("")
        for s in skips:
            lines.append(f"- skipped: **{s.system}**: {s.reason}")
        for n in results.notes.get(scenario, []):
            lines.append(f"- note: {n}")
        for p in plots:
            if p.startswith(scenario):
                lines += ["", f"![{scenario}]({p})"]
        lines.append("")
    if busy_points:
        lines += ["## Points to rerun", "",
                  f"Measured while the 1-minute load average was above {BUSY_POINT_LOAD}:", ""]
        by_scenario: dict[str, list[Measure]] = {}
        for m in busy_points:
            by_scenario.setdefault(m.scenario, []).append(m)
        for scenario, ms in by_scenario.items():
            every = len(ms) == sum(1 for m in results.measures if m.scenario == scenario)
            point_loads = [m.load for m in ms if m.load is not None]
            cases = list(dict.fromkeys(m.case for m in ms))
            lines.append(f"- **{scenario}**: {'every point' if every else f'{len(ms)} points'} (load "
                         f"{min(point_loads)} to {max(point_loads)}): " + "; ".join(cases))
        lines.append("")
    return "\n".join(lines) + "\n"


def durability(meta: dict[str, Any]) -> list[str]:
    """Which systems make an acknowledged event survive a crash (fsync before the acknowledgement)."""
    pg = meta.get("postgresql_settings", {})
    pg_durable = pg.get("fsync") == "on" and pg.get("synchronous_commit") in ("on", "remote_write",
                                                                              "remote_apply", "local")
    rows = meta.get("durability", {})
    lines = [f"PostgreSQL here: fsync={pg.get('fsync')}, synchronous_commit={pg.get('synchronous_commit')}: "
             + ("every commit is flushed to the WAL on disk before it returns." if pg_durable else
                "**commits are not flushed before they return: no PostgreSQL system below is durable per "
                "commit in this run.**"), ""]
    lines += [f"- **{name}**: {text}" for name, text in rows.items()]
    return lines


def write_plots(out: Path, results: Results) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        results.note("report", "matplotlib is not installed: no plots (pip install -e '.[peers]')")
        return []
    paths: list[Path] = []
    for scenario in ("produce", "consume"):
        groups = _groups(results, scenario)
        if not groups:
            continue
        systems: list[str] = []
        for ms in groups.values():
            for m in ms:
                if m.system not in systems:
                    systems.append(m.system)
        fig, ax = plt.subplots(figsize=(11, 0.9 + 0.55 * len(groups) * max(1, len(systems)) / 3))
        height = 0.8 / max(1, len(systems))
        cases = list(groups)
        for i, sys_name in enumerate(systems):
            ys, xs = [], []
            for j, case in enumerate(cases):
                found = next((m for m in groups[case] if m.system == sys_name), None)
                if found is not None:
                    ys.append(j + i * height)
                    xs.append(found.value)
            ax.barh(ys, xs, height=height, label=sys_name)
        ax.set_yticks([j + (len(systems) - 1) * height / 2 for j in range(len(cases))], cases, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("events/s (log scale)")
        ax.legend(fontsize=7, loc="lower right")
        ax.set_title(TITLES[scenario])
        fig.tight_layout()
        p = out / f"{scenario}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    for scenario in ("latency", "fanout", "held_xmin", "held_xmin_meta", "held_xmin_dead", "shards", "share_jobs",
                     "share_jobs_meta"):
        series = [s for s in results.series if s.scenario == scenario]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for s in series:
            ax.plot(s.x, s.y, label=s.name, marker="o" if len(s.x) < 20 else None)
        ax.set_xlabel(series[0].x_label)
        ax.set_ylabel(series[0].y_label)
        if scenario == "latency":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.set_title(TITLES.get(scenario.removesuffix("_meta"), TITLES["held_xmin"]) + ": " + series[0].y_label
                     if scenario.endswith("_meta") or scenario not in TITLES else TITLES[scenario], fontsize=9)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        p = out / f"{scenario}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths
