"""Pure parts of the consumer runtime shared by AsyncConsumer and Consumer.

Nothing here does I/O: worker names, handler routing, run statistics, and the bookkeeping that
notices when tick notifications never arrive.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Generic, TypeVar

OK = "ok"
ERROR = "error"
TIMEOUT = "timeout"
ABANDONED = "abandoned"

Outcome = tuple[str, "BaseException | None"]
"""What running one handler call gave: (OK | ERROR | TIMEOUT | ABANDONED, the exception)."""

OK_OUTCOME: Outcome = (OK, None)
"""The outcome of every call that returned: one shared tuple, not one per call."""

ABANDONED_OUTCOME: Outcome = (ABANDONED, None)


def settled(out: list[Outcome | None]) -> list[Outcome]:
    """The outcomes of a page run one call after the other: ``out`` itself when its last call
    ran (then every call did: they run in order), else with ABANDONED for the calls never made
    (no copy of a page's thousands of outcomes in the usual case)."""
    if not out or out[-1] is not None:
        return out  # type: ignore[return-value]
    return [o if o is not None else ABANDONED_OUTCOME for o in out]


NOT_RUN = "not_run"
NOT_RUN_OUTCOME: Outcome = (NOT_RUN, None)
"""A call of a partition's page after a failure that ends the page: never made, neither acknowledged
nor nacked (the engine delivers it again after the failed event)."""

D = TypeVar("D")


def host_label() -> str:
    """``host:pid`` of this process, for progress rows and logs."""
    return f"{socket.gethostname()}:{os.getpid()}"


def auto_worker_name() -> str:
    """A worker name unique to this consumer object: ``<host>-<pid>-<4 hex>`` (at most 63 chars)."""
    host = re.sub(r"[^A-Za-z0-9_.@-]", "-", socket.gethostname().split(".")[0]) or "host"
    return f"{host[:40]}-{os.getpid()}-{secrets.token_hex(2)}"


WORKER_NAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,63}$")


def loop_names(worker: str | None, workers: int) -> list[str]:
    """The worker names of a consumer's ``workers`` receive loops: ``f"{base}-{i}"``, ``base`` being
    ``worker``, else this process's :func:`host_label` (made a valid worker name, the host part cut
    so that the names fit in 63 characters).  ValueError when ``worker`` is too long for them."""
    suffix = f"-{workers - 1}"
    if worker is None:
        host, _, pid = host_label().rpartition(":")
        host = re.sub(r"[^A-Za-z0-9_.@-]", "-", host) or "host"
        worker = f"{host[: 63 - len(suffix) - len(pid) - 1]}:{pid}"
    names = [f"{worker}-{i}" for i in range(workers)]
    if not WORKER_NAME_RE.match(names[-1]):
        raise ValueError(f"worker name {worker!r} is too long for {workers} workers: the loops are named "
                         f"{names[-1]!r} and so on, at most 63 characters")
    return names


@dataclass
class Route:
    """A registered handler: ``kind`` is "message" (called per message) or "batch" (with a list);
    ``retry_policy``: the handler's own (a :class:`pglogq.RetryPolicy`, None: the consumer's)."""

    kind: str
    fn: Callable[..., Any]
    retry_policy: Any = None


class Routes:
    """Handlers by event type; the one registered for ``None`` handles every other type."""

    def __init__(self) -> None:
        self._by_type: dict[str | None, Route] = {}

    def add(self, types: Sequence[str | None], kind: str, fn: Callable[..., Any], retry_policy: Any = None) -> None:
        for t in types:
            if t in self._by_type:
                what = "the default handler" if t is None else f"a handler for type {t!r}"
                raise ValueError(f"{what} is registered already")
        for t in types:
            self._by_type[t] = Route(kind, fn, retry_policy)

    def route(self, type: str | None) -> Route | None:
        found = self._by_type.get(type) if type is not None else None
        return found if found is not None else self._by_type.get(None)

    def has_batch(self) -> bool:
        """True when a batch handler is registered (a page's calls then need :func:`group_units`)."""
        return any(r.kind == "batch" for r in self._by_type.values())

    def __bool__(self) -> bool:
        return bool(self._by_type)


class Unit(Generic[D]):
    """One handler call: a route (None: no handler) and the deliveries it gets.

    ``error``: the message could not be decoded; no handler is called, it fails with this reason.
    A unit of one delivery (a per-message handler: nearly every unit) keeps the delivery itself
    and makes its one-item list when ``items`` is read: one object fewer per event that lives
    as long as the page (which the cyclic garbage collector would otherwise go through)."""

    __slots__ = ("_items", "_one", "error", "route")

    def __init__(self, route: Route | None, items: list[D] | None = None, error: str | None = None,
                 *, one: D | None = None) -> None:
        self.route = route
        self.error = error
        self._items = items
        self._one = one

    @property
    def items(self) -> list[D]:
        return self._items if self._items is not None else [self._one]  # type: ignore[list-item]

    def __repr__(self) -> str:
        return f"Unit(route={self.route!r}, items={self.items!r}, error={self.error!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Unit):
            return NotImplemented
        return (self.route, self.items, self.error) == (other.route, other.items, other.error)

    __hash__ = None  # type: ignore[assignment]


