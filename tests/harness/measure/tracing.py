"""Measure what OpenTelemetry tracing (pglogq.contrib.otel) costs per message.

    python -m tests.harness.measure.tracing [--dsn DSN] [--events 20000] [--page 500] [--rounds 3] [--json]

In one run, alternating untraced and traced rounds on the same backlog shape:

1. consumer drain: one thread :class:`pglogq.Consumer`, a no-op handler, a backlog of
   ``--events`` events whose headers carry a trace context (sent under a span), so every
   traced handler call extracts it, opens a CONSUMER span and ends it after the ack;
2. send: ``--sends`` single ``Client.send`` calls under a current span (traced: a PRODUCER span
   and the context written into the headers).

Traced means the SDK as in production: a ``TracerProvider`` with a ``BatchSpanProcessor`` whose
exporter drops the spans (the export itself is the exporter's cost, not pglogq's).  The result
is the median over ``--rounds`` of each, and the difference in microseconds per message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import pglogq
from pglogq import _trace
from pglogq.contrib import otel
from pglogq.dsn import resolve_dsn

QUEUE = "measure_tracing"


class _Drop(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _backlog(client: pglogq.Client, provider: TracerProvider, events: int) -> None:
    client.drop_queue(QUEUE, force=True)
    client.create_queue(QUEUE)
    client.subscribe(QUEUE, "m")
    otel.instrument(provider)
    try:
        with provider.get_tracer("measure").start_as_current_span("backlog"):
            for start in range(0, events, 1000):
                client.send_batch(QUEUE, [{"n": start + i} for i in range(min(1000, events - start))], type="noop")
    finally:
        _trace.tracer = None
    client.tick(QUEUE, force=True)


def drain(dsn: str, provider: TracerProvider, events: int, page: int, traced: bool) -> float:
    """Seconds to drain ``events`` with a no-op handler, traced or not."""
    with pglogq.Client(dsn) as client:
        _backlog(client, provider, events)
    consumer = pglogq.Consumer(dsn, QUEUE, "m", max_messages=page)
    consumer.handler()(lambda msg: None)
    consumer.client.consumer_info(QUEUE)  # open the pool
    if traced:
        otel.instrument(provider)
    try:
        t0 = time.perf_counter()
        stats = consumer.run(stop_when_idle=True)
        seconds = time.perf_counter() - t0
    finally:
        _trace.tracer = None
        consumer.close()
    assert stats.handled == events, stats
    return seconds


def sends(dsn: str, provider: TracerProvider, count: int, traced: bool) -> float:
    """Seconds for ``count`` single sends under a current span, traced or not."""
    with pglogq.Client(dsn) as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.send(QUEUE, {"warm": True})
        if traced:
            otel.instrument(provider)
        try:
            with provider.get_tracer("measure").start_as_current_span("request"):
                t0 = time.perf_counter()
                for i in range(count):
                    client.send(QUEUE, {"n": i})
                return time.perf_counter() - t0
        finally:
            _trace.tracer = None


def measure(dsn: str, events: int = 20000, page: int = 500, send_count: int = 2000, rounds: int = 3) -> dict[str, Any]:
    exporter = _Drop()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=events * 2))
    runs: dict[str, list[float]] = {"drain_off": [], "drain_on": [], "send_off": [], "send_on": []}
    for _ in range(rounds):
        for traced in (False, True):
            key = "on" if traced else "off"
            runs[f"drain_{key}"].append(drain(dsn, provider, events, page, traced))
            runs[f"send_{key}"].append(sends(dsn, provider, send_count, traced))
    provider.force_flush()
    provider.shutdown()
    with pglogq.Client(dsn) as client:
        client.drop_queue(QUEUE, force=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "events": events, "page": page, "sends": send_count, "rounds": rounds, "spans_exported": exporter.spans,
        "drain_us_per_msg_off": med["drain_off"] / events * 1e6,
        "drain_us_per_msg_on": med["drain_on"] / events * 1e6,
        "drain_overhead_us_per_msg": (med["drain_on"] - med["drain_off"]) / events * 1e6,
        "send_us_off": med["send_off"] / send_count * 1e6,
        "send_us_on": med["send_on"] / send_count * 1e6,
        "send_overhead_us": (med["send_on"] - med["send_off"]) / send_count * 1e6,
        "runs_seconds": runs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dsn")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--page", type=int, default=500)
    ap.add_argument("--sends", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    dsn = resolve_dsn(args.dsn)
    with pglogq.Client(dsn) as client:
        client.install_schema()
    r = measure(dsn, args.events, args.page, args.sends, args.rounds)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"consumer drain ({r['events']} events, page {r['page']}, median of {r['rounds']}):")
    print(f"  untraced {r['drain_us_per_msg_off']:8.1f} us/message")
    print(f"  traced   {r['drain_us_per_msg_on']:8.1f} us/message   (+{r['drain_overhead_us_per_msg']:.1f} us)")
    print(f"send ({r['sends']} single sends under a span):")
    print(f"  untraced {r['send_us_off']:8.1f} us/send")
    print(f"  traced   {r['send_us_on']:8.1f} us/send      (+{r['send_overhead_us']:.1f} us)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
