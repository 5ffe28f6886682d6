"""The outcome log of a consumer runtime: how each handler run of a page ended, and results.

``pglogq/_outcomes.py`` (threads) is generated from this file by ``python -m tests.tools.unasync``.
The receive loop hands a page to :func:`ack` where it would acknowledge it: the page's outcomes
go to ``pglogq.record_outcomes`` in the statement of the ack (one round trip, committed with the
page), see docs/how-to/job-history.md.  A queue whose ``history_retention`` is 0 stores none:
the loop then acknowledges plainly for ``OFF_RECHECK`` seconds before it offers outcomes again.

What it costs is the page's, not its events': the runs that ended plainly (done on their first
delivery, no result: all of them in the usual page) go as one group, their ids and times as
arrays already in PostgreSQL's binary format (built by the ``array`` module, not element by
element; no ids at all when they are one ascending run, as one producer's are: their range
says them), which the server stores as one row; only the other runs (failed, dead, cancelled,
stopped, skipped, redelivered, with a result) go one by one, and only a page that may have such
runs is looked through for them.

A handler registered with ``store_result`` is wrapped by :func:`storing`: its JSON return value
is kept on the delivery (checked against the queue's ``max_result_bytes`` first: a larger one
fails the job with :class:`pglogq.ResultTooLarge`).
"""

from __future__ import annotations

import struct
import time
import weakref
from array import array
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.rows import tuple_row

import pglogq._args as a
import pglogq._codec as v
from pglogq import _queries as q
from pglogq.errors import ResultTooLarge, translate
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
_with_results: weakref.WeakSet[Any] = weakref.WeakSet()  # pages with a kept result


