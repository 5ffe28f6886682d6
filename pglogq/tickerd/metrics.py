"""``/metrics`` (Prometheus text format) and ``/healthz`` for the ticker daemon.

The queue and consumer series are read from ``pglogq.queue_info()`` and
``pglogq.consumer_info()`` when Prometheus scrapes (one short connection per database and
scrape, 5 s statement timeout), so an unscraped daemon costs nothing.  Every series carries a
``database`` label; queue series add ``queue``, consumer series add ``queue`` and ``consumer``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pglogq.health import Finding, Thresholds, assess, ticker_engine_ok
from pglogq.tickerd import queries as q
from pglogq.tickerd.engine import Engine, State

QUEUE_GAUGES: list[tuple[str, str, int]] = [
    # (metric suffix, help, column index in queries.QUEUE_INFO)
    ("last_tick_id", "Id of the queue's latest tick.", 2),
    ("last_tick_age_seconds", "Seconds since the queue's latest tick (keep-alive ticks included).", 3),
    ("tick_lag_seconds", "Age of the oldest committed event not yet covered by a tick (0: none).", 4),
    ("events_per_second",
     "Events ticked per second over the last minute of wall-clock time (0 a minute after sends stop).", 5),
    ("pending_events", "Events sent since the latest tick (estimate).", 6),
    ("consumers", "Number of consumers.", 7),
    ("retry_depth", "Nacked events waiting for their retry.", 8),
    ("dead_letters", "Events in the dead-letter queue.", 9),
    ("delayed", "Delayed sends waiting for their time.", 10),
    ("size_bytes", "Disk size of the queue's event tables, as the catalog recorded it at their last VACUUM,"
     " ANALYZE or TRUNCATE (relpages).", 11),
    ("seconds_since_rotation", "Seconds since the event tables last rotated.", 12),
]
CONSUMER_GAUGES: list[tuple[str, str, int]] = [
    ("lag_seconds", "Lag: age in seconds of the consumer's oldest pending event, from its tick (0: none pending).",
     2),
    ("lag_events", "Unread: ticked events not yet handed to any worker of the consumer (estimate; not its lag).", 3),
    ("pending_events", "Pending: ticked events not yet acknowledged, open batches and leases included (estimate).",
     4),
    ("last_seen_age_seconds", "Seconds since the consumer or one of its workers was last seen.", 5),
    ("workers", "Cooperating workers registered.", 6),
    ("open_batches", "Batches open right now (consumer and workers).", 7),
    ("retry_depth", "The consumer's nacked events waiting for their retry.", 8),
    ("dead_letters", "The consumer's events in the dead-letter queue.", 9),
]
SHARE_GAUGES: list[tuple[str, str, int]] = [
    # a share consumer only (no series for an ordinary one): its workers' leases
    ("in_flight", "Events a share consumer's workers hold in leases, not acknowledged.", 11),
    ("oldest_in_flight_seconds", "Age of a share consumer's oldest lease holding events (0: none).", 12),
    ("expired_leases", "A share consumer's leases past their lock's expiry (or released), not taken over yet"
     " (pglogq status: lease_expired).", 13),
    ("redelivered_events", "Leased events of a share consumer delivered more than once (delivery count above 1).",
     14),
]
DELIVERY_BUCKETS: tuple[int, ...] = (1, 2, 3, 5, 10)
"""The upper bounds of pglogq_share_delivery_count's buckets (then +Inf)."""

# who: the consumer, or the transaction with its database (it may be another database of the
# server: tick snapshots are server-wide); not the ages and times, which change every scrape
_DATABASE = r'(?: in database "(?:[^"]|"")*")?'
_BLOCKER = re.compile(
    rf"^(consumer \S+|transaction of pid \d+{_DATABASE}|prepared transaction '(?:[^']|'')*'{_DATABASE})"
)


def blocked_by_label(text: str | None) -> str:
    """A stable label value for ``rotation_blocked_by`` (who, without the changing details)."""
    if not text:
        return ""
    m = _BLOCKER.match(text)
    return m.group(1) if m else text[:80]


@dataclass(frozen=True)
class _Queue:
    queue_name: str
    paused: bool
    last_tick_age: timedelta | None
    ticker_lag: timedelta | None
    rotation_blocked_by: str | None
    dead_letters: int


@dataclass(frozen=True)
class _Consumer:
    queue_name: str
    consumer_name: str
    lag: timedelta | None
    lag_events: int | None
    pending_events: int | None
    last_seen: datetime | None
    open_batches: int
    batch_open_since: datetime | None
    expired_leases: int | None = None


@dataclass(frozen=True)
class _Worker:
    queue_name: str
    consumer_name: str
    worker: str | None
    msg_id: int | None
    silent_for: timedelta


def _seconds(value: Any) -> timedelta | None:
    return None if value is None else timedelta(seconds=float(value))


