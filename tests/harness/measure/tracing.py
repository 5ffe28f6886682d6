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
is the median over ``--rounds`` of each, in microseconds per message, by the wall clock and by
the CPU time of the process (all its threads: the consumer's, and the span processor's export
thread, flushed before the clock stops) — the CPU figure is what tracing adds to a worker,
and it is less disturbed by other load on the machine than the wall clock.
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
from opentelemetry.trace import SpanKind

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


def drain(dsn: str, provider: TracerProvider, events: int, page: int, traced: bool) -> tuple[float, float]:
    """Seconds (wall clock, and CPU of this process) to drain ``events`` with a no-op handler,
    traced or not."""
    with pglogq.Client(dsn) as client:
        _backlog(client, provider, events)
    consumer = pglogq.Consumer(dsn, QUEUE, "m", max_messages=page)
    consumer.handler()(lambda msg: None)
    consumer.client.consumer_info(QUEUE)  # open the pool
    if traced:
        otel.instrument(provider)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        stats = consumer.run(stop_when_idle=True)
        if traced:
            provider.force_flush()  # the spans' export is part of the cost
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        _trace.tracer = None
        consumer.close()
    assert stats.handled == events, stats
    return seconds, cpu


def sends(dsn: str, provider: TracerProvider, count: int, traced: bool) -> tuple[float, float]:
    """Seconds (wall, CPU) for ``count`` single sends under a current span, traced or not."""
    with pglogq.Client(dsn) as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.send(QUEUE, {"warm": True})
        if traced:
            otel.instrument(provider)
        try:
            with provider.get_tracer("measure").start_as_current_span("request"):
                t0, c0 = time.perf_counter(), time.process_time()
                for i in range(count):
                    client.send(QUEUE, {"n": i})
                if traced:
                    provider.force_flush()
                return time.perf_counter() - t0, time.process_time() - c0
        finally:
            _trace.tracer = None


def bare_span(provider: TracerProvider, count: int) -> float:
    """CPU seconds for ``count`` spans made and ended with the OpenTelemetry SDK alone, with the
    attributes of a CONSUMER span: the floor of what any tracing of one message costs."""
    tracer = provider.get_tracer("measure")
    attributes: dict[str, Any] = {
        "messaging.system": "pglogq", "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": QUEUE, "messaging.consumer.group.name": "m", "messaging.client.id": "w",
        "messaging.pglogq.batch.id": 1, "messaging.message.id": "1", "messaging.pglogq.message.retry_count": 0,
        "messaging.pglogq.message.type": "noop",
    }
    c0 = time.process_time()
    for _ in range(count):
        span = tracer.start_span(f"process {QUEUE}", kind=SpanKind.CONSUMER, attributes=attributes)
        span.set_attribute("messaging.pglogq.outcome", "ack")
        span.end()
    provider.force_flush()
    return time.process_time() - c0


def measure(dsn: str, events: int = 20000, page: int = 500, send_count: int = 2000, rounds: int = 3) -> dict[str, Any]:
    exporter = _Drop()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=events * 2))
    runs: dict[str, list[tuple[float, float]]] = {"drain_off": [], "drain_on": [], "send_off": [], "send_on": []}
    for _ in range(rounds):
        for traced in (False, True):
            key = "on" if traced else "off"
            runs[f"drain_{key}"].append(drain(dsn, provider, events, page, traced))
            runs[f"send_{key}"].append(sends(dsn, provider, send_count, traced))
    bare = statistics.median(bare_span(provider, events) for _ in range(rounds))
    provider.shutdown()
    with pglogq.Client(dsn) as client:
        client.drop_queue(QUEUE, force=True)

    def per(key: str, n: int, which: int) -> float:
        return statistics.median(r[which] for r in runs[key]) / n * 1e6

    out: dict[str, Any] = {"events": events, "page": page, "sends": send_count, "rounds": rounds,
                           "spans_exported": exporter.spans}
    for what, n in (("drain", events), ("send", send_count)):
        for which, clock in ((0, "wall"), (1, "cpu")):
            off, on = per(f"{what}_off", n, which), per(f"{what}_on", n, which)
            out[f"{what}_{clock}_us_off"], out[f"{what}_{clock}_us_on"] = off, on
            out[f"{what}_{clock}_us_overhead"] = on - off
    out["sdk_span_cpu_us"] = bare / events * 1e6
    out["runs_seconds"] = runs
    return out


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
    print(f"consumer drain ({r['events']} events, page {r['page']}), single sends ({r['sends']}); "
          f"median of {r['rounds']} rounds; microseconds per message:")
    print(f"{'':18}{'untraced':>10}{'traced':>10}{'overhead':>10}")
    for what in ("drain", "send"):
        for clock in ("wall", "cpu"):
            off, on = r[f"{what}_{clock}_us_off"], r[f"{what}_{clock}_us_on"]
            print(f"{what + ' (' + clock + ')':18}{off:10.1f}{on:10.1f}{on - off:+10.1f}")
    print(f"the SDK alone, one such span made and ended: {r['sdk_span_cpu_us']:.1f} us CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
