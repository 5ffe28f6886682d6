"""The total-queue check: what was sent against what each subscriber got.

Per subscriber: **lost** = sends acknowledged ok and never delivered; **unexpected** = deliveries
of ids that were never sent, or whose send certainly failed (rolled back, refused);
**indeterminate** sends may be delivered or not (both counted); **duplicated** = ids delivered
more than once with the same retry count (at-least-once redelivery after a crash before the
ack); **dead_lettered** = ids in the subscriber's dead-letter queue.  Poison events (always
nacked) must end up dead-lettered: ``poison_not_dead`` counts those that did not.  Killer events
(the consumer process dies when it starts one) must end dead-lettered too, not redelivered
forever: ``killer_not_dead`` counts those that did not, ``killer_max_deliveries`` is the most
deliveries one of them got.

In the ``retention`` mode a retention pass may make a consumer that fell behind the limit skip
events; the pass records each one (``skip`` records).  Those are **skipped**, not lost; the
ones never delivered although they were ticked within the limit are **skipped_within_limit**
(retention took them from a consumer that was not that far behind: must be 0).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.chaos.history import read_records


@dataclass
class Sends:
    invoked: set[str] = field(default_factory=set)
    ok: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    info: set[str] = field(default_factory=set)

    @property
    def indeterminate(self) -> set[str]:
        """Attempts whose outcome is unknown: reported so, or the producer died first."""
        return (self.info | (self.invoked - self.ok - self.failed)) - self.ok - self.failed


def read_sends(directory: Path) -> Sends:
    s = Sends()
    for rec in read_records(directory, "producer-"):
        kind, ev = rec[0], rec[1]
        if kind == "invoke":
            s.invoked.add(ev)
        elif kind == "ok":
            s.ok.add(ev)
        elif kind == "fail":
            s.failed.add(ev)
        elif kind == "info":
            s.info.add(ev)
    return s


def read_deliveries(directory: Path) -> dict[str, dict[str, list[int]]]:
    """subscriber → id → retry counts of its deliveries."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for rec in read_records(directory, "consumer-"):
        if rec[0] == "deliver":
            out[rec[3]][rec[1]].append(int(rec[5]))
    return out


def read_skips(directory: Path) -> dict[str, dict[str, bool]]:
    """subscriber → id → whether the event was ticked within the limit when it was skipped."""
    out: dict[str, dict[str, bool]] = defaultdict(dict)
    for rec in read_records(directory, "retention-"):
        if rec[0] == "skip":
            out[rec[2]][rec[1]] = out[rec[2]].get(rec[1], False) or rec[3] == "1"
    return out


def client_faults(directory: Path) -> Counter[str]:
    c: Counter[str] = Counter()
    for prefix in ("producer-", "consumer-"):
        for rec in read_records(directory, prefix):
            if rec[0] == "fault":
                c[rec[1]] += 1
    return c


def check(
    directory: Path,
    subscribers: list[str],
    dead: dict[str, set[str]],
    poison: set[str],
    killers: set[str] | None = None,
) -> dict[str, Any]:
    sends = read_sends(directory)
    deliveries = read_deliveries(directory)
    skips = read_skips(directory)
    indet = sends.indeterminate
    allowed = sends.ok | indet
    report: dict[str, Any] = {
        "sends": {
            "attempted": len(sends.invoked),
            "ok": len(sends.ok),
            "failed": len(sends.failed),
            "indeterminate": len(indet),
            "indeterminate_reported": len(sends.info),
        },
        "subscribers": {},
    }
    for sub in subscribers:
        got = deliveries.get(sub, {})
        ids = set(got)
        skipped = skips.get(sub, {})
        lost = sorted(sends.ok - ids - set(skipped))
        wrongly_skipped = sorted(i for i, within in skipped.items() if within and i not in ids and i in sends.ok)
        unexpected = sorted(ids - allowed)
        dup = sorted(i for i, retries in got.items() if max(Counter(retries).values()) > 1)
        sub_dead = dead.get(sub, set())
        must_die = (poison & sends.ok) & ids
        killed = (killers or set()) & sends.ok & ids
        report["subscribers"][sub] = {
            "delivered_ids": len(ids),
            "deliveries": sum(len(v) for v in got.values()),
            "lost": len(lost),
            "skipped": len(set(skipped) - ids),
            "skipped_within_limit": len(wrongly_skipped),
            "unexpected": len(unexpected),
            "indeterminate_delivered": len(indet & ids),
            "indeterminate_absent": len(indet - ids),
            "duplicated": len(dup),
            "redelivered_after_nack": sum(1 for v in got.values() if max(v) > 0),
            "dead_lettered": len(sub_dead),
            "poison_not_dead": len(must_die - sub_dead),
            "killers_delivered": len(killed),
            "killer_not_dead": len(killed - sub_dead),
            "killer_max_deliveries": max((len(got[i]) for i in killed), default=0),
            "dead_not_delivered": len(sub_dead - ids),
            "examples": {"lost": lost[:10], "unexpected": unexpected[:10], "duplicated": dup[:10],
                         "skipped_within_limit": wrongly_skipped[:10]},
        }
    return report
