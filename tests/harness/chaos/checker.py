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
events; the pass records each one it took (``skip`` records: the batches it closed, the stretch
the cursor jumped).  Those are **skipped**, not lost; the ones never delivered although they were
ticked within the limit (judged in the database, by the tick times against the pass's own
instant: :func:`.nemesis.retention_pass`) are **skipped_within_limit** (retention took them from a
consumer that was not that far behind: must be 0).

In the ``keyed`` mode (a partitioned queue, keyed events, pages recorded with their times) two
more, both 0 when the engine keeps its promises:

* **per_key_order_violations** — the deliveries of each key in the order they happened (the
  time the receive returned, across every process; then the place in the page): a violation is
  an event delivered for the first time after a later event of its key (by the key's sequence)
  was delivered for the first time.  Redeliveries are allowed (at-least-once).  Only events whose
  send was acknowledged count: an event of unknown outcome may still have been committing while
  its producer sent the next one.
* **same_key_in_flight** — pages of two different workers of the subscriber holding one key at
  once: a page is in flight from its receive's return to the end of its handlers (``done``); a
  page whose process died first stays in flight until its process file's next page (the process,
  restarted under the same name, asks again and gets it back first), or for ever.  Taking over a
  worker's partition is allowed once the worker has been silent for the queue's dead_interval
  (the holder's receive was called at least that long before the other's returned): such
  overlaps are counted apart, as **takeovers**.  A receive in a transaction that was rolled back
  (``committed`` 0) never handed its page out and is left out.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.harness.chaos.history import read_file, read_records


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


@dataclass
class Page:
    """A page of the keyed mode: who received it, when, and the keys it held."""

    uid: str
    consumer: str
    worker: str
    called: float
    returned: float
    committed: bool
    end: float = math.inf
    keys: set[str] = field(default_factory=set)
    events: set[str] = field(default_factory=set)
    finished: bool = False  # a ``done`` record: its handlers ended (the process was alive)
    killed: bool = False  # its process was SIGKILLed by the harness before its handlers ended


@dataclass
class KeyedDelivery:
    returned: float
    place: int
    kseq: int
    ev_id: str