def group_units(
    items: Sequence[D],
    type_of: Callable[[D], str | None],
    routes: Routes,
    error_of: Callable[[D], str | None] | None = None,
    *,
    contiguous: bool = False,
) -> list[Unit[D]]:
    """Split a page into handler calls, in page order: one per message for message handlers,
    one per batch handler with all its messages (at the position of the first).  A message
    whose ``error_of`` is set (undecodable) gets a unit of its own that calls no handler.

    ``contiguous`` (a partition's page, handled strictly in order): a batch handler's call holds
    one run of consecutive messages only, so that calls in page order handle the messages in
    page order."""
    units: list[Unit[D]] = []
    batch_at: dict[int, int] = {}
    found: dict[str | None, Route | None] = {}  # the route of each type met on this page
    for item in items:
        error = error_of(item) if error_of is not None else None
        if error is not None:
            units.append(Unit(None, error=error, one=item))
            continue
        t = type_of(item)
        try:
            r = found[t]
        except KeyError:
            r = found[t] = routes.route(t)
        if r is not None and r.kind == "batch":
            key = id(r)
            if key in batch_at and (not contiguous or batch_at[key] == len(units) - 1):
                units[batch_at[key]].items.append(item)
                continue
            batch_at[key] = len(units)
            units.append(Unit(r, [item]))  # a batch handler's list grows with the page
        else:
            units.append(Unit(r, one=item))
    return units


class Nack(Exception):
    """Raise it in a handler to fail the message on purpose: ``raise pglogq.Nack("mailbox full")``.

    The message is nacked with ``reason`` (exactly, without the exception's class name) and, if
    given, ``retry_after`` (a timedelta or seconds; else the consumer's retry policy, else the
    queue's ``retry_delay``).  ``dead=True`` rejects it: straight to the dead-letter queue
    whatever retries are left (a failure no retry can mend), as ``nack(..., dead=True)``.  An
    expected failure: the runtime logs one WARNING line, its traceback only at DEBUG; any other
    exception keeps its traceback at WARNING."""

    def __init__(self, reason: str, *, retry_after: timedelta | float | None = None, dead: bool = False) -> None:
        super().__init__(reason)
        if not isinstance(dead, bool):
            raise TypeError(f"dead must be True or False, got {dead!r}")
        self.dead = dead
        self.reason = str(reason)
        if retry_after is not None and not isinstance(retry_after, timedelta):
            if isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)):
                raise TypeError(f"retry_after: a timedelta or a number of seconds, not {type(retry_after).__name__}")
            retry_after = timedelta(seconds=retry_after)
        self.retry_after: timedelta | None = retry_after


def failure_reason(outcome: Outcome, timeout: float | None) -> str:
    kind, exc = outcome
    if kind == TIMEOUT:
        return f"timed out after {timeout:g} s"
    if exc is None:
        return kind
    if isinstance(exc, Nack):
        return exc.reason[-2000:]
    text = f"{type(exc).__name__}: {exc}"
    return text[-2000:]


@dataclass
class RunStats:
    """What one ``run()`` did.  A page is what one receive returned (a whole batch or a part)."""

    pages: int = 0
    handled: int = 0
    """Messages whose handler succeeded (acknowledged)."""
    failed: int = 0
    """Messages whose handler raised, timed out or had no handler (nacked)."""
    retried: int = 0
    dead: int = 0
    timed_out: int = 0
    lost_pages: int = 0
    """Pages dropped because another worker took the batch over."""
    abandoned_pages: int = 0
    """Pages left unacknowledged by ``stop(abandon=True)`` (they come back)."""
    errors: int = 0
    """Database errors survived by the run loop (it waits and tries again)."""
    cancelled: int = 0
    """Messages cancelled after they were received: never started, acknowledged with the page."""
    ceded: int = 0
    """Events of a share consumer's leases given back unstarted (``cede``) for another worker to
    run: behind an event that ran longer than ``cede_after``, or at ``stop()``."""


def total(runs: Sequence[RunStats]) -> RunStats:
    """The sum of several runs' statistics (a consumer's receive loops)."""
    out = RunStats()
    for f in fields(RunStats):
        setattr(out, f.name, sum(getattr(r, f.name) for r in runs))
    return out


class NotifyHealth:
    """Notices that tick notifications never arrive although polling finds events.

    Call :meth:`notified` when a notification woke the worker and :meth:`found_by_polling` when a
    wait ended by timeout and the following receive found events.  After ``limit`` such polls in
    a row with no notification, :meth:`found_by_polling` returns True once (log it, reconnect the
    listener); a notification re-arms it.
    """

    def __init__(self, limit: int = 3) -> None:
        self.limit = limit
        self.misses = 0
        self.warned = False
        self.notifications = 0

    def notified(self) -> None:
        self.notifications += 1
        self.misses = 0
        self.warned = False

    def found_by_polling(self) -> bool:
        self.misses += 1
        if self.misses >= self.limit and not self.warned:
            self.warned = True
            return True
        return False
