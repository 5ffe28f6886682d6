"""OpenTelemetry tracing (pglogq.contrib.otel) with the real SDK and its in-memory exporter.

The main test follows one trace from an HTTP request (a real HTTP server in a thread, the
request carrying the caller's traceparent) through ``send``, a failed attempt that is nacked,
the retry, to the final ack: every span in one trace, parented as the messaging conventions say.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from psycopg.conninfo import conninfo_to_dict

import pglogq
from pglogq import _trace
from pglogq.contrib import otel
from tests.support.maintenance import pump_and_tick

NO_DELAY = pglogq.RetryPolicy.fixed(timedelta(0))


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    otel.instrument(provider)
    yield provider
    otel.uninstrument()
    _trace.tracer = None
    provider.shutdown()


def exporter_of(provider: TracerProvider) -> InMemorySpanExporter:
    proc = provider._active_span_processor._span_processors[0]  # the one added above
    assert isinstance(proc, SimpleSpanProcessor)
    exp = proc.span_exporter
    assert isinstance(exp, InMemorySpanExporter)
    return exp


def spans(provider: TracerProvider, name: str | None = None) -> list[ReadableSpan]:
    return [s for s in exporter_of(provider).get_finished_spans() if name is None or s.name == name]


def setup(client: pglogq.Client, max_retries: int = 3) -> None:
    client.create_queue("orders")
    client.subscribe("orders", "mailer")
    client.set_queue_config("orders", "max_retries", max_retries)


def consume_until_idle(consumer: pglogq.Consumer, client: pglogq.Client, rounds: int = 6) -> None:
    """Tick and drain, then bring due retries back, a few times (a ticker daemon does this)."""
    for _ in range(rounds):
        pump_and_tick(client, "orders")
        consumer.run(stop_when_idle=True)


class _Shop(http.server.BaseHTTPRequestHandler):
    """POST /orders: a web request handler that places an order by sending an event."""

    client: pglogq.Client
    tracer: trace.Tracer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parent = propagate.extract({k.lower(): v for k, v in self.headers.items()})
        with self.tracer.start_as_current_span("POST /orders", context=parent, kind=SpanKind.SERVER):
            msg_id = self.client.send("orders", body, type="order.created")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(str(msg_id).encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_one_trace_from_web_request_through_retry_to_ack(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    tracer = provider.get_tracer("test")
    handler = type("Shop", (_Shop,), {"client": client, "tracer": tracer})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tracer.start_as_current_span("place order", kind=SpanKind.CLIENT) as caller:
            headers = {"Content-Type": "application/json"}
            propagate.inject(headers)
            req = urllib.request.Request(
                f"http://127.0.0.1:{server.server_port}/orders", data=b'{"order": 7}', headers=headers, method="POST"
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                msg_id = int(resp.read())
    finally:
        server.shutdown()
        server.server_close()
    trace_id = caller.get_span_context().trace_id

    attempts: list[int] = []
    handler_spans: list[trace.SpanContext] = []
    consumer = pglogq.Consumer(client, "orders", "mailer", retry_policy=NO_DELAY)

    @consumer.handler("order.created")
    def mail(msg: pglogq.Delivery) -> None:
        attempts.append(msg.retry_count)
        handler_spans.append(trace.get_current_span().get_span_context())
        assert msg.headers is not None and "traceparent" in msg.headers
        if msg.retry_count == 0:
            raise ConnectionError("smtp server away")

    consume_until_idle(consumer, client)
    assert attempts == [0, 1]

    [server_span] = spans(provider, "POST /orders")
    [send] = spans(provider, "send orders")
    process = spans(provider, "process orders")
    assert len(process) == 2
    everything = spans(provider)
    assert {s.context.trace_id for s in everything} == {trace_id}, "not one trace"
    assert server_span.parent is not None and server_span.parent.span_id == caller.get_span_context().span_id
    assert send.kind == SpanKind.PRODUCER and send.parent is not None
    assert send.parent.span_id == server_span.context.span_id
    assert send.attributes is not None
    assert dict(send.attributes) == {
        "messaging.system": "pglogq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "orders",
        "messaging.message.id": str(msg_id),
    }
    failed, acked = sorted(process, key=lambda s: s.start_time or 0)
    for span, retry_count in ((failed, 0), (acked, 1)):
        assert span.kind == SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        attrs = dict(span.attributes or {})
        assert attrs["messaging.system"] == "pglogq"
        assert attrs["messaging.destination.name"] == "orders"
        assert attrs["messaging.consumer.group.name"] == "mailer"
        assert attrs["messaging.message.id"] == str(msg_id)
        assert attrs["messaging.pglogq.message.retry_count"] == retry_count
        assert attrs["messaging.pglogq.message.delivery_count"] == retry_count + 1
        assert attrs["messaging.pglogq.message.type"] == "order.created"
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description is not None and "smtp server away" in failed.status.description
    assert dict(failed.attributes or {})["messaging.pglogq.outcome"] == "retry"
    assert [e.name for e in failed.events] == ["exception"]
    assert acked.status.status_code == StatusCode.UNSET
    assert dict(acked.attributes or {})["messaging.pglogq.outcome"] == "ack"
    # the handler ran inside its CONSUMER span (its own spans and psycopg's nest under it)
    assert [c.span_id for c in handler_spans] == [failed.context.span_id, acked.context.span_id]


def test_dead_letter_marks_the_span(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client, max_retries=1)
    with provider.get_tracer("test").start_as_current_span("job"):
        client.send("orders", {"n": 1})
    consumer = pglogq.Consumer(client, "orders", "mailer", retry_policy=NO_DELAY)

    @consumer.handler()
    def fail(msg: pglogq.Delivery) -> None:
        raise ValueError("bad order")

    consume_until_idle(consumer, client)
    assert len(client.dlq_inspect("orders")) == 1
    outcomes = [(dict(s.attributes or {})["messaging.pglogq.outcome"], s.status.status_code)
                for s in sorted(spans(provider, "process orders"), key=lambda s: s.start_time or 0)]
    assert outcomes == [("retry", StatusCode.ERROR), ("dead", StatusCode.ERROR)]
    dead = spans(provider, "process orders")[-1]
    assert "dead-lettered" in [e.name for e in dead.events]


def test_batch_handler_one_span_per_page(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("request a"):
        client.send_batch("orders", [{"n": 1}, {"n": 2}])
    with tracer.start_as_current_span("request b"):
        client.send("orders", {"n": 3})
    [send_a, send_b] = sorted(spans(provider, "send orders"), key=lambda s: s.start_time or 0)
    assert dict(send_a.attributes or {})["messaging.batch.message_count"] == 2
    assert "messaging.message.id" not in dict(send_a.attributes or {})
    consumer = pglogq.Consumer(client, "orders", "mailer")
    seen: list[int] = []

    @consumer.batch_handler()
    def many(msgs: list[pglogq.Delivery]) -> None:
        seen.extend(m.payload["n"] for m in msgs)

    consume_until_idle(consumer, client, rounds=1)
    assert seen == [1, 2, 3]
    [page] = spans(provider, "process orders")
    attrs = dict(page.attributes or {})
    assert attrs["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in attrs
    # two producers: a new trace, linked to both
    assert page.parent is None
    assert {link.context.span_id for link in page.links} == {send_a.context.span_id, send_b.context.span_id}


def test_batch_of_one_producer_is_its_child(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    with provider.get_tracer("test").start_as_current_span("import"):
        client.send_batch("orders", [{"n": 1}, {"n": 2}])
    [send] = spans(provider, "send orders")
    consumer = pglogq.Consumer(client, "orders", "mailer")
    consumer.batch_handler()(lambda msgs: None)
    consume_until_idle(consumer, client, rounds=1)
    [page] = spans(provider, "process orders")
    assert page.parent is not None and page.parent.span_id == send.context.span_id
    assert page.context.trace_id == send.context.trace_id


def test_no_current_span_adds_nothing(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    client.send("orders", {"n": 1}, headers={"k": "v"})
    client.send("orders", {"n": 2})
    assert spans(provider) == []
    client.tick("orders", force=True)
    got = client.receive("orders", "mailer")
    assert [m.headers for m in got] == [{"k": "v"}, None]


def test_callers_headers_are_kept_and_not_mutated(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    mine = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"}
    original = dict(mine)
    with provider.get_tracer("test").start_as_current_span("job"):
        client.send("orders", {"n": 1}, headers=mine)
        client.send("orders", {"n": 2}, headers={"tenant": "acme"})
    assert mine == original
    client.tick("orders", force=True)
    first, second = client.receive("orders", "mailer")
    assert first.headers == original  # the caller's traceparent wins
    assert second.headers is not None and second.headers["tenant"] == "acme"
    [_, send2] = sorted(spans(provider, "send orders"), key=lambda s: s.start_time or 0)
    assert second.headers["traceparent"].split("-")[2] == format(send2.context.span_id, "016x")


def test_bad_headers_fail_as_without_tracing(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    with provider.get_tracer("test").start_as_current_span("job"), pytest.raises(pglogq.InvalidPayload):
        client.send("orders", {"n": 1}, headers={"x": float("nan")})
    with provider.get_tracer("test").start_as_current_span("job"), pytest.raises(pglogq.UnknownQueue):
        client.send("nope", {"n": 1})
    [_, failed] = sorted(spans(provider, "send nope") + spans(provider, "send orders"), key=lambda s: s.start_time or 0)
    assert failed.status.status_code == StatusCode.ERROR


def test_garbage_trace_headers_do_not_fail_the_handler(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    client.send("orders", {"n": 1}, headers={"traceparent": 12, "tracestate": ["x"]})
    client.send("orders", {"n": 2}, headers={"traceparent": "00-zz-yy-01"})
    consumer = pglogq.Consumer(client, "orders", "mailer")
    done: list[int] = []
    consumer.handler()(lambda m: done.append(m.payload["n"]))
    consume_until_idle(consumer, client, rounds=1)
    assert done == [1, 2]
    assert [s.parent for s in spans(provider, "process orders")] == [None, None]


def test_async_client_and_consumer(provider: TracerProvider, dsn: str) -> None:
    async def main() -> tuple[int, list[int]]:
        async with pglogq.AsyncClient(dsn) as client:
            await client.create_queue("orders")
            await client.subscribe("orders", "mailer")
            with provider.get_tracer("test").start_as_current_span("request") as root:
                await client.send("orders", {"n": 1})
            await client.tick("orders", force=True)
            consumer = pglogq.AsyncConsumer(client, "orders", "mailer")
            inside: list[int] = []

            @consumer.handler()
            async def handle(msg: pglogq.AsyncDelivery) -> None:
                await asyncio.sleep(0)
                inside.append(trace.get_current_span().get_span_context().span_id)

            await consumer.run(stop_when_idle=True)
            return root.get_span_context().trace_id, inside

    trace_id, inside = asyncio.run(main())
    [process] = spans(provider, "process orders")
    assert process.context.trace_id == trace_id
    assert inside == [process.context.span_id]


def test_uninstrument_stops_new_spans(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    otel.uninstrument()
    assert not otel.is_instrumented()
    with provider.get_tracer("test").start_as_current_span("job"):
        client.send("orders", {"n": 1})
    assert spans(provider, "send orders") == []
    client.tick("orders", force=True)
    [m] = client.receive("orders", "mailer")
    assert m.headers is None
    assert otel.extract(m.headers) is not None


def test_untraced_event_starts_a_new_trace_inside_a_span(provider: TracerProvider, dsn: str) -> None:
    """An event without trace context: its CONSUMER span is a root, not a child of whatever span
    is current around the consumer's run (a long-lived 'worker' span would swallow every trace).
    AsyncConsumer: its handlers run in the context of the run loop."""

    async def main() -> None:
        async with pglogq.AsyncClient(dsn) as client:
            await client.create_queue("orders")
            await client.subscribe("orders", "mailer")
            await client.subscribe("orders", "auditor")
            await client.send("orders", {"n": 1})
            await client.send("orders", {"n": 2}, headers={"tenant": "acme"})
            await client.tick("orders", force=True)
            one = pglogq.AsyncConsumer(client, "orders", "mailer")
            many = pglogq.AsyncConsumer(client, "orders", "auditor")

            @one.handler()
            async def each(m: pglogq.AsyncDelivery) -> None:
                pass

            @many.batch_handler()
            async def all_of_them(ms: list[pglogq.AsyncDelivery]) -> None:
                pass

            with provider.get_tracer("test").start_as_current_span("worker main"):
                await one.run(stop_when_idle=True)
                await many.run(stop_when_idle=True)

    asyncio.run(main())
    process = spans(provider, "process orders")
    assert len(process) == 3
    assert [s.parent for s in process] == [None, None, None]


def test_sqlalchemy_send_carries_the_trace(provider: TracerProvider, client: pglogq.Client, dsn: str) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from pglogq.contrib.sqlalchemy import send_batch

    setup(client)
    engine = create_engine("postgresql+psycopg://", connect_args=conninfo_to_dict(dsn))
    try:
        with provider.get_tracer("test").start_as_current_span("job"), Session(engine) as s, s.begin():
            send_batch(s, "orders", [{"n": 1}, {"n": 2}])
    finally:
        engine.dispose()
    [send] = spans(provider, "send orders")
    client.tick("orders", force=True)
    got = client.receive("orders", "mailer")
    assert {m.headers["traceparent"].split("-")[2] for m in got if m.headers} == {format(send.context.span_id, "016x")}


def test_transactional_consumer_ends_spans_after_the_commit(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    with client.connection() as conn:
        conn.execute("CREATE TABLE mails (n int)")
    with provider.get_tracer("test").start_as_current_span("request"):
        client.send("orders", {"n": 1})
        client.send("orders", {"n": 2})
    consumer = pglogq.Consumer(client, "orders", "mailer", transactional=True, retry_policy=NO_DELAY)

    @consumer.handler()
    def mail(msg: pglogq.Delivery) -> None:
        assert msg.conn is not None
        msg.conn.execute("INSERT INTO mails VALUES (%s)", (msg.payload["n"],))
        if msg.payload["n"] == 2 and msg.retry_count == 0:
            raise RuntimeError("once")

    consume_until_idle(consumer, client, rounds=3)
    outcomes = sorted((dict(s.attributes or {})["messaging.pglogq.message.retry_count"],
                       dict(s.attributes or {})["messaging.pglogq.outcome"]) for s in spans(provider, "process orders"))
    assert outcomes == [(0, "ack"), (0, "retry"), (1, "ack")]
    with client.connection() as conn:
        assert sorted(r[0] for r in conn.execute("SELECT n FROM mails")) == [1, 2]


def test_abandoned_page_ends_its_span_as_dropped(provider: TracerProvider, client: pglogq.Client) -> None:
    setup(client)
    with provider.get_tracer("test").start_as_current_span("request"):
        client.send_batch("orders", [{"n": 1}, {"n": 2}])
    consumer = pglogq.Consumer(client, "orders", "mailer")
    calls: list[int] = []

    @consumer.handler()
    def mail(msg: pglogq.Delivery) -> None:
        calls.append(msg.payload["n"])
        if len(calls) == 1:
            consumer.stop(abandon=True)  # the page is not acknowledged: all of it comes back

    client.tick("orders", force=True)
    consumer.run()
    [dropped] = spans(provider, "process orders")
    assert dict(dropped.attributes or {})["messaging.pglogq.outcome"] == "dropped"
    assert dropped.status.status_code == StatusCode.ERROR
    consumer.run(stop_when_idle=True)
    assert calls == [1, 1, 2]
    outcomes = [dict(s.attributes or {})["messaging.pglogq.outcome"] for s in spans(provider, "process orders")]
    assert outcomes == ["dropped", "ack", "ack"]


def test_receive_of_a_lease_gets_a_span_with_its_size_and_delivery_count(
        provider: TracerProvider, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("jobs")
    client.subscribe("jobs", "senders", share=True)
    ids = [client.send("jobs", {"n": n}) for n in range(3)]
    client.tick("jobs", force=True)
    mine = client.receive("jobs", "senders", worker="idle", max_messages=1)
    assert [m.msg_id for m in mine] == ids[:1]
    first = spans(provider, "receive jobs")
    assert len(first) == 1 and first[0].kind == SpanKind.CLIENT
    dead = client.receive("jobs", "senders", worker="dead", max_messages=2, start_first=2)
    assert [m.msg_id for m in dead] == ids[1:]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = 'dead'")
    again = client.receive("jobs", "senders", worker="idle")  # the same page until acknowledged: a span too
    assert [m.msg_id for m in again] == ids[:1] and again.ack()
    with provider.get_tracer("test").start_as_current_span("poll") as poll:
        taken = client.receive("jobs", "senders", worker="w2", max_messages=10)
    assert [(m.msg_id, m.retry_count) for m in taken] == [(ids[1], 1)]  # halved after the crash
    assert client.receive("jobs", "senders", worker="nobody", max_messages=10).messages == []  # no span
    got = sorted(spans(provider, "receive jobs"), key=lambda s: s.start_time or 0)
    assert len(got) == 4
    attrs = dict(got[-1].attributes or {})
    assert attrs == {
        "messaging.system": "pglogq",
        "messaging.operation.type": "receive",
        "messaging.operation.name": "receive",
        "messaging.destination.name": "jobs",
        "messaging.consumer.group.name": "senders",
        "messaging.client.id": "w2",
        "messaging.batch.message_count": 1,
        "messaging.pglogq.batch.id": taken.id,
        "messaging.pglogq.lease.size": 1,
        "messaging.pglogq.delivery_count.max": 2,
        "messaging.pglogq.redelivered": 1,
    }
    assert got[-1].parent is not None and got[-1].parent.span_id == poll.get_span_context().span_id
    assert dict(got[1].attributes or {})["messaging.pglogq.lease.size"] == 2
    assert dict(got[1].attributes or {})["messaging.pglogq.delivery_count.max"] == 1
    assert (got[-1].start_time or 0) <= (got[-1].end_time or 0)