def findings(queues: list[tuple[Any, ...]], consumers: list[tuple[Any, ...]], workers: list[tuple[Any, ...]],
             now: datetime, thresholds: Thresholds | None = None) -> list[Finding]:
    """The rows the collector reads, judged by :mod:`pglogq.health` with its default thresholds."""
    qs = [_Queue(r[0], bool(r[1]), _seconds(r[3]), _seconds(r[4]) if r[4] else None, r[13], int(r[9] or 0))
          for r in queues]
    cs = [_Consumer(r[0], r[1], _seconds(r[2]), r[3], r[4], None if r[5] is None else now - timedelta(seconds=r[5]),
                    int(r[7] or 0), None if r[10] is None else now - timedelta(seconds=r[10]),
                    r[13] if len(r) > 13 else None) for r in consumers]
    ws = [_Worker(r[0], r[1], r[2], None, timedelta(seconds=float(r[3] or 0))) for r in workers]
    return assess(qs, cs, ws, now=now, thresholds=thresholds)


def _num(value: Any) -> float:
    return float(value) if value is not None else float("nan")


class TickerCollector(Collector):
    """Collects the daemon's own counters and each database's queue and consumer series."""

    def __init__(self, engines: Callable[[], Sequence[Engine]], *, timeout: float = 5.0) -> None:
        self._engines = engines
        self._timeout = timeout

    def _read(self, dsn: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]],
                                       list[tuple[Any, ...]]]:
        with psycopg.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(self._timeout)),
            application_name="pglogq-ticker metrics",
        ) as conn:
            conn.execute(q.SESSION_TIMEOUTS, (f"{int(self._timeout * 1000)}ms", f"{int(self._timeout * 1000)}ms"))
            queues = conn.execute(q.QUEUE_INFO).fetchall()
            consumers = conn.execute(q.CONSUMER_INFO).fetchall()
            workers = conn.execute(q.IN_FLIGHT_SILENCE).fetchall()
            # the leases are read only when a share consumer holds some
            leases = (conn.execute(q.SHARE_LEASES).fetchall()
                      if any(r[11] for r in consumers if len(r) > 11) else [])
        return queues, consumers, workers, leases

    def collect(self) -> Iterator[Metric]:
        engines = list(self._engines())
        db = ["database"]
        up = GaugeMetricFamily("pglogq_ticker_up", "1 when connected to the database (active or standby).", labels=db)
        active = GaugeMetricFamily("pglogq_ticker_active", "1 when this process is the database's active ticker.",
                                   labels=db)
        refused = GaugeMetricFamily("pglogq_ticker_refused",
                                    "1 when the database is refused (restored into a cluster whose txids are behind).",
                                    labels=db)
        polls = CounterMetricFamily("pglogq_ticker_polls", "Calls of pglogq.ticker().", labels=db)
        ticks = CounterMetricFamily("pglogq_ticker_ticks", "Ticks written by this process.", labels=db)
        errors = CounterMetricFamily("pglogq_ticker_errors", "Errors (lost connections, failed steps).", labels=db)
        reconnects = CounterMetricFamily("pglogq_ticker_reconnects", "Reconnections to the database.", labels=db)
        maint = CounterMetricFamily("pglogq_ticker_maintenance_steps", "Maintenance steps run, by op.",
                                    labels=[*db, "op"])
        poll_age = GaugeMetricFamily("pglogq_ticker_last_poll_age_seconds",
                                     "Seconds since this process last polled pglogq.ticker().", labels=db)
        scrape_ok = GaugeMetricFamily("pglogq_scrape_ok", "1 when queue and consumer data could be read.", labels=db)
        qlabels = [*db, "queue"]
        queue_g = {name: GaugeMetricFamily(f"pglogq_queue_{name}", doc, labels=qlabels)
                   for name, doc, _ in QUEUE_GAUGES}
        paused = GaugeMetricFamily("pglogq_queue_paused", "1 when the queue is paused.", labels=qlabels)
        blocked = GaugeMetricFamily(
            "pglogq_queue_rotation_blocked",
            "1 when rotation is overdue and held back; blocked_by names the consumer, or the transaction"
            " and its database (any database of the server).",
            labels=[*qlabels, "blocked_by"])
        clabels = [*db, "queue", "consumer"]
        consumer_g = {name: GaugeMetricFamily(f"pglogq_consumer_{name}", doc, labels=clabels)
                      for name, doc, _ in CONSUMER_GAUGES}
        wlabels = [*db, "queue", "consumer", "worker"]
        silent = GaugeMetricFamily(
            "pglogq_worker_silent_seconds",
            "Seconds since a worker with events in flight last reported (heartbeat or progress); a hung or"
            " stopped worker grows it (pglogq status: worker_silent).", labels=wlabels)
        in_flight = GaugeMetricFamily("pglogq_worker_in_flight_events", "Events a worker reports as being handled.",
                                      labels=wlabels)
        share_g = {name: GaugeMetricFamily(f"pglogq_share_{name}", doc, labels=clabels)
                   for name, doc, _ in SHARE_GAUGES}
        deliveries = GaugeHistogramMetricFamily(
            "pglogq_share_delivery_count",
            "A share consumer's leases by the highest delivery count of their events (1: first delivery;"
            " more: redelivered after nacks or crashes).", labels=clabels)
        warning = GaugeMetricFamily(
            "pglogq_health_warning",
            "1 for each finding of pglogq.health (the rules of `pglogq status` and the dashboard's warnings,"
            " default thresholds); kind as in `pglogq status`.", labels=[*db, "kind", "queue", "consumer"])
        now = time.time()
        for e in engines:
            st = e.stats
            lab = [e.label]
            up.add_metric(lab, 1.0 if st.state in (State.ACTIVE, State.STANDBY) else 0.0)
            active.add_metric(lab, 1.0 if st.state == State.ACTIVE else 0.0)
            refused.add_metric(lab, 1.0 if st.state == State.REFUSED else 0.0)
            polls.add_metric(lab, st.polls)
            ticks.add_metric(lab, st.ticks)
            errors.add_metric(lab, st.errors)
            reconnects.add_metric(lab, st.reconnects)
            for op, n in sorted(st.maintenance.items()):
                maint.add_metric([*lab, op], n)
            if st.last_poll_at is not None:
                poll_age.add_metric(lab, max(0.0, now - st.last_poll_at))
            try:
                queues, consumers, workers, leases = self._read(e.dsn)
            except psycopg.Error:
                scrape_ok.add_metric(lab, 0.0)
                continue
            scrape_ok.add_metric(lab, 1.0)
            for row in queues:
                ql = [e.label, row[0]]
                for name, _, col in QUEUE_GAUGES:
                    queue_g[name].add_metric(ql, _num(row[col]))
                paused.add_metric(ql, 1.0 if row[1] else 0.0)
                blocked.add_metric([*ql, blocked_by_label(row[13])], 1.0 if row[13] else 0.0)
            for row in consumers:
                cl = [e.label, row[0], row[1]]
                for name, _, col in CONSUMER_GAUGES:
                    consumer_g[name].add_metric(cl, _num(row[col]))
                if row[11] is not None:  # a share consumer
                    for name, _, col in SHARE_GAUGES:
                        share_g[name].add_metric(cl, float(row[col] or 0))
                    _delivery_histogram(deliveries, cl, [r[2] for r in leases if (r[0], r[1]) == (row[0], row[1])])
            for row in workers:
                wl = [e.label, row[0], row[1], str(row[2] or "")]
                silent.add_metric(wl, _num(row[3]))
                in_flight.add_metric(wl, _num(row[4]))
            seen: set[tuple[str, str, str]] = set()
            for f in findings(queues, consumers, workers, datetime.now(timezone.utc)):
                key = (f.kind, f.queue, f.consumer or "")
                if key not in seen:  # two silent workers of one consumer: one series
                    seen.add(key)
                    warning.add_metric([e.label, *key], 1.0)
        yield from (up, active, refused, polls, ticks, errors, reconnects, maint, poll_age, scrape_ok)
        yield from queue_g.values()
        yield from (paused, blocked)
        yield from consumer_g.values()
        yield from share_g.values()
        yield from (deliveries, silent, in_flight, warning)


