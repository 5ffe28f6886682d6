"""Measure the ticker: end-to-end latency, idle cost, failover time.  Anyone can rerun it::

    python -m tests.harness.measure.ticker                      # the embedded server (or PGLOGQ_DSN)
    python -m tests.harness.measure.ticker --dsn postgresql://... --rates 100,1000 --duration 20 --json out.json

It creates a scratch database on the server (``CREATEDB`` needed), installs the schema, runs
the real daemon (``python -m pglogq.tickerd``) with default settings as a subprocess, and drops
the database at the end.

* **latency**: a producer sends single events at a fixed offered rate (open loop: it never
  waits for the consumer); a consumer waits on ``LISTEN "pglogq.<queue>"`` (polling every 100 ms
  if no notification comes), then receives and acks until the batch is empty.  Latency of an
  event = when ``receive`` returned it - when its ``send`` returned (committed).  The first
  second is warm-up and not counted.
* **idle**: queues and consumers exist, nothing is sent.  Statements per second = the
  database's committed transactions per second (every ticker statement is one autocommit
  transaction; the two reads of the measurement itself are subtracted), CPU = the daemon
  process and its server backends (from ``/proc``, Linux), ticks written.
* **failover**: two daemons; SIGKILL the active one while events flow at 100/s; time until the
  other holds the lock, until it writes its first tick, and the worst event latency around it.

Functions :func:`measure_latency`, :func:`measure_idle` and :func:`measure_failover` are reusable
(the benchmark suite calls them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from pglogq.client import Client
from pglogq.dsn import resolve_dsn
from pglogq.tickerd import queries as tq
from tests.harness import child_env

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# -- helpers -----------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None if unavailable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


class DaemonProcess:
    """``python -m pglogq.tickerd`` as a subprocess with default settings."""

    def __init__(self, dsn: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pglogq.tickerd", "--dsn", dsn, "--log-level", "WARNING", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(),
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def holder_pid(conn: psycopg.Connection[Any]) -> int | None:
    """The OS pid of the process holding the database's ticker lock."""
    row = conn.execute(tq.LOCK_HOLDER, (tq.LOCK_CLASSID, tq.LOCK_OBJID)).fetchone()
    if not row or not row[1] or ":" not in row[1]:
        return None
    return int(str(row[1]).rsplit(":", 1)[1])


