"""The outcome log of a consumer runtime: how each handler run of a page ended, and results.

``pglogq/_outcomes.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
The receive loop hands a page to :func:`ack` where it would acknowledge it: the page's outcomes
go to ``pglogq.record_outcomes`` in the statement of the ack (one round trip, committed with the
page), see docs/how-to/job-history.md.  A queue whose ``history_retention`` is 0 stores none:
the loop then acknowledges plainly for ``OFF_RECHECK`` seconds before it offers outcomes again.

A handler registered with ``store_result`` is wrapped by :func:`storing`: its JSON return value
is kept on the delivery (checked against the queue's ``max_result_bytes`` first: a larger one
fails the job with :class:`pglogq.ResultTooLarge`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pglogq._codec as v
import pglogq._convert as cv
from pglogq import _queries as q
from pglogq.errors import ResultTooLarge
from pglogq.models import Message

if TYPE_CHECKING:
    from pglogq._consumer_loop_async import AsyncDelivery, ReceiveLoop, _Page

OFF_RECHECK = 30.0
"""Seconds a loop acknowledges without outcomes once the queue said its log is off."""

LIMIT_RECHECK = 60.0
"""Seconds a loop trusts the queue's ``max_result_bytes`` it read."""

_VERDICT = {"retry": "failed", "dead": "dead"}

_off_until: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_limits: weakref.WeakKeyDictionary[Any, tuple[float, int]] = weakref.WeakKeyDictionary()


def _state(d: AsyncDelivery, stops: set[int]) -> str:
    if d.skipped:
        return "cancelled"  # cancelled after receive, never started
    verdict = _VERDICT.get(d._verdict or "")
    if verdict is not None:
        return verdict
    if not d._wall:
        return "skipped"  # a partition's page after its failure: not run, it comes again
    if d.msg_id in stops:
        return "stopped"
    return "done"


def page_params(page: _Page) -> tuple[Any, ...]:
    """``record_outcomes``'s arguments (after the batch id) for every delivery of ``page``."""
    ds = page.deliveries
    stops = page.stop_ids
    states: list[str] | None = [_state(d, stops) for d in ds]
    errors: list[str | None] | None = None
    assert states is not None
    if states.count("done") == len(states):
        states = None  # the usual page: NULL says "all done" (nothing more to send)
    else:
        errors = [d._failure if d._verdict in _VERDICT else None for d in ds]
    results: list[str | None] | None = None
    if any("_result" in d.__dict__ for d in ds):
        results = [d.__dict__.get("_result") for d in ds]
    return (
        [d.msg_id for d in ds],
        [d.retry_count + 1 for d in ds],
        [d._wall or None for d in ds],
        [d._ended or None for d in ds],
        states,
        errors,
        results,
        [d.type for d in ds],
    )


async def ack(loop: ReceiveLoop, page: _Page, last: Message | None, conn: Any = None) -> bool:
    """Acknowledge ``page`` (what ``client.ack(page.batch_id, last=last, conn=conn)`` does) and
    append its outcomes to the consumer's outcome log in the same statement."""
    client = loop.client
    now = time.monotonic()
    if not page.deliveries or _off_until.get(loop, 0.0) > now:
        return await client.ack(page.batch_id, last=last, conn=conn)
    batch_id, last = cv.ack_args(page.batch_id, last)
    params = (batch_id, *page_params(page), batch_id, last.msg_id if last else None, last.txid if last else None)
    rows = await client._rows(q.ACK_OUTCOMES, params, conn)
    acked, stored = rows[0]
    if not stored:
        _off_until[loop] = now + OFF_RECHECK  # history_retention 0: the log is off for the queue
    return bool(acked)


async def result_limit(loop: ReceiveLoop) -> int:
    """The queue's ``max_result_bytes`` (read once a ``LIMIT_RECHECK``)."""
    now = time.monotonic()
    known = _limits.get(loop)
    if known is not None and known[0] > now:
        return known[1]
    rows = await loop.client._rows(q.MAX_RESULT_BYTES, (loop.queue,), None)
    limit = int(rows[0][0])
    _limits[loop] = (now + LIMIT_RECHECK, limit)
    return limit


async def keep(d: AsyncDelivery, value: Any) -> None:
    """Keep a handler's return value on its delivery, as JSON text, for the page's outcomes;
    :class:`ResultTooLarge` (the job fails) when it is larger than ``max_result_bytes``."""
    if value is None:
        return
    text = v.dumps(value, "result")
    size = len(text.encode("utf-8"))
    limit = await result_limit(d._loop)
    if size > limit:
        raise ResultTooLarge(
            f"result of {size} bytes is larger than max_result_bytes ({limit}) of queue {d._loop.queue!r}",
            hint="return less (store the rest elsewhere and return its key), or raise the queue's max_result_bytes",
        )
    d.__dict__["_result"] = text


def storing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a handler of one message) whose return value is kept as the job's result."""

    async def stored(msg: Any) -> Any:
        value = await fn(msg)
        await keep(msg, value)
        return value

    stored.__name__ = getattr(fn, "__name__", "handler")
    stored.__qualname__ = getattr(fn, "__qualname__", "handler")
    stored.__doc__ = getattr(fn, "__doc__", None)
    return stored