def _delivery_histogram(family: GaugeHistogramMetricFamily, labels: list[str], counts: list[int]) -> None:
    """One consumer's leases by their highest delivery count, as cumulative buckets."""
    buckets = [(str(b), float(sum(1 for c in counts if c <= b))) for b in DELIVERY_BUCKETS]
    buckets.append(("+Inf", float(len(counts))))
    family.add_metric(labels, buckets, gsum_value=float(sum(counts)))


def health(engines: Iterable[Engine]) -> tuple[bool, dict[str, Any]]:
    """Whether every database is ticked or stood by (and the active ones polled recently)."""
    now = time.time()
    dbs: dict[str, Any] = {}
    ok = True
    for e in engines:
        st = e.stats
        age = None if st.last_poll_at is None else round(now - st.last_poll_at, 3)
        good = ticker_engine_ok(st.state.value, last_poll_age=age, state_age=now - st.state_since,
                                idle_interval=e.settings.idle_interval)
        ok = ok and good
        dbs[e.label] = {"state": st.state.value, "ok": good, "detail": st.detail, "last_poll_age": age,
                        "ticks": st.ticks}
    return ok, {"status": "ok" if ok else "failing", "databases": dbs}


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class MetricsServer:
    """A small HTTP server in a thread: ``/metrics``, ``/healthz``."""

    def __init__(self, engines: Callable[[], Sequence[Engine]], host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TickerCollector(engines))
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO") or "/"
            if path == "/metrics":
                body: Iterable[bytes] = metrics_app(environ, start_response)
                return body
            if path == "/healthz":
                good, doc = health(engines())
                start_response("200 OK" if good else "503 Service Unavailable",
                               [("Content-Type", "application/json")])
                return [json.dumps(doc).encode()]
            if path == "/":
                start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"pglogq-ticker: /metrics /healthz\n"]
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found\n"]

        self._httpd = make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
        self.port = self._httpd.server_port
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="pglogq-ticker-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