def wait_active(dsn: str, pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if holder_pid(conn) == pid:
                return
            time.sleep(0.01)
    raise RuntimeError(f"ticker pid {pid} did not become active within {timeout}s")


@contextmanager
def scratch_database(server_dsn: str, keep: bool = False) -> Iterator[str]:
    """A fresh database with the schema installed; dropped afterwards unless ``keep``."""
    name = f"pglogq_measure_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(server_dsn, dbname=name)
    try:
        with Client(dsn) as client:
            client.install_schema()
        yield dsn
    finally:
        if not keep:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Consumer(threading.Thread):
    """Waits for the tick notification, then receives and acks until empty; records times."""

    def __init__(self, dsn: str, queue: str, consumer: str = "c") -> None:
        super().__init__(name=f"measure consumer {queue}", daemon=True)
        self.dsn, self.queue, self.consumer = dsn, queue, consumer
        self.received: dict[int, float] = {}
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as listen, Client(self.dsn) as client:
                listen.execute(f'LISTEN "pglogq.{self.queue}"'.encode())
                while not self.stop_flag.is_set():
                    while True:
                        batch = client.receive(self.queue, self.consumer, max_messages=1000)
                        if not batch:
                            break
                        now = time.perf_counter()
                        for m in batch:
                            self.received.setdefault(m.msg_id, now)
                        batch.ack()
                    for _ in listen.notifies(timeout=0.1, stop_after=1):
                        pass
        except BaseException as exc:  # pragma: no cover - reported by the caller
            self.error = exc


def _produce(dsn: str, queue: str, rate: float, duration: float, sent: dict[int, float],
             stop: threading.Event | None = None) -> None:
    with Client(dsn) as client:
        start = time.perf_counter()
        i = 0
        while True:
            target = start + i / rate
            if target - start >= duration or (stop is not None and stop.is_set()):
                return
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            msg_id = client.send(queue, {"i": i})
            sent[msg_id] = time.perf_counter()
            i += 1


# -- latency ----------------------------------------------------------------------------------


def tick_delays(dsn: str, queue: str, ids: set[int]) -> list[float]:
    """Seconds from each event's send (its ``ev_time``: the start of the sending transaction) to
    the first tick that covers it (``tick_time``), both by the server's clock: the ticker's own
    share of the latency, whatever the consumer does.  Needs every tick kept (a consumer that
    never reads holds them)."""
    import bisect

    with psycopg.connect(dsn, autocommit=True) as conn:
        ticks = conn.execute(
            "SELECT extract(epoch FROM t.tick_time)::float8, pg_snapshot_xmin(t.tick_snapshot)::text::bigint,"
            " pg_snapshot_xmax(t.tick_snapshot)::text::bigint,"
            " ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(t.tick_snapshot) x)"
            " FROM pglogq.tick t JOIN pglogq.queue q USING (queue_id) WHERE q.queue_name = %s ORDER BY t.tick_id",
            (queue,),
        ).fetchall()
        events = conn.execute(
            "SELECT e.ev_id, e.ev_txid::text::bigint, extract(epoch FROM e.ev_time)::float8"
            " FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue WHERE q.queue_name = %s",
            (queue,),
        ).fetchall()
    xmaxes = [t[2] for t in ticks]
    out = []
    for ev_id, txid, ev_time in events:
        if ev_id not in ids:
            continue
        i = bisect.bisect_right(xmaxes, txid)
        while i < len(ticks):
            _, xmin, _xmax, xip = ticks[i]
            if txid < xmin or txid not in set(xip):
                out.append(ticks[i][0] - ev_time)
                break
            i += 1
    return out



@dataclass
class LatencyResult:
    rate: float
    duration: float
    events: int
    achieved_rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    tick_p50_ms: float
    tick_p99_ms: float
    not_received: int
    """Events the consumer had not received 30 s after the last send."""
    daemon_cpu_percent: float | None
    extra: dict[str, Any] = field(default_factory=dict)


def measure_latency(dsn: str, rate: float, duration: float = 10.0, warmup: float = 1.0,
                    daemon_args: tuple[str, ...] = (), n_producers: int | None = None) -> LatencyResult:
    """End-to-end latency at ``rate`` events/s with the daemon running (default settings).

    ``n_producers`` threads share the offered rate (default: one per 125 events/s)."""
    n_producers = n_producers or max(1, -(-int(rate) // 125))
    queue = f"lat_{int(rate)}_{int(time.time() * 1000) % 100000}"
    with Client(dsn) as client:
        client.create_queue(queue)
        client.subscribe(queue, "c")
        client.subscribe(queue, "keeper")  # never reads: every tick is kept for tick_delays()
    daemon = DaemonProcess(dsn, *daemon_args)
    consumer = Consumer(dsn, queue)
    try:
        wait_active(dsn, daemon.pid)
        consumer.start()
        sent: dict[int, float] = {}
        cpu0, t0 = _cpu_seconds(daemon.pid), time.perf_counter()
        # one producer connection cannot offer 1,000 commits/s on every disk: share the rate
        producers = [threading.Thread(target=_produce, args=(dsn, queue, rate / n_producers, duration + warmup, sent))
                     for _ in range(n_producers)]
        for p in producers:
            p.start()
            time.sleep(1 / rate)
        for p in producers:
            p.join()
        cpu1, t1 = _cpu_seconds(daemon.pid), time.perf_counter()
        deadline = time.monotonic() + 30
        while len(consumer.received) < len(sent) and time.monotonic() < deadline and consumer.error is None:
            time.sleep(0.05)
    finally:
        consumer.stop_flag.set()
        daemon.stop()
        consumer.join(5)
    if consumer.error is not None:
        raise RuntimeError(f"consumer failed: {consumer.error}") from consumer.error
    first = min(sent.values()) if sent else 0.0
    lat = [(consumer.received[i] - t) * 1000 for i, t in sent.items()
           if i in consumer.received and t - first >= warmup]
    measured = [t for t in sent.values() if t - first >= warmup]
    span = (max(measured) - min(measured)) if len(measured) > 1 else float("nan")
    cpu = None if cpu0 is None or cpu1 is None else round(100 * (cpu1 - cpu0) / (t1 - t0), 2)
    measured_ids = {i for i, t in sent.items() if t - first >= warmup}
    ticked = [d * 1000 for d in tick_delays(dsn, queue, measured_ids)]
    with Client(dsn) as client:
        client.drop_queue(queue, force=True)
    return LatencyResult(
        rate=rate, duration=duration, events=len(lat),
        achieved_rate=round(len(measured) / span, 1) if span == span and span > 0 else float("nan"),
        p50_ms=round(percentile(lat, 50), 2), p95_ms=round(percentile(lat, 95), 2),
        p99_ms=round(percentile(lat, 99), 2), max_ms=round(max(lat), 2) if lat else float("nan"),
        tick_p50_ms=round(percentile(ticked, 50), 2), tick_p99_ms=round(percentile(ticked, 99), 2),
        not_received=len([i for i in sent if i not in consumer.received]), daemon_cpu_percent=cpu,
        extra={"producers": n_producers},
    )


# -- idle cost ----------------------------------------------------------------------------------


@dataclass
class IdleResult:
    seconds: float
    queues: int
    statements_per_second: float
    ticks_written: int
    daemon_cpu_percent: float | None
    backend_cpu_percent: float | None
    daemon_rss_mb: float | None = None


def _ticker_backends(conn: psycopg.Connection[Any], pid: int) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
        (f"pglogq-ticker % %:{pid}",),
    ).fetchall()
    return [int(r[0]) for r in rows]


def measure_idle(dsn: str, seconds: float = 10.0, queues: int = 3, settle: float = 3.0) -> IdleResult:
    """What the daemon costs while nothing happens (queues with consumers, no events)."""
    with Client(dsn) as client:
        for i in range(queues):
            client.create_queue(f"idle_{i}")
            client.subscribe(f"idle_{i}", "c")
    daemon = DaemonProcess(dsn)
    try:
        wait_active(dsn, daemon.pid)
        time.sleep(settle)  # past the busy linger and the first maintenance passes
        with psycopg.connect(dsn, autocommit=True) as conn:
            backends = _ticker_backends(conn, daemon.pid)

            def snapshot() -> tuple[int, int]:
                row = conn.execute(
                    "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),"
                    # ticks written: each queue's head moves by one per tick (a count of the tick
                    # table reads every queue's partitions: out of the lock table at 1,000 queues)
                    " (SELECT coalesce(sum(tick_id), 0) FROM pglogq.tick_head)"
                ).fetchone()
                assert row is not None
                conn.execute("SELECT pg_stat_clear_snapshot()")
                return int(row[0]), int(row[1])

            x0, k0 = snapshot()
            c0 = _cpu_seconds(daemon.pid)
            b0 = [_cpu_seconds(p) for p in backends]
            t0 = time.perf_counter()
            time.sleep(seconds)
            x1, k1 = snapshot()
            c1 = _cpu_seconds(daemon.pid)
            b1 = [_cpu_seconds(p) for p in backends]
            t1 = time.perf_counter()
            rss = _rss_mb(daemon.pid)
    finally:
        daemon.stop()
    wall = t1 - t0
    own = 2  # the two snapshot statements of this measurement
    daemon_cpu = None if c0 is None or c1 is None else round(100 * (c1 - c0) / wall, 3)
    backend_cpu = None
    if backends and None not in b0 and None not in b1:
        backend_cpu = round(100 * sum((b or 0) - (a or 0) for a, b in zip(b0, b1, strict=True)) / wall, 3)
    return IdleResult(
        seconds=round(wall, 2), queues=queues, statements_per_second=round((x1 - x0 - own) / wall, 2),
        ticks_written=k1 - k0, daemon_cpu_percent=daemon_cpu, backend_cpu_percent=backend_cpu,
        daemon_rss_mb=rss,
    )


# -- failover --------------------------------------------------------------------------------


@dataclass
class FailoverResult:
    takeover_seconds: list[float]
    first_tick_seconds: list[float]
    worst_latency_ms: list[float]
    not_received: int

    @property
    def summary(self) -> dict[str, float]:
        return {
            "takeover_median_s": round(statistics.median(self.takeover_seconds), 3),
            "takeover_max_s": round(max(self.takeover_seconds), 3),
            "first_tick_median_s": round(statistics.median(self.first_tick_seconds), 3),
            "first_tick_max_s": round(max(self.first_tick_seconds), 3),
        }


def measure_failover(dsn: str, rounds: int = 3, rate: float = 100.0) -> FailoverResult:
    """SIGKILL the active daemon ``rounds`` times while events flow; time the takeover."""
    queue = "failover"
    with Client(dsn) as client:
        client.create_queue(queue)
        client.subscribe(queue, "c")
    consumer = Consumer(dsn, queue)
    consumer.start()
    sent: dict[int, float] = {}
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(dsn, queue, rate, 1e9, sent, stop), daemon=True)
    daemons = [DaemonProcess(dsn), DaemonProcess(dsn)]
    takeovers: list[float] = []
    first_ticks: list[float] = []
    worst: list[float] = []
    try:
        producer.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(rounds):
                deadline = time.monotonic() + 60
                while (active := holder_pid(conn)) not in {d.pid for d in daemons}:
                    if time.monotonic() > deadline:
                        raise RuntimeError("no daemon became active")
                    time.sleep(0.01)
                time.sleep(2.0)  # steady state, the other one standing by
                victim = next(d for d in daemons if d.pid == active)
                other = next(d for d in daemons if d.pid != active)
                t_kill = time.perf_counter()
                victim.kill()
                row = conn.execute("SELECT clock_timestamp()").fetchone()
                assert row is not None
                killed_at = row[0]
                while holder_pid(conn) != other.pid:
                    time.sleep(0.002)
                takeovers.append(time.perf_counter() - t_kill)
                while conn.execute("SELECT EXISTS (SELECT 1 FROM pglogq.tick WHERE tick_time > %s)",
                                   (killed_at,)).fetchone() != (True,):
                    time.sleep(0.002)
                first_ticks.append(time.perf_counter() - t_kill)
                time.sleep(1.0)
                window = [(consumer.received[i] - t) * 1000 for i, t in list(sent.items())
                          if i in consumer.received and t_kill - 3 <= t <= t_kill + 3]
                worst.append(round(max(window), 1) if window else float("nan"))
                daemons = [other, DaemonProcess(dsn)]
        stop.set()
        producer.join(10)
        deadline = time.monotonic() + 30
        while len(consumer.received) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        consumer.stop_flag.set()
        for d in daemons:
            d.stop()
        consumer.join(5)
    missing = len([i for i in sent if i not in consumer.received])
    return FailoverResult(takeovers, first_ticks, worst, not_received=missing)


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.measure.ticker", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="server to use (a scratch database is created); default: the DSN rule")
    ap.add_argument("--rates", default="100,1000", help="offered rates, events/s (default 100,1000)")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per rate (default 10)")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--idle-queues", type=int, default=3, help="queues (with a consumer each) of the idle run")
    ap.add_argument("--failovers", type=int, default=3, help="SIGKILL rounds (0: skip)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {"latency": [], "idle": None, "failover": None}
    with scratch_database(resolve_dsn(args.dsn), keep=args.keep) as dsn:
        for rate in [float(r) for r in args.rates.split(",") if r.strip()]:
            r = measure_latency(dsn, rate, args.duration)
            results["latency"].append(asdict(r))
            print(f"latency @ {rate:g}/s: p50 {r.p50_ms} ms  p95 {r.p95_ms} ms  p99 {r.p99_ms} ms  "
                  f"max {r.max_ms} ms; send -> tick p50 {r.tick_p50_ms} ms  p99 {r.tick_p99_ms} ms  "
                  f"({r.events} events, achieved {r.achieved_rate}/s, not received {r.not_received}, "
                  f"daemon CPU {r.daemon_cpu_percent}%)", flush=True)
        if args.idle_seconds > 0:
            idle = measure_idle(dsn, args.idle_seconds, queues=args.idle_queues)
            results["idle"] = asdict(idle)
            print(f"idle ({idle.queues} queues, {idle.seconds}s): {idle.statements_per_second} statements/s, "
                  f"{idle.ticks_written} ticks, daemon CPU {idle.daemon_cpu_percent}%, "
                  f"its backends' CPU {idle.backend_cpu_percent}%, RSS {idle.daemon_rss_mb} MB", flush=True)
        if args.failovers > 0:
            fo = measure_failover(dsn, args.failovers)
            results["failover"] = {**asdict(fo), **fo.summary}
            print(f"failover after SIGKILL ({args.failovers} rounds): lock taken over in "
                  f"{[round(x, 3) for x in fo.takeover_seconds]} s, first new tick after "
                  f"{[round(x, 3) for x in fo.first_tick_seconds]} s, worst event latency around it "
                  f"{fo.worst_latency_ms} ms, not received {fo.not_received}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
