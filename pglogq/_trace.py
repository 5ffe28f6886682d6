"""Where the client and the consumer runtime call tracing, with no tracing library imported.

``tracer`` is None until an integration installs one (``pglogq.contrib.otel.instrument()``);
then ``send``/``send_batch`` go through :meth:`Tracer.sending`, every handler call of the consumer
runtime through :meth:`Tracer.processing` and :meth:`Tracer.settle`, and a page the client's
``receive`` returns (not the runtime's receive loop) through :meth:`Tracer.received`.  With no tracer
each hook is one attribute test: the client and runtime cost nothing more.  (The runtime
checks ``tracer`` when it prepares a page's handler calls: a tracer installed meanwhile traces
from the next page on.)
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol


class Sending(Protocol):
    """What ``send`` uses while a producer span is open: the headers to store, and the ids."""

    headers: Any

    def sent(self, msg_ids: Sequence[int]) -> None: ...


class Tracer(Protocol):
    def sending(self, queue: str, headers: Any, count: int | None) -> AbstractContextManager[Sending]:
        """Around one ``send`` (``count`` None) or ``send_batch`` (``count`` events)."""
        ...

    def processing(self, consumer: Any, items: Sequence[Any], batch: bool) -> AbstractContextManager[None]:
        """Around one handler call of the consumer runtime (``items``: its deliveries)."""
        ...

    def settle(self, deliveries: Sequence[Any], acked: bool) -> None:
        """The page is finished: ``acked`` when its ack committed (each delivery's ``_verdict``
        says 'ack', 'retry' or 'dead'), False when it was dropped unacknowledged."""
        ...

    def received(self, queue: str, consumer: str, worker: str | None, messages: Sequence[Any],
                 started_ns: int) -> None:
        """A call of the client's ``receive`` returned ``messages`` (never empty; for a worker of a
        share consumer, its lease), having started at ``started_ns`` (``time.time_ns()``)."""
        ...


tracer: Tracer | None = None


class _Untraced:
    __slots__ = ("headers",)

    def __init__(self, headers: Any) -> None:
        self.headers = headers

    def sent(self, msg_ids: Sequence[int]) -> None:
        pass

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def sending(queue: str, headers: Any, count: int | None = None) -> AbstractContextManager[Sending]:
    t = tracer
    return _Untraced(headers) if t is None else t.sending(queue, headers, count)


def processing(consumer: Any, items: Sequence[Any], batch: bool) -> AbstractContextManager[None]:
    t = tracer
    return nullcontext() if t is None else t.processing(consumer, items, batch)


def settle(deliveries: Sequence[Any], acked: bool) -> None:
    t = tracer
    if t is not None:
        t.settle(deliveries, acked)
