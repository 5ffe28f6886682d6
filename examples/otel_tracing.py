"""OpenTelemetry: one trace from a web request, through a failed attempt and its retry, to the ack.

A request handler (a SERVER span, as your web framework's instrumentation makes) sends an
event; the consumer's first attempt fails and is nacked, the retry succeeds and is
acknowledged.  With ``pglogq.contrib.otel.instrument()`` every step is a span of the same trace:
the send is a PRODUCER span, each attempt a CONSUMER span whose parent is the send.  Run it:

    pip install -e '.[otel]' opentelemetry-sdk   # in the checkout (once published: 'pglogq[otel]')
    python examples/otel_tracing.py   # PGLOGQ_DSN, else the embedded PostgreSQL
"""

from __future__ import annotations

from datetime import timedelta

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pglogq
from pglogq.contrib import otel

# test-expects: 1 trace, 4 spans
# test-expects: POST /orders [SERVER]
# test-expects:   send otel_demo [PRODUCER]
# test-expects:     process otel_demo [CONSUMER] retry_count=0 outcome=retry ERROR
# test-expects:     process otel_demo [CONSUMER] retry_count=1 outcome=ack

QUEUE = "otel_demo"

# -- once at start-up: the SDK (here: spans kept in memory), then pglogq's instrumentation
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))  # production: BatchSpanProcessor(OTLPSpanExporter())
trace.set_tracer_provider(provider)
otel.instrument()
tracer = trace.get_tracer("shop")


def post_order(client: pglogq.Client, order_id: int) -> None:
    """The web request handler: its span is current while it sends."""
    with tracer.start_as_current_span("POST /orders", kind=trace.SpanKind.SERVER):
        client.send(QUEUE, {"order_id": order_id}, type="order.created")


def show(spans: list[ReadableSpan]) -> None:
    """Print the spans as a tree, children under their parent, in start order."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(s.parent.span_id if s.parent else None, []).append(s)

    def walk(parent: int | None, depth: int) -> None:
        for s in children.get(parent, []):
            a = s.attributes or {}
            extra = ""
            if "messaging.pglogq.outcome" in a:
                retries, outcome = a["messaging.pglogq.message.retry_count"], a["messaging.pglogq.outcome"]
                extra = f" retry_count={retries} outcome={outcome}"
            if s.status.status_code == trace.StatusCode.ERROR:
                extra += " ERROR"
            print(f"{'  ' * depth}{s.name} [{s.kind.name}]{extra}")
            walk(s.context.span_id, depth + 1)

    walk(None, 0)


def main() -> None:
    with pglogq.Client() as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "mailer")

        post_order(client, 7)

        consumer = pglogq.Consumer(client, QUEUE, "mailer", retry_policy=pglogq.RetryPolicy.fixed(timedelta(0)))

        @consumer.handler("order.created")
        def mail(msg: pglogq.Delivery) -> None:
            if msg.retry_count == 0:
                raise ConnectionError("mail server away")  # nacked: comes back for a retry

        for _ in range(3):  # the pglogq-ticker daemon ticks and brings retries back in production
            client.tick(QUEUE, force=True)
            consumer.run(stop_when_idle=True)
            client.maintain()
        client.drop_queue(QUEUE, force=True)

    spans = list(exporter.get_finished_spans())
    print(f"{len({s.context.trace_id for s in spans})} trace, {len(spans)} spans")
    show(spans)


if __name__ == "__main__":
    main()
