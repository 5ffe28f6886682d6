"""The benchmark's targets (speed, no bloat, partitions), checked against what the run measured: one
row per target, with the target, the measured figure, met / missed (None: not measured in this run)
and by how much.

The held-snapshot rows read measures that the held-xmin scenario records under these names
(scenario ``held_xmin``):

- ``throughput held / without``, system ``pglogq`` (a ratio);
- ``p99 held / without``, system ``pglogq`` (a ratio; else computed from ``latency p99 during the
  run`` of ``pglogq (held xmin)`` and ``pglogq (no held snapshot)``);
- ``metadata growth after warm-up`` (MB, every table but the event tables), systems
  ``pglogq (held xmin)`` and ``PgQue (held xmin)``; when it is missing, ``metadata size at end``
  (MB) or ``size at end, metadata + side tables`` (bytes) is compared instead (said in the row);
- ``dead tuples at end, event tables``, system ``pglogq (held xmin)``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Any

from tests.harness.bench.results import Measure, Results, fmt_value

PGQUE = "PgQue"
HELD = "held_xmin"
GROWTH = "metadata growth after warm-up"  # MB
SIZES_AT_END = (("metadata size at end", 1.0), ("size at end, metadata + side tables", 1 / 2**20))  # -> MB


@dataclass
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run
    gap: str  # by how much it is missed (or the margin)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _not_measured(target: str, why: str = "not measured") -> Verdict:
    return Verdict(target, why, None, "")


def _pct(value: float, goal: float) -> str:
    if goal == 0:
        return f"{fmt_value(value)} over" if value else "exactly on target"
    return f"{(value / goal - 1) * 100:+.0f} % vs target"


def _at_least(target: str, m: Measure | None, goal: float, unit: str) -> Verdict:
    if m is None:
        return _not_measured(target)
    return Verdict(target, f"{fmt_value(m.value)} {unit}", m.value >= goal, _pct(m.value, goal))


def _at_most(target: str, m: Measure | None, goal: float, unit: str) -> Verdict:
    if m is None:
        return _not_measured(target)
    return Verdict(target, f"{fmt_value(m.value)} {unit}", m.value <= goal, _pct(m.value, goal))


def _ratio_at_least(target: str, num: Measure | None, den: Measure | None, goal: float, what: str) -> Verdict:
    """num / den >= goal (both measured in the same run)."""
    if num is None or den is None or not den.value:
        return _not_measured(target)
    r = num.value / den.value
    return Verdict(target, f"{r:.2f}x ({fmt_value(num.value)} / {fmt_value(den.value)} {what})", r >= goal,
                   f"{(r - goal) * 100:+.0f} points")


def _ahead(target: str, ours: Measure | None, theirs: Measure | None) -> Verdict:
    """pglogq strictly better than PgQue on this row (higher or lower, by the measure's direction)."""
    if ours is None or theirs is None:
        missing = "pglogq" if ours is None else PGQUE
        return _not_measured(target, f"not measured ({missing} has no number in this run)")
    better = ours.value > theirs.value if ours.higher_is_better else ours.value < theirs.value
    if theirs.value:
        x = ours.value / theirs.value
        gap = f"{x:.2f}x PgQue's" if ours.higher_is_better else f"{x:.2f}x PgQue's (lower is better)"
    else:
        gap = ""
    return Verdict(target, f"pglogq {fmt_value(ours.value)} vs PgQue {fmt_value(theirs.value)} {ours.unit}",
                   better, gap)


def _held_metadata(r: Results, system: str) -> tuple[Measure | None, str]:
    """The metadata figure under the held snapshot, in MB: its growth, else its size at the end."""
    m = r.find(HELD, GROWTH, system)
    if m is not None:
        return m, "growth"
    for case, to_mb in SIZES_AT_END:
        m = r.find(HELD, case, system)
        if m is not None:
            return (Measure(m.scenario, m.case, m.system, m.value * to_mb, "MB", higher_is_better=False),
                    "size at the end (no growth measure in this run)")
    return None, "growth"


def evaluate(results: Results, quick: bool) -> list[Verdict]:
    r = results
    out: list[Verdict] = []
    # -- req. 2: send_batch --------------------------------------------------------------------------
    batch = r.find("produce", "batch of 1,000/txn, 1 client", "pglogq")
    raw_batch = r.find("produce", "batch of 1,000/txn, 1 client", "raw INSERT")
    out.append(_at_least("send_batch of 1,000 (Client.send_batch): >= 150,000 events/s", batch, 150_000,
                         "events/s"))
    out.append(_ratio_at_least("send_batch of 1,000: >= 0.9x raw INSERT ... SELECT FROM jsonb_array_elements "
                               "(same JSON, same run, interleaved)", batch, raw_batch, 0.9, "events/s"))
    # -- req. 3: single send through Client.send -------------------------------------------------------
    singles = [m for m in r.measures
               if m.scenario == "produce" and m.case.startswith("1 event/txn") and m.system == "pglogq"]
    for m in singles:
        ceiling = r.find("produce", m.case, "raw INSERT")
        out.append(_ratio_at_least(f"single send (Client.send) >= 0.8x raw single-row INSERT ({m.case})",
                                   m, ceiling, 0.8, "events/s"))
    if not singles:
        out.append(_not_measured("single send (Client.send) >= 0.8x raw single-row INSERT"))
    # -- req. 4: Python Consumer -------------------------------------------------------------------------
    default = r.find("consume", "drain, 1 consumer", "pglogq (Python Consumer, default options)")
    sql_loop = r.find("consume", "drain, 1 consumer", "pglogq (SQL receive/ack)")
    out.append(_at_least("Python Consumer, no-op handler, default options: >= 100,000 events/s", default,
                         100_000, "events/s"))
    out.append(_ratio_at_least("Python Consumer (default options) >= 0.85x the SQL receive/ack loop, same run",
                               default, sql_loop, 0.85, "events/s"))
    peak = [m for m in r.measures if m.scenario == "large_batch" and m.case.endswith("peak RSS")]
    for m in peak:
        n = m.extra.get("events")
        size = f"{n:,}-event" if isinstance(n, int) else "large"
        out.append(_at_most(f"peak memory draining the {size} batch < 200 MB ({m.system})", m, 200, "MB"))
    if not peak:
        out.append(_not_measured("peak memory draining the 1,000,000-event batch < 200 MB"))
    # -- req. 5: ahead of PgQue on every row ------------------------------------------------------------
    for m in singles:
        out.append(_ahead(f"ahead of PgQue: produce, {m.case}", m, r.find("produce", m.case, PGQUE)))
    for m in r.measures:
        if m.scenario == "produce" and m.case.startswith("batch of") and m.system == "pglogq":
            out.append(_ahead(f"ahead of PgQue: produce, {m.case}", m, r.find("produce", m.case, PGQUE)))
    out.append(_ahead("ahead of PgQue: SQL-level drain, 1 consumer", sql_loop,
                      r.find("consume", "drain, 1 consumer", "PgQue (SQL next_batch/get_batch_events/finish_batch)")))
    out.append(Verdict("ahead of PgQue: Python drain", "not applicable: PgQue has no Python consumer here "
                       f"(pglogq's Python Consumer: {fmt_value(default.value) if default else 'not measured'} "
                       "events/s)", None, "n/a"))
    for p in ("p50", "p99"):
        out.append(_ahead(f"ahead of PgQue: end to end latency {p} at 1,000 events/s, defaults",
                          r.find("latency", f"1,000 events/s offered: {p}", "pglogq"),
                          r.find("latency", f"1,000 events/s offered: {p}", PGQUE)))
    ours, how = _held_metadata(r, "pglogq (held xmin)")
    theirs, _ = _held_metadata(r, f"{PGQUE} (held xmin)")
    out.append(_ahead(f"ahead of PgQue: metadata {how} under the held snapshot", ours, theirs))
    # -- req. 7: latency at defaults, and with a big queue stored beside it -----------------------------
    stored = [m.system for m in r.measures
              if m.scenario == "latency" and m.case == "1,000 events/s offered: p50"
              and m.system.startswith("pglogq (") and "stored" in m.system]
    for system, label in (("pglogq", "defaults"), *((s, s[len("pglogq ("):-1]) for s in stored)):
        out.append(_at_most(f"end to end at 1,000 events/s ({label}): p50 <= 10 ms",
                            r.find("latency", "1,000 events/s offered: p50", system), 10, "ms"))
        out.append(_at_most(f"end to end at 1,000 events/s ({label}): p99 <= 50 ms",
                            r.find("latency", "1,000 events/s offered: p99", system), 50, "ms"))
    out.append(_at_most("end to end at 1,000 events/s (defaults): max <= 25 ms",
                        r.find("latency", "1,000 events/s offered: max", "pglogq"), 25, "ms"))
    if not stored:
        out.append(_not_measured("end to end at 1,000 events/s with 1,000,000 events stored beside it: "
                                 "p50 <= 10 ms, p99 <= 50 ms"))
    # -- req. 1 (measured by the held-xmin scenario) ----------------------------------------------------
    out.append(_at_least("under the held snapshot: throughput >= 95 % of the run without",
                         r.find(HELD, "throughput held / without", "pglogq"), 0.95, "x"))
    held_p99 = r.find(HELD, "latency p99 during the run", "pglogq (held xmin)")
    free_p99 = r.find(HELD, "latency p99 during the run", "pglogq (no held snapshot)")
    p99_ratio = r.find(HELD, "p99 held / without", "pglogq")
    if p99_ratio is not None:
        out.append(_at_most("under the held snapshot: p99 end to end <= 1.5x the run without", p99_ratio, 1.5, "x"))
    elif held_p99 is None or free_p99 is None or not free_p99.value:
        out.append(_not_measured("under the held snapshot: p99 <= 1.5x the run without"))
    else:
        x = held_p99.value / free_p99.value
        out.append(Verdict("under the held snapshot: p99 <= 1.5x the run without",
                           f"{x:.2f}x ({fmt_value(held_p99.value)} vs {fmt_value(free_p99.value)} ms)", x <= 1.5,
                           f"{(x / 1.5 - 1) * 100:+.0f} % vs target"))
    out.append(_at_most(f"under the held snapshot: metadata tables' {how} < 1 MB", ours, 1.0, "MB"))
    out.append(_at_most("under the held snapshot: zero dead tuples in event tables",
                        r.find(HELD, "dead tuples at end, event tables", "pglogq (held xmin)"), 0, "dead tuples"))
    fan = [m for m in r.measures if m.scenario == "fanout" and m.system == "pglogq" and m.unit == "bytes"]
    if fan:
        lo, hi = min(m.value for m in fan), max(m.value for m in fan)
        out.append(Verdict("fan-out: stored bytes independent of the number of subscribers",
                           f"{fmt_value(lo)} .. {fmt_value(hi)} bytes for {len(fan)} subscriber counts",
                           hi <= lo * 1.05, f"max/min {hi / lo:.3f}" if lo else ""))
    else:
        out.append(_not_measured("fan-out: stored bytes independent of the number of subscribers"))
    out.extend(_partition_targets(r))
    out.append(_at_most("urgent lane: VIP mails into a 15,000-event backlog start within 1 s, p99",
                        r.find("vip", "VIP mail: send to handler start, p99", "pglogq (urgent lane)"), 1000, "ms"))
    out.append(_at_most("share consumer: short jobs behind a long one start within 100 ms, p99 (2 workers)",
                        r.find("jobs_mix", "short job: send to handler start, p99", "pglogq (share consumer)"),
                        100, "ms"))
    out.extend(_share_targets(r))
    out.extend(_queue_targets(r))
    out.extend(_history_targets(r))
    out.extend(_growth_targets(r))
    if quick:
        for v in out:
            if v.met is not None:
                v.gap = (v.gap + "; " if v.gap else "") + "quick run: indicative only"
    return out


def _partition_targets(r: Results) -> list[Verdict]:
    """Drains of the 8-partition queue scale with the workers up to the partitions, and
    keep per-key order with never two events of one key at once."""
    parts = sorted((m for m in r.measures if m.scenario == "partitions" and m.system == "pglogq, 8 partitions"),
                   key=lambda m: m.extra.get("workers", 0))
    if len(parts) < 2:
        return [_not_measured("partitions: throughput grows with the workers up to the partitions")]
    # "throughput grows with the number of workers up to the number of partitions": every step
    # of workers gains at least a quarter (the 2 cores, not the handler's sleep, bound the top)
    gains = [b.value / a.value if a.value else 0.0 for a, b in itertools.pairwise(parts)]
    scaling = Verdict("partitions: throughput grows with every step of workers up to the partitions "
                      "(each step >= 1.25x the one before; 8 partitions, handler sleeps)",
                      " / ".join(f"{m.extra.get('workers')}: {fmt_value(m.value)}" for m in parts) + " events/s",
                      all(g >= 1.25 for g in gains),
                      "steps " + ", ".join(f"{g:.2f}x" for g in gains)
                      + f"; {parts[-1].value / parts[0].value:.2f}x from 1 to {parts[-1].extra.get('workers')}")
    bad = sum(int(m.extra.get("per_key_order_violations", 0)) + int(m.extra.get("same_key_overlaps", 0))
              for m in parts)
    order = Verdict("partitions: per-key order violations and same-key overlaps = 0", f"{bad}", bad == 0, "")
    return [scaling, order]


def _share_targets(r: Results) -> list[Verdict]:
    """Share consumers, measured by the share_jobs scenario: the share consumer beside the SKIP LOCKED
    jobs table (no-op jobs, 2 and 8 workers, claim / lease 1 and 100; again after the held
    snapshot), a killed lease holder's takeover, and the metadata under the held snapshot
    beside PgQ's."""
    from tests.harness.bench import share_jobs as sj

    out: list[Verdict] = []
    for held, goal, case_of in ((False, 1.0, sj.drain_case), (True, 3.0, sj.held_case)):
        for workers in sj.WORKERS:
            for claim in sj.CLAIMS:
                case = case_of(workers, claim)
                what = "after the held snapshot, " if held else ""
                out.append(_ratio_at_least(
                    f"share consumer >= {goal:g}x the SKIP LOCKED table, {what}no-op jobs, {workers} workers, "
                    f"claim / lease {claim}", r.find(sj.SCENARIO, case, sj.SHARE), r.find(sj.SCENARIO, case, sj.TABLE),
                    goal, "events/s"))
    out.append(_at_least("takeover of a killed worker's lease: the other worker's events/s in the takeover window "
                         ">= 0.8x before", r.find(sj.SCENARIO, sj.TAKEOVER_RATIO, sj.SHARE), 0.8, "x"))
    back = r.find(sj.SCENARIO, sj.TAKEOVER_BACK, sj.SHARE)
    once = r.find(sj.SCENARIO, sj.TAKEOVER_ONCE, sj.SHARE)
    target = "takeover: the killed worker's 100 events back within dead_interval + one maintenance period, each once"
    if back is None or once is None:
        out.append(_not_measured(target))
    else:
        bound = float(back.extra.get("bound_s", math.nan))
        leased = int(back.extra.get("held_events", 0))
        out.append(Verdict(target, f"back after {fmt_value(back.value)} s (bound {bound:g} s); "
                           f"{fmt_value(once.value)} of {leased} handled once",
                           back.value <= bound and once.value == leased == 100, _pct(back.value, bound)))
    ours = r.find(sj.SCENARIO, sj.META_GROWTH, sj.SHARE)
    theirs = r.find(sj.SCENARIO, sj.META_GROWTH, sj.PGQ)
    target = "share consumer: metadata growth under the held snapshot <= PgQ's (same run, same rate)"
    if ours is None or theirs is None:
        out.append(_not_measured(target, "not measured (" + ("pglogq" if ours is None else "PgQ")
                                 + " has no number in this run)"))
    else:
        out.append(Verdict(target, f"pglogq {fmt_value(ours.value)} MB vs PgQ {fmt_value(theirs.value)} MB",
                           ours.value <= theirs.value, ""))
    return out


def _queue_targets(r: Results) -> list[Verdict]:
    """The number of queues: a call on one queue costs the same whatever the number of other queues: each
    call's steady and first-call time within 1.5x of its 1-queue figure, its locks no more than
    at 1 queue; the ticker's idle pass < 100 ms and ``status --json`` < 1 s at 1,000 queues."""
    ms = [m for m in r.measures if m.scenario == "queues" and m.system == "pglogq"]
    if not ms:
        return [_not_measured("queues: each call within 1.5x of its 1-queue cost, locks independent of N")]
    out: list[Verdict] = []
    base: dict[str, Measure] = {}
    for m in ms:
        if m.extra.get("queues") == 1:
            base[m.case.rsplit(",", 1)[0]] = m
    for m in ms:
        n = m.extra.get("queues")
        what = m.case.rsplit(",", 1)[0]
        one = base.get(what)
        if not isinstance(n, int) or n == 1 or one is None or ":" not in what:
            continue
        if m.unit == "locks":
            out.append(Verdict(f"queues: {what} at {n:,} queues <= at 1 queue", f"{m.value:.0f} vs {one.value:.0f}",
                               m.value <= one.value, f"{m.value - one.value:+.0f} locks"))
        elif m.unit == "ms":
            x = m.value / one.value if one.value else float("inf")
            out.append(Verdict(f"queues: {what} at {n:,} queues <= 1.5x its 1-queue time",
                               f"{fmt_value(m.value)} vs {fmt_value(one.value)} ms", x <= 1.5, f"{x:.2f}x"))
    for case, goal in (("ticker() idle pass, 1,000 queues", 100.0),
                       ("pglogq status --json (a process), 1,000 queues", 1000.0),
                       ("dashboard overview (server time), 1,000 queues", 1000.0)):
        out.append(_at_most(f"queues: {case} < {goal:g} ms", r.find("queues", case, "pglogq"), goal, "ms"))
    return out


def _history_targets(r: Results) -> list[Verdict]:
    """Job history, measured by the history scenario: the no-op handler's throughput with the
    outcome log on >= 0.9x off; jobs() of finished jobs, first page and the page half-way,
    < 50 ms on 1,000,000 outcomes; the result round trip at 100 jobs/s is reported (no target)."""
    from tests.harness.bench import history as h

    out = [_at_least("job history: no-op handler throughput with history on >= 0.9x off (interleaved rounds)",
                     r.find(h.SCENARIO, h.RATIO, h.PGLOGQ), 0.9, "x")]
    for case in (h.FIRST, h.HALF):
        m = r.find(h.SCENARIO, case, h.PGLOGQ)
        n = m.extra.get("outcomes") if m is not None else None
        on = f"{n:,}" if isinstance(n, int) else "1,000,000"
        out.append(_at_most(f"job history: {case.removeprefix('jobs(): ')} of jobs(state='finished') on {on} "
                            "outcomes < 50 ms", m, 50, "ms"))
    trips = [m for m in r.measures if m.scenario == h.SCENARIO and m.case.startswith(h.TRIP)]
    if trips:
        out.append(Verdict("job history: result round trip (send → handler → result to a waiting client), "
                           "reported, no target",
                           " / ".join(f"{m.case.rsplit(': ', 1)[1]} {fmt_value(m.value)} ms" for m in trips)
                           + f" ({trips[0].case.rsplit(': ', 1)[0].removeprefix(h.TRIP + ' ')})", None, "no target"))
    else:
        out.append(_not_measured("job history: result round trip at 100 jobs/s, reported"))
    return out


def _growth_targets(r: Results) -> list[Verdict]:
    """The growth scenario: each call's log-log slope of time on the size of a dimension, at most
    its target (0.1: a call doing a fixed amount of work; 1: a listing of everything).  PgQ's
    curves are listed beside them as a reference: no target of their own, never met or missed."""
    from tests.harness.bench import growth

    out: list[Verdict] = []
    for (dim, call), (target, pts) in growth.curves(r.measures).items():
        s = growth.slope(pts)
        if s is None:
            continue
        sizes = sorted(n for n, _ in pts)
        span = f"({sizes[0]:,} to {sizes[-1]:,})"
        if target is None:
            out.append(Verdict(f"growth: {dim}: {call}: log-log slope {span}, reference beside pglogq's",
                               f"{s:+.2f}", None, "reference: no target of its own"))
            continue
        out.append(Verdict(f"growth: {dim}: {call}: log-log slope <= {target:g} {span}",
                           f"{s:+.2f}", s <= target, f"{s - target:+.2f}"))
    if not out:
        out.append(_not_measured("growth: every call's log-log slope within its target"))
    return out