@dataclass
class KeyedHistory:
    """subscriber → key → deliveries, and every page by id."""

    deliveries: dict[str, dict[str, list[KeyedDelivery]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    pages: dict[str, Page] = field(default_factory=dict)


def read_kills(directory: Path) -> dict[str, list[float]]:
    """process name (its record file's tag), and pid → when the harness SIGKILLed it
    (CLOCK_MONOTONIC)."""
    out: dict[str, list[float]] = defaultdict(list)
    for rec in read_records(directory, "nemesis-"):
        if rec[0] == "kill":
            out[rec[1]].append(float(rec[3]))
            out[f"pid:{rec[2]}"].append(float(rec[3]))
    return out


def record_pid(stem: str) -> str | None:
    """The pid in the name of a sharded-mode record file ``consumer-<stem>.log`` (``stem`` is
    ``<tag>-<pid>-<thread>``: one file per process and thread); None for the other modes' files
    (``<tag>``: one per process name, across restarts)."""
    parts = stem.rsplit("-", 2)
    return parts[1] if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit() else None


def _kills_of(stem: str, kills: dict[str, list[float]]) -> list[float]:
    """When the harness killed the process that wrote the record file ``consumer-<stem>.log``:
    by its tag, or for a sharded-mode file by its pid."""
    if stem in kills:
        return sorted(kills[stem])
    pid = record_pid(stem)
    return sorted(kills.get(f"pid:{pid}", [])) if pid is not None else []


def read_keyed(directory: Path) -> KeyedHistory:
    """The pages, their ends and the keyed deliveries of the consumers' files."""
    out = KeyedHistory()
    kills = read_kills(directory)
    for path in sorted(directory.glob("consumer-*.log")):
        unfinished: list[Page] = []  # pages of this file without a "done" yet
        place = 0
        killed = _kills_of(path.stem[len("consumer-"):], kills)
        for rec in read_file(path):
            if rec[0] == "page":
                page = Page(rec[1], rec[2], rec[3], float(rec[4]), float(rec[5]), rec[6] == "1")
                for old in unfinished:  # the process died, then asked again
                    old.end = min(old.end, page.called)
                unfinished = [page]
                # killed by the harness before it finished: in flight until then at most
                page.end = next((k for k in killed if k >= page.called), math.inf)
                page.killed = page.end < math.inf
                out.pages[page.uid] = page
                place = 0
            elif rec[0] == "exit":
                # the process ended itself (a killer event): its pages are in flight no longer
                for old in unfinished:
                    old.end = min(old.end, float(rec[1]))
                unfinished = []
            elif rec[0] == "done" and rec[1] in out.pages:
                out.pages[rec[1]].end = float(rec[2])
                out.pages[rec[1]].finished = True
                out.pages[rec[1]].killed = False
                unfinished = [p for p in unfinished if p.uid != rec[1]]
            elif rec[0] == "deliver" and len(rec) == 9 and rec[6] in out.pages:
                page = out.pages[rec[6]]
                page.events.add(rec[1])
                if rec[7] == "-":
                    continue
                page.keys.add(rec[7])
                place += 1
                out.deliveries[rec[3]][rec[7]].append(KeyedDelivery(page.returned, place, int(rec[8]), rec[1]))
    return out


def order_violations(deliveries: dict[str, list[KeyedDelivery]], acknowledged: set[str]) -> list[str]:
    """The events of acknowledged sends first delivered after a later event of their key."""
    bad: list[str] = []
    for per_key in deliveries.values():
        seen: set[str] = set()
        highest = -1
        for d in sorted(per_key, key=lambda d: (d.returned, d.place)):
            if d.ev_id in seen:
                continue  # a redelivery
            seen.add(d.ev_id)
            if d.kseq < highest and d.ev_id in acknowledged:
                bad.append(d.ev_id)
            highest = max(highest, d.kseq)
    return bad


def keys_in_flight(pages: list[Page], dead_interval: float) -> tuple[list[str], int]:
    """(pages handed out while another worker's page of one of their keys was in flight, pages
    that took a silent worker's page over) among ``pages`` of one subscriber.  A page taken over
    is in flight no more from then on (its holder is taken for dead)."""
    bad, takeovers, _live = held_twice(pages, dead_interval, lambda p: p.keys)
    return bad, takeovers


def held_twice(pages: list[Page], dead_interval: float,
               items: Callable[[Page], set[str]]) -> tuple[list[str], int, int]:
    """(pages handed out while another worker's page holding one of their ``items`` -- keys, or
    events -- was in flight; pages that took a silent worker's page over; how many of those
    took it from a holder that finished its handlers later, i.e. was alive) among ``pages`` of
    one subscriber.  A page taken over is in flight no more from then on."""
    entries = sorted(((p.returned, p.uid, item, p) for p in pages if p.committed for item in items(p)),
                     key=lambda e: (e[0], e[1], e[2]))
    active: dict[str, list[Page]] = defaultdict(list)
    taken_at: dict[str, float] = {}  # page → when another worker took it over
    bad: set[str] = set()
    takeovers: set[str] = set()
    live: set[str] = set()
    for returned, uid, item, page in entries:
        active[item] = [a for a in active[item] if min(a.end, taken_at.get(a.uid, math.inf)) > returned]
        for a in active[item]:
            if a.worker == page.worker:
                continue  # one worker (or its twin process): the same page again
            if returned - a.called < dead_interval:
                bad.add(uid)
            else:
                takeovers.add(uid)
                taken_at[a.uid] = returned
                if a.finished:
                    live.add(uid)
        active[item].append(page)
    return sorted(bad), len(takeovers - bad), len(live - bad)


def rerun_after_kill(pages: list[Page]) -> int:
    """Events of pages whose process the harness killed before their handlers ended that a
    later page of another worker handed out again (a killed holder's lease taken over)."""
    later: dict[str, list[Page]] = defaultdict(list)
    for p in pages:
        if p.committed:
            for ev in p.events:
                later[ev].append(p)
    out: set[str] = set()
    for p in pages:
        if p.killed and p.committed:
            for ev in p.events:
                if any(o.worker != p.worker and o.returned >= p.end for o in later[ev]):
                    out.add(ev)
    return len(out)


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
    dead_interval: float = math.inf,
    effects: dict[str, Counter[str]] | None = None,
) -> dict[str, Any]:
    """The report of a run (see the module's docstring); ``dead_interval`` (seconds) is the
    queue's, for the keyed checks; ``effects`` (share mode): per consumer, how many effect rows
    each event's acks committed (written in the ack's transaction): more than one is an effect
    applied twice, none for a delivered event that is not a dead letter is one done without it."""
    sends = read_sends(directory)
    keyed = read_keyed(directory)
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
        disorder = order_violations(keyed.deliveries.get(sub, {}), sends.ok)
        mine = [p for p in keyed.pages.values() if p.consumer == sub]
        overlaps, takeovers = keys_in_flight(mine, dead_interval)
        twice, lease_takeovers, expired_live = held_twice(mine, dead_interval, lambda p: p.events)
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
            "keyed_deliveries": sum(len(v) for v in keyed.deliveries.get(sub, {}).values()),
            "per_key_order_violations": len(disorder),
            "same_key_in_flight": len(overlaps),
            "takeovers": takeovers,
            "paged_events": sum(len(p.events) for p in mine),
            "same_event_in_flight": len(twice),
            "lease_takeovers": lease_takeovers,
            "expired_live_holders": expired_live,
            "rerun_after_kill": rerun_after_kill(mine),
            **({} if effects is None else {
                "effects_applied_twice": sum(1 for n in effects.get(sub, Counter()).values() if n > 1),
                "done_without_effect": len(ids - sub_dead - set(effects.get(sub, Counter()))),
            }),
            "examples": {"lost": lost[:10], "unexpected": unexpected[:10], "duplicated": dup[:10],
                         "skipped_within_limit": wrongly_skipped[:10],
                         "per_key_order_violations": disorder[:10], "same_key_in_flight": overlaps[:10],
                         "same_event_in_flight": twice[:10],
                         **({} if effects is None else {"effects_applied_twice": sorted(
                             i for i, n in effects.get(sub, Counter()).items() if n > 1)[:10]})},
        }
    return report