class _Binary:
    """An array parameter already in PostgreSQL's binary format (``data``)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class _Int8Array(_Binary):
    __slots__ = ()


class _Float8Array(_Binary):
    __slots__ = ()


class _TextArray(_Binary):
    __slots__ = ()


class _BinaryDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj.data)


class _Int8ArrayDumper(_BinaryDumper):
    oid = 1016  # int8[]


class _Float8ArrayDumper(_BinaryDumper):
    oid = 1022  # float8[]


class _TextArrayDumper(_BinaryDumper):
    oid = 1009  # text[]


_DUMPERS = ((_Int8Array, _Int8ArrayDumper), (_Float8Array, _Float8ArrayDumper), (_TextArray, _TextArrayDumper))
_HEAD = struct.Struct(">iiiii")  # dimensions, has NULLs, element type, length, lower bound
_LEN8 = array("I", struct.pack(">i", 8))  # each element's length word, as a native unsigned int
assert _LEN8.itemsize == 4


def _eight_byte_array(values: Sequence[float] | Sequence[int], code: str, element_oid: int) -> bytes:
    """A one-dimensional int8[] (``code`` "q") or float8[] ("d") without NULLs, in binary format:
    each element is its length word then its 8 big-endian bytes.  The values are packed
    big-endian by one ``struct`` call (a third of what an ``array`` of them and a byte swap
    cost), then interleaved with the length words by slice assignment of whole buffers (no
    Python code per element)."""
    n = len(values)
    packed = struct.pack(f">{n}{code}", *values)
    out = _LEN8 * (3 * n)
    words = memoryview(out).cast("B").cast("I")
    vals = memoryview(packed).cast("I")
    words[1::3] = vals[0::2]
    words[2::3] = vals[1::2]
    return _HEAD.pack(1, 0, element_oid, n, 1) + out.tobytes()


def _text_array(texts: Sequence[str | None]) -> bytes:
    """A one-dimensional text[] in binary format (each distinct text encoded once)."""
    enc: dict[str | None, bytes] = {}
    for t in set(texts):
        b = t.encode("utf-8") if t is not None else b""
        enc[t] = struct.pack(">i", len(b)) + b if t is not None else struct.pack(">i", -1)
    return _HEAD.pack(1, int(None in enc), 25, len(texts), 1) + b"".join([enc[t] for t in texts])


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


def _split(
    page: _Page, failed: bool
) -> tuple[list[AsyncDelivery], list[AsyncDelivery], list[str], list[int] | None]:
    """The page's plain runs (done on their first delivery, no result) and the others, with the
    others' outcomes, and the plain runs' ids when they are the whole page (None: not listed);
    a page that cannot have others is not looked through: one pass reads each event's id and
    whether it was redelivered (the first pass over the page's events is the dearest: it brings
    them back into the CPU's cache)."""
    ds = page.deliveries
    if not (failed or page.cancelled or page.stop_ids or page in _with_results):
        ids = [d.msg_id for d in ds if not d.retry_count]
        if len(ids) == len(ds):
            return ds, [], [], ids
    stops = page.stop_ids
    plain: list[AsyncDelivery] = []
    odd: list[AsyncDelivery] = []
    states: list[str] = []
    for d in ds:
        state = _state(d, stops)
        if state == "done" and not d.retry_count and "_result" not in d.__dict__:
            plain.append(d)
        else:
            odd.append(d)
            states.append(state)
    return plain, odd, states, None


def page_params(page: _Page, failed: bool = False) -> tuple[Any, ...]:
    """The outcome arguments of ``ACK_GROUP`` (9: the plain runs' ids, starts, ends, types, one
    type, least and greatest id, earliest and latest end) or of ``ACK_OUTCOMES`` (17: then the
    others one by one: ids, attempts, starts, ends, outcomes, errors, results, types) for the
    deliveries of ``page``; ``failed``: some were nacked."""
    plain, odd, states, id_list = _split(page, failed)
    ids: Any = None
    starts: Any = None
    ends: Any = None
    types: Any = None
    one_type: str | None = None
    bounds: tuple[Any, ...] = (None,) * 4
    if plain:
        walls = [d._wall for d in plain]
        if not all(walls):  # a 0.0: not run (cannot be: _split says skipped); kept out of the binary arrays
            odd.extend(d for d in plain if not d._wall)
            states.extend("skipped" for d in plain if not d._wall)
            plain = [d for d in plain if d._wall]
            walls = [d._wall for d in plain]
            id_list = None
        ends_ = [d._ended for d in plain]
        if not all(ends_):  # a 0.0: not returned yet (cannot be once the page is finished): now
            ends_ = [e or time.time() for e in ends_]
        if id_list is None:
            id_list = [d.msg_id for d in plain]
        # the bounds the server would otherwise find with a pass over each array (sorted: a
        # type-specialized pass over a list already in order, four times faster than min and max)
        by_end = sorted(ends_)
        first = id_list[0]
        if id_list == list(range(first, first + len(id_list))):
            # one ascending run of ids (one producer's events): the range says them all
            bounds = (first, id_list[-1], by_end[0], by_end[-1])
        else:
            by_id = sorted(id_list)
            bounds = (by_id[0], by_id[-1], by_end[0], by_end[-1])
            ids = _Int8Array(_eight_byte_array(id_list, "q", 20))
        starts = _Float8Array(_eight_byte_array(walls, "d", 701))
        ends = _Float8Array(_eight_byte_array(ends_, "d", 701))
        kinds = [d.type for d in plain]
        if kinds.count(kinds[0]) == len(kinds):  # one type (a C loop, no set of them)
            one_type = kinds[0]
        else:
            types = _TextArray(_text_array(kinds))
    if not odd:
        return (ids, starts, ends, types, one_type, *bounds)
    return (
        ids, starts, ends, types, one_type, *bounds,
        [d.msg_id for d in odd],
        [d.retry_count + 1 for d in odd],
        [d._wall or None for d in odd],
        [d._ended or None for d in odd],
        states,
        [d._failure if d._verdict in _VERDICT else None for d in odd],
        [d.__dict__.get("_result") for d in odd] if page in _with_results else None,
        [d.type for d in odd],
    )


async def ack(loop: ReceiveLoop, page: _Page, last: Message | None, conn: Any = None, failed: bool = False) -> bool:
    """Acknowledge ``page`` (what ``client.ack(page.batch_id, last=last, conn=conn)`` does) and
    append its outcomes to the consumer's outcome log in the same statement; ``failed``: some of
    its deliveries were nacked."""
    client = loop.client
    now = time.monotonic()
    if not page.deliveries or _off_until.get(loop, 0.0) > now:
        return await client.ack(page.batch_id, last=last, conn=conn)
    batch_id, last = a.ack_args(page.batch_id, last)
    outcomes = page_params(page, failed)
    tail = (batch_id, last.msg_id if last else None, last.txid if last else None)
    if len(outcomes) == 9:  # plain runs only
        sql, params = q.ACK_GROUP, (batch_id, *outcomes, *tail)
    else:
        sql, params = q.ACK_OUTCOMES, (batch_id, *outcomes[:9], batch_id, *outcomes[9:], *tail)
    try:
        async with client.connection(conn) as c, c.cursor(row_factory=tuple_row) as cur:
            for cls, dumper in _DUMPERS:
                cur.adapters.register_dumper(cls, dumper)
            # prepared as the client's other statements are: after a few runs on its own
            # connections (never through a pooler), never on a caller's
            await cur.execute(sql, params, prepare=None if conn is None else False)
            row = await cur.fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    assert row is not None
    acked, stored = row
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
    _with_results.add(d._page)


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
