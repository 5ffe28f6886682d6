"""OpenTelemetry tracing for pglogq (the ``otel`` extra: ``pip install -e '.[otel]'`` in the checkout,
``pip install 'pglogq[otel]'`` once published).

Call :func:`instrument` once at start-up (after configuring your ``TracerProvider``); nothing is
traced before, and ``import pglogq`` never imports OpenTelemetry.  Then:

- ``send`` / ``send_batch`` (sync and async clients), **when a span is current** (a web request,
  a job), open a PRODUCER span ``send <queue>`` and write its W3C trace context
  (``traceparent``, ``tracestate``, and ``baggage`` when set: whatever the global propagator
  writes) into the event's headers.  Header keys the caller set are kept as they are.  Without a
  current span nothing is added: there is no trace to continue.
- the consumer runtime (:class:`pglogq.Consumer`, :class:`pglogq.AsyncConsumer`, ``pglogq
  worker``) opens one CONSUMER span ``process <queue>`` per handler call — one per message, or
  one per page's group of messages for a batch handler — whose parent is the context found in
  the event's headers, and makes it current while the handler runs (the handler's own spans and
  psycopg's spans nest under it).  A batch span links every message's context and takes the
  producer's context as parent only when all its messages share it.
- the span ends when the page is finished: after the ack committed (status unset: success), or
  with status ERROR when the message was nacked for a retry or dead-lettered (the span's
  ``messaging.pglogq.outcome`` says which: ``ack``, ``retry``, ``dead``, ``dropped``) or when the
  page was not acknowledged at all (the batch was taken over, abandoned or the ack failed).

A retried message gets one span per attempt, each a child of the same producer span, so the
whole story — request, send, failed attempt, retry, final ack — is one trace.

- a call of the client's ``receive`` (``Client.receive``, ``AsyncClient.receive``: how a worker of
  a share consumer takes its lease today) that returns events gets a CLIENT span ``receive
  <queue>`` from the call's start to its return, a child of the current span if any (an empty
  poll gets none; the runtime's own receive loop gets none: its handler spans say it all).  It
  carries the page's size (for a worker of a share consumer, its lease:
  ``messaging.batch.message_count`` and ``messaging.pglogq.lease.size``), the worker
  (``messaging.client.id``), the highest delivery count of its events
  (``messaging.pglogq.delivery_count.max``: 1 + failed deliveries so far) and how many were
  delivered before (``messaging.pglogq.redelivered``).

Attributes follow the OpenTelemetry messaging conventions: ``messaging.system = "pglogq"``,
``messaging.operation.type`` / ``.name`` (``send`` / ``process`` / ``receive``),
``messaging.destination.name`` (the queue), ``messaging.message.id``,
``messaging.consumer.group.name`` (the consumer), ``messaging.client.id`` (the worker label),
``messaging.batch.message_count``; pglogq's own under ``messaging.pglogq.``:
``message.retry_count``, ``message.delivery_count`` (retry_count + 1), ``message.type``,
``batch.id``, ``outcome``, and on a receive span ``lease.size``, ``delivery_count.max``,
``redelivered``.

The SQL statements themselves are not traced here: add psycopg's instrumentation
(``opentelemetry-instrumentation-psycopg``) for spans of every statement; they nest under these.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

import pglogq
from pglogq import _trace

__all__ = ["extract", "instrument", "is_instrumented", "uninstrument"]

SYSTEM = "pglogq"
_ROOT = otel_context.Context()
"""The parent of a CONSUMER span whose event carries no trace context: a new trace (not the
span that happens to be current around the consumer's run loop)."""


def _carrier(headers: Any) -> dict[str, str]:
    """The str-valued entries of an event's headers (a propagator reads nothing else)."""
    if not isinstance(headers, Mapping):
        return {}
    return {k: v for k, v in headers.items() if isinstance(k, str) and isinstance(v, str)}


def extract(headers: Mapping[str, Any] | None) -> otel_context.Context:
    """The trace context an event carries in its headers (for code that calls ``receive``
    itself): ``tracer.start_as_current_span(..., context=extract(msg.headers))``."""
    return propagate.extract(_carrier(headers), context=otel_context.Context())  # not the current one


class _Sending:
    __slots__ = ("headers", "span")

    def __init__(self, headers: Any, span: trace.Span | None) -> None:
        self.headers = headers
        self.span = span

    def sent(self, msg_ids: Sequence[int]) -> None:
        if self.span is not None and len(msg_ids) == 1:
            self.span.set_attribute("messaging.message.id", str(msg_ids[0]))


class _OtelTracer:
    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.active = True  # False after uninstrument(): no new spans, open ones still end
        # the last headers read and their context: the events of one send_batch (a page's
        # neighbours) carry the same headers, read once (one tuple: replaced atomically)
        self._last: tuple[dict[str, str], otel_context.Context] = ({}, _ROOT)

    def _context_of(self, headers: Any) -> otel_context.Context:
        """The producer's context from an event's headers, or _ROOT (a new trace) when none."""
        if not headers:
            return _ROOT
        carrier = _carrier(headers)
        last = self._last
        if carrier == last[0]:
            return last[1]
        ctx = propagate.extract(carrier, context=otel_context.Context())
        if not trace.get_current_span(ctx).get_span_context().is_valid:
            ctx = _ROOT
        self._last = (carrier, ctx)
        return ctx

    # -- producing --------------------------------------------------------------------------

    @contextmanager
    def sending(self, queue: str, headers: Any, count: int | None) -> Iterator[_Sending]:
        if not self.active or (headers is not None and not isinstance(headers, dict)) or not (
            trace.get_current_span().get_span_context().is_valid
        ):
            yield _Sending(headers, None)  # no trace to continue (or headers the client refuses)
            return
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if isinstance(queue, str):
            attributes["messaging.destination.name"] = queue
        if count is not None:
            attributes["messaging.batch.message_count"] = count
        with self.tracer.start_as_current_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes) as span:
            injected: dict[str, str] = {}
            propagate.inject(injected)
            merged = dict(headers) if headers else {}
            for key, value in injected.items():
                merged.setdefault(key, value)  # a key the caller set wins
            yield _Sending(merged, span)

    # -- consuming --------------------------------------------------------------------------

    @contextmanager
    def processing(self, consumer: Any, items: Sequence[Any], batch: bool) -> Iterator[None]:
        try:
            span = self._start(consumer, items, batch) if self.active else None
        except Exception:  # tracing never fails a handler
            span = None
        if span is None:
            yield
            return
        for d in items:
            d._span = span
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield
        except BaseException as exc:
            span.record_exception(exc)
            raise
        finally:
            otel_context.detach(token)

    def _start(self, consumer: Any, items: Sequence[Any], batch: bool) -> trace.Span:
        links: list[Link] = []
        if not batch:
            parent = self._context_of(items[0].headers)
        else:
            contexts = [trace.get_current_span(self._context_of(d.headers)).get_span_context() for d in items]
            valid = [c for c in contexts if c.is_valid]
            if valid and len(valid) == len(contexts) and all(c == valid[0] for c in valid):
                parent = trace.set_span_in_context(trace.NonRecordingSpan(valid[0]))
            else:
                parent = _ROOT  # a new trace, linked to its messages' traces
            seen: set[tuple[int, int]] = set()
            for c in valid:
                if (c.trace_id, c.span_id) not in seen:
                    seen.add((c.trace_id, c.span_id))
                    links.append(Link(c))
        first = items[0]
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": consumer.queue,
            "messaging.consumer.group.name": consumer.consumer_name,
            "messaging.client.id": consumer.label,
            "messaging.pglogq.batch.id": first.batch_id,
        }
        if batch:
            attributes["messaging.batch.message_count"] = len(items)
        else:
            attributes["messaging.message.id"] = str(first.msg_id)
            attributes["messaging.pglogq.message.retry_count"] = first.retry_count
            attributes["messaging.pglogq.message.delivery_count"] = first.retry_count + 1
            if first.type is not None:
                attributes["messaging.pglogq.message.type"] = first.type
        return self.tracer.start_span(
            f"process {consumer.queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes, links=links
        )

    def received(self, queue: str, consumer: str, worker: str | None, messages: Sequence[Any],
                 started_ns: int) -> None:
        if not self.active:
            return
        counts = [m.retry_count + 1 for m in messages]
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "receive",
            "messaging.operation.name": "receive",
            "messaging.destination.name": queue,
            "messaging.consumer.group.name": consumer,
            "messaging.batch.message_count": len(messages),
            "messaging.pglogq.batch.id": messages[0].batch_id,
            "messaging.pglogq.lease.size": len(messages),
            "messaging.pglogq.delivery_count.max": max(counts),
            "messaging.pglogq.redelivered": sum(1 for c in counts if c > 1),
        }
        if worker is not None:
            attributes["messaging.client.id"] = worker
        span = self.tracer.start_span(f"receive {queue}", kind=SpanKind.CLIENT, attributes=attributes,
                                      start_time=started_ns)
        span.end()

    def settle(self, deliveries: Sequence[Any], acked: bool) -> None:
        groups: dict[int, tuple[trace.Span, list[Any]]] = {}
        for d in deliveries:
            span = d._span
            if span is not None:
                groups.setdefault(id(span), (span, []))[1].append(d)
                d._span = None
        for span, items in groups.values():
            verdicts = {d._verdict for d in items}
            reason = next((d._failure for d in items if d._failure), None)
            if not acked:
                outcome = "dropped"
                span.set_status(Status(StatusCode.ERROR, "not acknowledged: the page comes back"))
            elif "dead" in verdicts:
                outcome = "dead"
                span.add_event("dead-lettered", {"messaging.pglogq.reason": reason or ""})
                span.set_status(Status(StatusCode.ERROR, f"dead-lettered: {reason}"))
            elif "retry" in verdicts:
                outcome = "retry"
                span.set_status(Status(StatusCode.ERROR, f"nacked for retry: {reason}"))
            else:
                outcome = "ack"
            span.set_attribute("messaging.pglogq.outcome", outcome)
            span.end()


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace ``send``, ``send_batch`` and the consumer runtime from now on, in this process.

    ``tracer_provider``: None uses the global one (``trace.set_tracer_provider``).  Calling it
    again replaces the tracer."""
    tracer = trace.get_tracer("pglogq", pglogq.__version__, tracer_provider=tracer_provider)
    _trace.tracer = _OtelTracer(tracer)


def uninstrument() -> None:
    """Stop tracing: no new spans (those already open still end when their page is finished)."""
    if isinstance(_trace.tracer, _OtelTracer):
        _trace.tracer.active = False


def is_instrumented() -> bool:
    return isinstance(_trace.tracer, _OtelTracer) and _trace.tracer.active
