"""Scenario 5, sustained load under a held xmin.

The shape the requirement asks for: an offered load (2,000 events/s by default, one event per
transaction, paced by ``held_producers`` producer processes), the pglogq ticker running
(in process, the daemon's engine), three consumers of the queue -- two single consumers and one
made of two cooperating workers, all four workers ``pglogq.Consumer`` threads with default
options -- and the queue's ``rotation_period`` set to 60 s (2 s in ``--quick``).  It runs twice:
once with nothing holding the xmin horizon back, then again while another session holds a
REPEATABLE READ snapshot open (it ran a query and stays idle in its transaction).

Measured per phase, after a warm-up:

- every pglogq table's size (``pg_total_relation_size``) and dead tuples (``n_dead_tup``, read
  after ``pg_stat_clear_snapshot()``), sampled every ``held_sample_seconds``; the event tables
  (everything that inherits from ``pglogq.event``) apart from the metadata (every other table of
  the schema); the metadata's growth is the largest total size of any later sample minus the
  largest total in the first 10 % of the measured window (tables emptied by TRUNCATE saw-tooth;
  never below 0: a table emptied late in the run does not hide earlier growth);
- end to end latency of every event at every consumer: handler start minus the moment the
  producer began the send's transaction, both read from ``pacing.clock()`` (CLOCK_MONOTONIC,
  one clock for every process of the machine), events paired by their sequence number; as the
  send starts before the event exists, a negative value is impossible -- one fails the run;
- consumed events/s over time, and in the measured window for the slowest consumer.

The jobs-table baseline runs the same load with one claiming worker (a jobs table has no
fan-out); PgQue runs beside pglogq when its system module is present, and PgQ 3.5 itself (the
``pgq`` extension with its daemon ``pgqd``) when the server and the machine have them.

``python -m tests.harness.bench.held_xmin --minutes 30 --out docs/benchmarks/held-xmin-30min``
is the long run: a JSON of every sample, a plot of each table's size over time and a summary.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

import pglogq
from tests.harness.bench import payload, pgq_extension
from tests.harness.bench.context import BenchContext
from tests.harness.bench.pacing import clock, wait_until
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.systems import JobsTable, Pglogq, PgQue, System, pgque_system
from tests.harness.bench.systems import jobs_table as jobs
from tests.harness.bench.ticking import ticker_running

SCENARIO = "held_xmin"
MB = 1024 * 1024
HELD = "held xmin"
FREE = "no held snapshot"

TABLES = """
WITH RECURSIVE ev(oid) AS (
        SELECT c.oid FROM pg_class c WHERE c.oid = ANY (%(roots)s::regclass[])
    UNION
        SELECT i.inhrelid FROM pg_inherits i JOIN ev ON i.inhparent = ev.oid),
    lg(oid) AS (
        SELECT c.oid FROM pg_class c WHERE c.oid = ANY (%(logs)s::regclass[])
    UNION
        SELECT i.inhrelid FROM pg_inherits i JOIN lg ON i.inhparent = lg.oid)
SELECT n.nspname || '.' || c.relname, pg_total_relation_size(c.oid),
       coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       c.oid IN (SELECT oid FROM ev) OR c.relname ~ %(event_re)s,
       c.oid IN (SELECT oid FROM lg)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
 WHERE c.relkind = 'r' AND (n.nspname = ANY (%(schemas)s) OR c.oid = ANY (%(tables)s::regclass[]))
 ORDER BY 1
"""


# -- the systems, as the scenario drives them -----------------------------------------------------


class Target:
    """One system under the held-xmin load: its queue, producer, consumers, ticker, tables."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""  # the producer's sender (see ``_sender``)
    schemas: ClassVar[tuple[str, ...]] = ()  # every table of these schemas is sampled
    tables: ClassVar[tuple[str, ...]] = ()  # and these
    event_roots: ClassVar[tuple[str, ...]] = ()  # tables (with their descendants) holding the events
    event_re: ClassVar[str] = "^$"  # or tables whose name matches
    # insert-only logs kept for a retention and emptied by TRUNCATE (pglogq's outcome log, on by
    # default for a day): data that grows with the events handled, reported apart from the
    # metadata, whose growth is what a held snapshot must not cause
    log_roots: ClassVar[tuple[str, ...]] = ()
    has_metadata: ClassVar[bool] = True
    consumer_kind: ClassVar[str] = ""

    def __init__(self, ctx: BenchContext, system: System) -> None:
        self.ctx = ctx
        self.system = system
        self.queue = ""

    def prepare(self, tag: str, rotation_seconds: int) -> None:
        raise NotImplementedError

    def conf(self) -> dict[str, Any]:
        return {"dsn": self.ctx.dsn, "queue": self.queue}

    def consumers(self) -> dict[str, list[Callable[[Sink, threading.Event, threading.Event], None]]]:
        """Consumer label -> its workers (each a thread target: sink, stop, ready)."""
        raise NotImplementedError

    def ticker(self) -> contextlib.AbstractContextManager[str]:
        return contextlib.nullcontext("no ticker")

    def finish(self) -> None:
        self.system.cleanup()


class PglogqTarget(Target):
    name = "pglogq"
    kind = "pglogq"
    schemas = ("pglogq",)
    event_roots = ("pglogq.event",)
    log_roots = ("pglogq.outcome",)
    consumer_kind = ("pglogq.Consumer threads with default options (its default page, LISTEN wake-ups, "
                     "heartbeats): two single consumers and one consumer of two cooperating workers "
                     "(worker='w1', 'w2')")

    def prepare(self, tag: str, rotation_seconds: int) -> None:
        self.queue = f"held_{tag}"
        with self.ctx.client() as c:
            c.create_queue(self.queue)
            for name in ("c1", "c2", "pair"):
                c.subscribe(self.queue, name)
            c.set_queue_config(self.queue, "rotation_period", f"{rotation_seconds} seconds")

    def consumers(self) -> dict[str, list[Callable[[Sink, threading.Event, threading.Event], None]]]:
        dsn, queue = self.ctx.dsn, self.queue

        def worker(name: str, worker: str | None) -> Callable[[Sink, threading.Event, threading.Event], None]:
            return lambda sink, stop, ready: _pglogq_worker(dsn, queue, name, worker, sink, stop, ready)

        return {"c1": [worker("c1", None)], "c2": [worker("c2", None)],
                "pair": [worker("pair", "w1"), worker("pair", "w2")]}

    def ticker(self) -> contextlib.AbstractContextManager[str]:
        return ticker_running(self.ctx.dsn, rotate_interval=1.0)


def _pglogq_worker(dsn: str, queue: str, name: str, worker: str | None, sink: Sink, stop: threading.Event,
                   ready: threading.Event) -> None:
    with pglogq.Client(dsn) as client:
        consumer = pglogq.Consumer(client, queue, name, worker=worker)

        def on_event(msg: Any) -> None:
            sink.record(int(msg.payload["seq"]), clock())

        consumer.handler()(on_event)

        def watch() -> None:
            stop.wait()
            consumer.stop()

        threading.Thread(target=watch, daemon=True).start()
        ready.set()
        consumer.run()


class JobsTarget(Target):
    name = "jobs table (SKIP LOCKED)"
    kind = "jobs"
    tables = ("public.bench_jobs",)
    event_roots = ("public.bench_jobs",)
    has_metadata = False
    consumer_kind = ("one claiming worker (claim 100 with FOR UPDATE SKIP LOCKED, complete by UPDATE, "
                     "10 ms poll): a jobs table has no fan-out, one consumer is what it offers")

    def prepare(self, tag: str, rotation_seconds: int) -> None:
        self.ctx.sql("TRUNCATE bench_jobs")
        self.queue = "bench_jobs"

    def consumers(self) -> dict[str, list[Callable[[Sink, threading.Event, threading.Event], None]]]:
        dsn = self.ctx.dsn
        return {"jobs": [lambda sink, stop, ready: _jobs_worker(dsn, sink, stop, ready)]}


def _jobs_worker(dsn: str, sink: Sink, stop: threading.Event, ready: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.set()
        while not stop.is_set():
            rows = conn.execute(jobs.CLAIM, ("held", "bench", jobs.CLAIM_BATCH)).fetchall()
            if not rows:
                time.sleep(0.01)
                continue
            now = clock()
            for _id, body in rows:
                sink.record(int(body["seq"]), now)
            conn.execute(jobs.COMPLETE, ([r[0] for r in rows],))


class PgQueTarget(Target):
    name = "PgQue"
    kind = "pgque"
    schemas = ("pgque",)
    event_re = "^event_"  # its event tables: pgque.event_<queue id>[_<n>] (inheritance, rotated)
    consumer_kind = ("three next_batch/get_batch_events/finish_batch loops woken by NOTIFY pgque_<queue> "
                     "(PgQue's cooperative consumers are experimental: the third consumer is a single one "
                     "too); " + pgque_system.Ticker.DESCRIPTION)

    def prepare(self, tag: str, rotation_seconds: int) -> None:
        assert isinstance(self.system, PgQue)
        self.queue = f"held_{tag}"
        self.system.create_queue(self.queue, ("c1", "c2", "c3"))
        self.ctx.sql("SELECT pgque.set_queue_config(%s, 'rotation_period', %s)",
                     (self.queue, f"{rotation_seconds} seconds"))

    def consumers(self) -> dict[str, list[Callable[[Sink, threading.Event, threading.Event], None]]]:
        dsn, queue = self.ctx.dsn, self.queue

        def worker(name: str) -> Callable[[Sink, threading.Event, threading.Event], None]:
            return lambda sink, stop, ready: _pgque_worker(dsn, queue, name, sink, stop, ready)

        return {name: [worker(name)] for name in ("c1", "c2", "c3")}

    def ticker(self) -> contextlib.AbstractContextManager[str]:
        assert isinstance(self.system, PgQue)
        return self.system.ticker()  # type: ignore[no-any-return]


def _pgque_worker(dsn: str, queue: str, name: str, sink: Sink, stop: threading.Event,
                  ready: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "pgque_{queue}"'.encode())
        ready.set()
        while not stop.is_set():
            row = conn.execute(pgque_system.NEXT_BATCH, (queue, name)).fetchone()
            batch_id = row[0] if row else None
            if batch_id is None:
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    pass
                continue
            for _id, data in conn.execute(pgque_system.BATCH_EVENTS, (batch_id,)).fetchall():
                sink.record(int(json.loads(data)["seq"]), clock())
            conn.execute(pgque_system.FINISH_BATCH, (batch_id,))


class PgQTarget(Target):
    """PgQ 3.5 itself (the ``pgq`` extension, Debian's ``postgresql-15-pgq3``) with its own daemon,
    ``pgqd`` (Debian's ``pgqd``): the ancestor whose metadata under a held snapshot pglogq is
    measured against.  Run when the server has the extension and the machine has pgqd."""

    name = "PgQ"
    kind = "pgq"
    schemas = ("pgq",)
    event_re = "^event_"  # its event tables: pgq.event_<queue id>[_<n>] and their template
    consumer_kind = ("three next_batch/get_batch_events/finish_batch loops polling every 100 ms (PgQ sends no "
                     "NOTIFY; its cooperative consumers are the separate pgq_coop, not installed: the third "
                     "consumer is a single one too); pgqd with its defaults but ticker_period 1 s")

    def prepare(self, tag: str, rotation_seconds: int) -> None:
        self.queue = f"held_{tag}"
        self.ctx.sql("SELECT pgq.create_queue(%s)", (self.queue,))
        for name in ("c1", "c2", "c3"):
            self.ctx.sql("SELECT pgq.register_consumer(%s, %s)", (self.queue, name))
        self.ctx.sql("SELECT pgq.set_queue_config(%s, 'rotation_period', %s)",
                     (self.queue, f"{rotation_seconds} seconds"))

    def consumers(self) -> dict[str, list[Callable[[Sink, threading.Event, threading.Event], None]]]:
        dsn, queue = self.ctx.dsn, self.queue

        def worker(name: str) -> Callable[[Sink, threading.Event, threading.Event], None]:
            return lambda sink, stop, ready: _pgq_worker(dsn, queue, name, sink, stop, ready)

        return {name: [worker(name)] for name in ("c1", "c2", "c3")}

    def ticker(self) -> contextlib.AbstractContextManager[str]:
        return _pgqd_running(self.ctx.dsn)

    def finish(self) -> None:
        for name in ("c1", "c2", "c3"):
            with contextlib.suppress(psycopg.Error):
                self.ctx.sql("SELECT pgq.unregister_consumer(%s, %s)", (self.queue, name))
        with contextlib.suppress(psycopg.Error):
            self.ctx.sql("SELECT pgq.drop_queue(%s)", (self.queue,))


def pgq_available(ctx: BenchContext) -> str | None:
    """Why PgQ cannot run here, or None."""
    import shutil

    if shutil.which("pgqd") is None:
        return "no pgqd on this machine (Debian package pgqd)"
    with ctx.connect() as conn:
        if not pgq_extension.install(conn):
            return "the server has no pgq extension (Debian package postgresql-NN-pgq3)"
    return None


@contextlib.contextmanager
def _pgqd_running(dsn: str) -> Iterator[str]:
    """pgqd on the bench database: ticks every second, maintenance (rotation steps, retries,
    vacuum) at its default periods."""
    import subprocess
    import tempfile

    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = conninfo_to_dict(dsn)
    db = str(parts.pop("dbname"))
    with tempfile.TemporaryDirectory(prefix="pgqd_") as tmp:
        ini = Path(tmp) / "pgqd.ini"
        ini.write_text(f"[pgqd]\nbase_connstr = {make_conninfo('', **parts)}\ninitial_database = {db}\n"
                       f"database_list = {db}\nlogfile = {tmp}/pgqd.log\npidfile = {tmp}/pgqd.pid\n"
                       "ticker_period = 1\n", encoding="utf-8")
        proc = subprocess.Popen(["pgqd", str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            yield "pgqd (PgQ's daemon): ticker_period 1 s, maint_period and retry_period at their defaults"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log = (Path(tmp) / "pgqd.log").read_text(encoding="utf-8", errors="replace")
            if proc.returncode not in (0, -15) and "Got SIGTERM" not in log:  # its fast exit is status 1
                raise RuntimeError(f"pgqd exited with {proc.returncode}: {log[-2000:]}")


def _pgq_worker(dsn: str, queue: str, name: str, sink: Sink, stop: threading.Event,
                ready: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.set()
        while not stop.is_set():
            row = conn.execute("SELECT pgq.next_batch(%s, %s)", (queue, name)).fetchone()
            batch_id = row[0] if row else None
            if batch_id is None:
                stop.wait(0.1)
                continue
            for (data,) in conn.execute("SELECT ev_data FROM pgq.get_batch_events(%s)", (batch_id,)).fetchall():
                sink.record(int(json.loads(data)["seq"]), clock())
            conn.execute("SELECT pgq.finish_batch(%s)", (batch_id,))


def targets_for(ctx: BenchContext, systems: list[System]) -> tuple[list[Target], list[System]]:
    """The systems the scenario drives, and those it skips."""
    out: list[Target] = []
    skipped: list[System] = []
    for system in systems:
        if isinstance(system, Pglogq):
            out.append(PglogqTarget(ctx, system))
            if pgq_available(ctx) is None:
                out.append(PgQTarget(ctx, system))
        elif isinstance(system, PgQue):
            out.append(PgQueTarget(ctx, system))
        elif isinstance(system, JobsTable):
            out.append(JobsTarget(ctx, system))
        else:
            skipped.append(system)
    return out, skipped


# -- producers (run in the spawned worker processes) ----------------------------------------------


def _sender(kind: str, conf: dict[str, Any], conn: psycopg.Connection[Any]) -> Callable[[int], object]:
    if kind == "pglogq":
        client = pglogq.Client(conf["dsn"])
        queue = conf["queue"]
        return lambda seq: client.send(queue, payload.make(seq), conn=conn)
    if kind == "pgque":
        queue = conf["queue"]
        return lambda seq: conn.execute(pgque_system.SEND, (queue, Jsonb(payload.make(seq))))
    if kind == "jobs":
        return lambda seq: conn.execute(jobs.INSERT_ONE, (Jsonb(payload.make(seq)),))
    if kind == "pgq":
        queue = conf["queue"]
        return lambda seq: conn.execute("SELECT pgq.insert_event(%s, 'bench', %s)",
                                        (queue, json.dumps(payload.make(seq))))
    raise ValueError(kind)


def produce(kind: str, conf: dict[str, Any], idx: int, producers: int, rate: float, seconds: float,
            start_at: float) -> tuple[int, bytes, int]:
    """Producer ``idx`` of ``producers``: sends sequence numbers idx, idx + producers, ... of the
    ``rate * seconds`` events, each in its own transaction (autocommit), each at its due time
    t0 + seq / rate (late ones go at once: nothing is batched).  It stops at t0 + seconds even when
    it is behind (then the offered load was not reached, and the figures say so).  Returns (idx,
    the monotonic time each send started, as array('d') bytes, how many of its events were due
    but not sent)."""
    total = int(rate * seconds)
    times = array("d")
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:
        send = _sender(kind, conf, conn)
        send(-1 - idx)  # warm the connection and plans (the consumers skip negative numbers)
        wait_until(start_at)
        t0 = clock()
        stop = t0 + seconds
        mine = range(idx, total, producers)
        for seq in mine:
            due = t0 + seq / rate
            now = clock()
            if now < due:
                time.sleep(due - now)
                now = clock()
            if now >= stop:
                break
            times.append(now)
            send(seq)
    return idx, times.tobytes(), len(mine) - len(times)


# -- consumers' records ---------------------------------------------------------------------------


class Sink:
    """When each event was first handled by one consumer (all of its workers): monotonic time
    per sequence number, NaN until then."""

    def __init__(self, n: int) -> None:
        self.t = array("d", [math.nan]) * n
        self.count = 0
        self.again = 0  # deliveries of an event already handled (redeliveries)
        self.lock = threading.Lock()

    def record(self, seq: int, when: float) -> None:
        if seq < 0:
            return
        with self.lock:
            if math.isnan(self.t[seq]):
                self.t[seq] = when
                self.count += 1
            else:
                self.again += 1


# -- table sampling -------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float  # seconds since the producers started
    tables: dict[str, tuple[int, int, int]]  # name -> (bytes, n_dead_tup, n_live_tup)


@dataclass
class Sampler:
    """Reads every table of a target every ``every`` seconds in a thread."""

    dsn: str
    target: Target
    every: float
    t0: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    events: set[str] = field(default_factory=set)
    logs: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conn: psycopg.Connection[Any] | None = None

    def read(self) -> None:
        if self._conn is None:
            self._conn = psycopg.connect(self.dsn, autocommit=True)
        params = {"roots": list(self.target.event_roots), "event_re": self.target.event_re,
                  "logs": list(self.target.log_roots),
                  "schemas": list(self.target.schemas), "tables": list(self.target.tables)}
        self._conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = self._conn.execute(TABLES, params).fetchall()
        now = clock() - self.t0
        self.samples.append(Sample(round(now, 3), {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}))
        self.events.update(r[0] for r in rows if r[4])
        self.logs.update(r[0] for r in rows if r[5] and not r[4])

    def start(self, t0: float) -> None:
        self.t0 = t0

        def loop() -> None:
            nxt = clock()
            while not self._stop.wait(max(0.0, nxt - clock())):
                self.read()
                nxt += self.every

        self._thread = threading.Thread(target=loop, daemon=True, name="held-xmin-sampler")
        self._thread.start()

    def stop(self, settle: float = 1.2) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        time.sleep(settle)  # backends publish their table statistics about once a second
        self.read()
        if self._conn is not None:
            self._conn.close()

    def total(self, s: Sample, *, events: bool, column: int = 0) -> int:
        return sum(v[column] for k, v in s.tables.items() if (k in self.events) == events)


class HeldSnapshot:
    """A session in REPEATABLE READ that ran a query and then just stays open."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn)
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM bench_app_order")
        self.pid = self.conn.info.backend_pid
        self.xmin = self.backend_xmin(dsn)

    def backend_xmin(self, dsn: str) -> str | None:
        with psycopg.connect(dsn, autocommit=True) as other:
            row = other.execute("SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = %s",
                                (self.pid,)).fetchone()
        return row[0] if row else None

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


# -- one phase ------------------------------------------------------------------------------------


@dataclass
class Phase:
    system: str
    held: bool
    seconds: float
    warmup: float
    rate: int
    sent: int
    sent_in_window: int
    unsent: int  # due but not sent: the producers could not keep the offered rate
    rotations: int
    held_xmin: str | None
    consumers: dict[str, dict[str, Any]]
    latency_ms: dict[str, float]
    negative_latencies: int
    samples: list[Sample]
    events: list[str]
    throughput: dict[str, list[float]]  # consumer -> events/s per bucket
    bucket: float
    has_metadata: bool
    how: dict[str, str] = field(default_factory=dict)  # what ticked and what consumed
    logs: list[str] = field(default_factory=list)  # the insert-only log tables (Target.log_roots)

    @property
    def label(self) -> str:
        return f"{self.system} ({HELD if self.held else FREE})"

    def after_warmup(self) -> Sample:
        return next((s for s in self.samples if s.t >= self.warmup), self.samples[-1])

    def meta(self, s: Sample, column: int = 0) -> int:
        return sum(v[column] for k, v in s.tables.items() if k not in self.events and k not in self.logs)

    def log(self, s: Sample, column: int = 0) -> int:
        return sum(v[column] for k, v in s.tables.items() if k in self.logs)

    def event(self, s: Sample, column: int = 0) -> int:
        return sum(v[column] for k, v in s.tables.items() if k in self.events)

    def baseline(self) -> list[Sample]:
        """The samples of the first 10 % of the measured window (at least the first one after the
        warm-up): tables emptied by TRUNCATE saw-tooth, so the baseline is their largest total
        there, not whatever point of a tooth one sample happened to hit."""
        base = self.after_warmup()
        return [x for x in self.samples if base.t <= x.t <= base.t + 0.1 * self.seconds] or [base]

    @property
    def growth_mb(self) -> float:
        """How far the metadata grew: the largest total of any sample after the baseline window
        minus the largest total within it (never below 0: a table emptied late in the run does
        not hide growth before it)."""
        first = self.baseline()
        later = [x for x in self.samples if x.t > first[-1].t] or [first[-1]]
        return max(0.0, (max(self.meta(x) for x in later) - max(self.meta(x) for x in first)) / MB)

    @property
    def net_growth_mb(self) -> float:
        """The last sample's metadata total minus the first after the warm-up (may be negative)."""
        return (self.meta(self.samples[-1]) - self.meta(self.after_warmup())) / MB

    @property
    def slowest(self) -> float:
        return float(min(c["events_per_s"] for c in self.consumers.values()))

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system, "held": self.held, "seconds": self.seconds, "warmup": self.warmup,
            "rate": self.rate, "sent": self.sent, "sent_in_window": self.sent_in_window, "unsent": self.unsent,
            "rotations": self.rotations, "held_xmin": self.held_xmin, "consumers": self.consumers,
            "latency_ms": self.latency_ms, "negative_latencies": self.negative_latencies, "how": self.how,
            "metadata_growth_mb": round(self.growth_mb, 4) if self.has_metadata else None,
            "metadata_net_growth_mb": round(self.net_growth_mb, 4) if self.has_metadata else None,
            "event_tables": self.events, "bucket_seconds": self.bucket, "throughput": self.throughput,
            "samples": [{"t": s.t, "tables": {k: list(v) for k, v in s.tables.items()}} for s in self.samples],
        }


def run_phase(ctx: BenchContext, target: Target, *, held: bool, seconds: float) -> Phase:
    s = ctx.settings
    tag = "held" if held else "free"
    rate, warmup, nprod = s.held_rate, s.held_warmup_seconds, s.held_producers
    total = int(rate * (warmup + seconds))
    target.prepare(tag, s.held_rotation_seconds)
    sampler = Sampler(ctx.dsn, target, s.held_sample_seconds)
    # Every phase starts from compact tables: what earlier work left (dead tuples, free space that
    # new rows could fill unseen) is not this phase's.  Nothing else runs at this point.
    sampler.read()
    with ctx.connect() as conn:
        names = [n.split(".", 1) for n in sampler.samples[-1].tables]
        conn.execute(("VACUUM (FULL) " + ", ".join(f'"{sch}"."{rel}"' for sch, rel in names)).encode())
    sampler.samples.clear()
    pool = ctx.pool()
    snap = HeldSnapshot(ctx.dsn) if held else None
    rotations: list[int] = []
    try:
        with target.ticker() as ticker_how:
            stop = threading.Event()
            sinks: dict[str, Sink] = {}
            threads: list[threading.Thread] = []
            for label, workers in target.consumers().items():
                sinks[label] = Sink(total)
                for w in workers:
                    ready = threading.Event()
                    th = threading.Thread(target=w, args=(sinks[label], stop, ready), daemon=True,
                                          name=f"held-{label}")
                    th.start()
                    threads.append(th)
                    ready.wait(10)
            start_at = time.time() + (0.5 if s.quick else 1.0)
            t0 = clock() + (start_at - time.time())
            sampler.start(t0)
            futures = [pool.submit(produce, target.kind, target.conf(), i, nprod, float(rate), warmup + seconds,
                                   start_at) for i in range(nprod)]
            while not all(f.done() for f in futures):
                _note_rotation(ctx, target, rotations)
                time.sleep(0.5)
            parts = [f.result() for f in futures]
            sent = array("d", [math.nan]) * total
            for idx, raw, _unsent in parts:
                times = array("d")
                times.frombytes(raw)
                for k, x in enumerate(times):
                    sent[idx + k * nprod] = x
            unsent = sum(p[2] for p in parts)
            n_sent = total - unsent
            grace_until = clock() + (3.0 if s.quick else 15.0)
            while clock() < grace_until and any(k.count < n_sent for k in sinks.values()):
                _note_rotation(ctx, target, rotations)
                time.sleep(0.1)
            end = clock()
            stop.set()
            for th in threads:
                th.join(30)
            sampler.stop()
            _note_rotation(ctx, target, rotations)
        held_xmin = None
        if snap is not None:
            still = snap.backend_xmin(ctx.dsn)
            if still != snap.xmin:
                raise RuntimeError(f"the held snapshot's xmin moved ({snap.xmin} -> {still}): not a held run")
            held_xmin = snap.xmin
    finally:
        if snap is not None:
            snap.close()
    target.finish()

    # figures: consumers in the measured window [warmup, warmup + seconds] (seconds since t0)
    lo, hi = t0 + warmup, t0 + warmup + seconds
    first = int(rate * warmup)  # the first event sent in the window
    consumers: dict[str, dict[str, Any]] = {}
    lat: list[float] = []
    negative = 0
    b = s.held_bucket_seconds
    nb = max(1, math.ceil((warmup + seconds) / b))
    throughput: dict[str, list[float]] = {}
    for label, sink in sinks.items():
        handled = [x for x in sink.t if not math.isnan(x)]
        in_window = sum(1 for x in handled if lo <= x < hi)
        buckets = [0] * nb
        for x in handled:
            k = int((x - t0) // b)
            if 0 <= k < nb:
                buckets[k] += 1
        throughput[label] = [round(c / b, 1) for c in buckets]
        missing = 0
        for seq in range(first, total):
            st, ht = sent[seq], sink.t[seq]
            if math.isnan(st):
                continue
            if math.isnan(ht):  # not handled before the phase ended: the latency it had reached
                missing += 1
                lat.append((end - st) * 1000)
                continue
            d = (ht - st) * 1000
            if d < 0:
                negative += 1
            lat.append(d)
        consumers[label] = {"handled": sink.count, "handled_in_window": in_window,
                            "events_per_s": in_window / seconds, "not_handled": missing,
                            "redelivered": sink.again, "workers": len(target.consumers()[label])}
    lat.sort()
    latency = {f"p{p}": _pct(lat, p) for p in (50, 95, 99)}
    latency["max"] = lat[-1] if lat else math.nan
    in_window = sum(1 for x in sent if lo <= x < hi)
    phase = Phase(target.name, held, seconds, warmup, rate, n_sent, in_window, unsent,
                  max(0, len(rotations) - 1), held_xmin, consumers, latency, negative,
                  sampler.samples, sorted(sampler.events), throughput, b, target.has_metadata)
    phase.how = {"ticker": ticker_how, "consumers": target.consumer_kind}
    phase.logs = sorted(sampler.logs)
    if negative:
        raise RuntimeError(f"{phase.label}: {negative} negative end-to-end latencies: a clock or pairing error")
    return phase


def _pct(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    return values[max(0, min(len(values) - 1, math.ceil(p / 100 * len(values)) - 1))]


def _note_rotation(ctx: BenchContext, target: Target, rotations: list[int]) -> None:
    if isinstance(target, PglogqTarget):
        query = "SELECT cur_table FROM pglogq.queue WHERE queue_name = %s"
    elif isinstance(target, PgQueTarget):
        query = "SELECT queue_cur_table FROM pgque.queue WHERE queue_name = %s"
    else:
        return
    row = ctx.sql(query, (target.queue,))
    if row and (not rotations or rotations[-1] != row[0][0]):
        rotations.append(row[0][0])


# -- the benchmark's scenario ---------------------------------------------------------------------


def run(ctx: BenchContext, systems: list[System]) -> list[Phase]:
    s = ctx.settings
    ctx.results.note(SCENARIO, f"offered load {s.held_rate:,} events/s, one event per transaction, from "
                               f"{s.held_producers} producer processes; {s.held_warmup_seconds:.0f} s warm-up, "
                               f"then {s.held_seconds:.0f} s measured per phase; rotation_period "
                               f"{s.held_rotation_seconds} s; tables sampled every {s.held_sample_seconds:g} s")
    ctx.results.note(SCENARIO, "latency = handler start - start of the producer's send (before its "
                               "transaction began), both pacing.clock() (CLOCK_MONOTONIC, one clock for the "
                               "machine); events not handled when the phase ended count with the latency "
                               "they had reached")
    ctx.results.note(SCENARIO, "metadata = every table of the system's schema other than its event tables "
                               "and its outcome log (pglogq.outcome: insert-only, kept for history_retention, "
                               "emptied by TRUNCATE; its size is reported apart); "
                               "growth = the largest total size (pg_total_relation_size) of any later sample "
                               "minus the largest total in the first 10 % of the measured window (tables "
                               "emptied by TRUNCATE saw-tooth)")
    targets, skipped = targets_for(ctx, systems)
    for system in skipped:
        ctx.results.skip(SCENARIO, system.name, "not run under a held xmin: the scenario compares pglogq "
                         "with PgQue (when present) and the table-queue design (the jobs-table baseline); "
                         "PGQueuer and Procrastinate are such table queues too, Redis and RabbitMQ have "
                         "no xmin")
    phases: list[Phase] = []
    for target in targets:
        ctx.results.note(SCENARIO, f"{target.name} consumers: {target.consumer_kind}")
        pair = [run_phase(ctx, target, held=False, seconds=s.held_seconds),
                run_phase(ctx, target, held=True, seconds=s.held_seconds)]
        for p in pair:
            record(ctx, p)
        compare(ctx, pair[0], pair[1])
        phases += pair
    return phases


def record(ctx: BenchContext, p: Phase) -> None:
    r = ctx.results
    last = p.samples[-1]
    extra = {k: v for k, v in p.to_json().items() if k not in ("samples", "throughput")}
    extra["tables_at_end"] = {k: {"bytes": v[0], "n_dead_tup": v[1], "n_live_tup": v[2]}
                              for k, v in last.tables.items()}
    n = len(p.consumers)
    r.add(Measure(SCENARIO, f"consumed events/s at {p.rate:,}/s offered, slowest of {n} consumer(s)", p.label,
                  p.slowest, "events/s", extra=extra))
    for q in ("p50", "p99"):
        r.add(Measure(SCENARIO, f"end to end {q}", p.label, p.latency_ms[q], "ms", higher_is_better=False))
    if p.has_metadata:
        r.add(Measure(SCENARIO, "metadata growth after warm-up", p.label, p.growth_mb, "MB",
                      higher_is_better=False))
        r.add(Measure(SCENARIO, "metadata size at end", p.label, p.meta(last) / MB, "MB", higher_is_better=False))
        r.add(Measure(SCENARIO, "dead tuples at end, metadata tables", p.label, p.meta(last, 1), "tuples",
                      higher_is_better=False))
    r.add(Measure(SCENARIO, "dead tuples at end, event tables", p.label, p.event(last, 1), "tuples",
                  higher_is_better=False))
    r.add(Measure(SCENARIO, "size at end, event tables", p.label, p.event(last) / MB, "MB",
                  higher_is_better=False))
    if p.logs:
        r.add(Measure(SCENARIO, "size at end, outcome log", p.label, p.log(last) / MB, "MB",
                      higher_is_better=False))
        r.add(Measure(SCENARIO, "dead tuples at end, outcome log", p.label, p.log(last, 1), "tuples",
                      higher_is_better=False))
    xs = [p.bucket * (i + 0.5) - p.warmup for i in range(len(next(iter(p.throughput.values()))))]
    slowest = [min(v[i] for v in p.throughput.values()) for i in range(len(xs))]
    r.series.append(Series(SCENARIO, p.label, xs, slowest, "seconds after the warm-up",
                           "events/s handled (slowest consumer)"))
    if p.has_metadata:
        r.series.append(Series("held_xmin_meta", p.label, [x.t - p.warmup for x in p.samples],
                               [p.meta(x) / MB for x in p.samples], "seconds after the warm-up",
                               "metadata tables, MB (total)"))
        r.series.append(Series("held_xmin_dead", p.label, [x.t - p.warmup for x in p.samples],
                               [float(p.meta(x, 1)) for x in p.samples], "seconds after the warm-up",
                               "dead tuples, metadata tables"))
    r.add(Measure(SCENARIO, f"sent events/s (offered {p.rate:,}/s)", p.label, p.sent_in_window / p.seconds,
                  "events/s"))
    if p.unsent:
        r.note(SCENARIO, f"{p.label}: the producers could not keep the offered rate: {p.unsent:,} events were "
                         "due but not sent when the phase ended")
    missing = {k: v["not_handled"] for k, v in p.consumers.items() if v["not_handled"]}
    if missing:
        r.note(SCENARIO, f"{p.label}: events of the window not handled when the phase ended: {missing}")


def compare(ctx: BenchContext, free: Phase, held: Phase) -> None:
    if free.slowest:
        ctx.results.add(Measure(SCENARIO, "throughput held / without", free.system, held.slowest / free.slowest, "x"))
    if free.latency_ms["p99"]:
        ctx.results.add(Measure(SCENARIO, "p99 held / without", free.system,
                                held.latency_ms["p99"] / free.latency_ms["p99"], "x", higher_is_better=False))


# -- the long run ---------------------------------------------------------------------------------


def plot(phases: list[Phase], path: Path) -> Path | None:
    """Per system: each table's size over time under the held snapshot (metadata tables, event
    tables), and events/s handled by the slowest consumer in both phases."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    systems = list(dict.fromkeys(p.system for p in phases))
    fig, axes = plt.subplots(len(systems), 3, figsize=(17, 4.6 * len(systems)), squeeze=False)
    for row, name in zip(axes, systems, strict=True):
        held = next(p for p in phases if p.system == name and p.held)
        free = next((p for p in phases if p.system == name and not p.held), None)
        ts = [x.t / 60 for x in held.samples]
        names = sorted({k for x in held.samples for k in x.tables})
        for ax, events, title in ((row[0], False, "metadata tables"), (row[1], True, "event tables")):
            ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i) for i in range(20)])
            small = 0
            for k in names:
                if (k in held.events) != events:
                    continue
                ys = [x.tables.get(k, (0, 0, 0))[0] / MB for x in held.samples]
                if max(ys, default=0) < 0.1 and max(ys, default=0) - min(ys, default=0) < 0.02:
                    small += 1  # a small table that does not grow: not drawn, counted in the title
                    continue
                ax.plot(ts, ys, label=k.split(".", 1)[-1], linewidth=1.2)
            if not events:
                ax.plot(ts, [held.meta(x) / MB for x in held.samples], label="total", color="black",
                        linewidth=2)
                if free is not None:
                    ax.plot([x.t / 60 for x in free.samples], [free.meta(x) / MB for x in free.samples],
                            label="total, no held snapshot", color="grey", linestyle="--")
            ax.axvline(held.warmup / 60, color="grey", linewidth=0.6)
            ax.set_title(f"{name}: {title}, held snapshot" + (f" ({small} under 0.1 MB not drawn)" if small else ""),
                         fontsize=9)
            ax.set_xlabel("minutes")
            ax.set_ylabel("MB (pg_total_relation_size)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, ncol=2)
        ax = row[2]
        for p in (free, held):
            if p is None:
                continue
            xs = [p.bucket * (i + 0.5) / 60 for i in range(len(next(iter(p.throughput.values()))))]
            ax.plot(xs, [min(v[i] for v in p.throughput.values()) for i in range(len(xs))], label=p.label)
        ax.set_title(f"{name}: events/s handled (slowest consumer)")
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summary(phases: list[Phase], meta: dict[str, Any]) -> str:
    lines = [f"# Held snapshot, {meta['held_minutes']:g} minutes ({meta['started_at']})", "",
             f"Offered load {meta['rate']:,} events/s (one event per transaction, {meta['producers']} producer "
             f"processes), rotation_period {meta['rotation_seconds']} s, tables sampled every "
             f"{meta['sample_seconds']:g} s; the held phase ran {meta['held_minutes']:g} min after a "
             f"{meta['warmup_seconds']:g} s warm-up, the run without a held snapshot "
             f"{meta['unheld_minutes']:g} min. Server: {meta['postgresql']}; load average "
             f"{meta['load_start']} at the start, {meta['load_end']} at the end. Command: "
             f"`{meta['command']}`.", "",
             "| system | phase | sent, events/s | slowest consumer, events/s | p50 ms | p99 ms | metadata growth, MB | "
             "metadata at end, MB | dead tuples at end, metadata | dead tuples at end, event tables | rotations |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in phases:
        last = p.samples[-1]
        g = f"{p.growth_mb:.3f}" if p.has_metadata else ""
        lines.append(f"| {p.system} | {HELD if p.held else FREE} | {p.sent_in_window / p.seconds:,.0f} | "
                     f"{p.slowest:,.0f} | {p.latency_ms['p50']:.1f} | "
                     f"{p.latency_ms['p99']:.1f} | {g} | {p.meta(last) / MB:.2f} | {p.meta(last, 1):,} | "
                     f"{p.event(last, 1):,} | {p.rotations} |")
    lines.append("")
    for name in dict.fromkeys(p.system for p in phases):
        free = next((p for p in phases if p.system == name and not p.held), None)
        held = next(p for p in phases if p.system == name and p.held)
        if free is None:
            continue
        t = held.slowest / free.slowest if free.slowest else math.nan
        q = held.latency_ms["p99"] / free.latency_ms["p99"] if free.latency_ms["p99"] else math.nan
        lines.append(f"- **{name}**: throughput held / without {t:.3f} (target >= 0.95), p99 held / without "
                     f"{q:.2f} (target <= 1.5)" + (f", metadata growth {held.growth_mb:.3f} MB (target < 1)"
                                                     if held.has_metadata else "")
                     + f", dead tuples in event tables at the end {held.event(held.samples[-1], 1):,} (target 0).")
    lines += ["", "Each table's size over time: [held-xmin.png](held-xmin.png); every sample: "
                  "[held-xmin.json](held-xmin.json).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import click

    @click.command()
    @click.option("--dsn", help="PostgreSQL server (default: $PGLOGQ_DSN, else the embedded one).")
    @click.option("--minutes", type=float, default=30.0, show_default=True, help="The held phase.")
    @click.option("--unheld-minutes", type=float, default=5.0, show_default=True,
                  help="The phase without a held snapshot (the comparison).")
    @click.option("--rate", type=int, default=2000, show_default=True, help="Offered events/s.")
    @click.option("--rotation-seconds", type=int, default=60, show_default=True)
    @click.option("--sample-seconds", type=float, default=10.0, show_default=True)
    @click.option("--warmup-seconds", type=float, default=30.0, show_default=True)
    @click.option("--systems", default="pglogq,pgq,pgque", show_default=True,
                  help="Of pglogq, pgq, pgque, jobs (the jobs table grows by GBs in 30 minutes).")
    # no default: a short run left with the default once wrote over the committed 30-minute reading
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
                  help="Where the summary, samples and plot go (e.g. docs/benchmarks/held-xmin-30min).")
    def command(dsn: str | None, minutes: float, unheld_minutes: float, rate: int, rotation_seconds: int,
                sample_seconds: float, warmup_seconds: float, systems: str, out: Path) -> None:
        """The long held-snapshot run (the no-bloat target): JSON of every sample, plot, summary."""
        import sys
        from dataclasses import replace

        from pglogq.dsn import resolve_dsn
        from tests.harness.bench import machine
        from tests.harness.bench.context import bench_database
        from tests.harness.bench.settings import FULL

        wanted = [x.strip() for x in systems.split(",") if x.strip()]
        settings = replace(FULL, clients=(1,), held_rate=rate, held_rotation_seconds=rotation_seconds,
                           held_sample_seconds=sample_seconds, held_warmup_seconds=warmup_seconds,
                           held_bucket_seconds=sample_seconds)
        admin = resolve_dsn(dsn)
        started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        out.mkdir(parents=True, exist_ok=True)
        phases: list[Phase] = []
        with bench_database(admin) as bench_dsn:
            ctx = BenchContext(admin_dsn=admin, dsn=bench_dsn, settings=settings)
            info = machine.describe(bench_dsn)
            made: list[System] = []
            try:
                for target in _standalone_targets(ctx, wanted, made):
                    click.echo(f"{target.name}: {unheld_minutes:g} min without a held snapshot")
                    phases.append(run_phase(ctx, target, held=False, seconds=unheld_minutes * 60))
                    click.echo(f"{target.name}: {minutes:g} min with a held snapshot")
                    phases.append(run_phase(ctx, target, held=True, seconds=minutes * 60))
            except BaseException:
                ctx.close(interrupted=True)
                raise
            finally:
                for system in made:
                    with contextlib.suppress(Exception):
                        system.teardown()
                ctx.close()
        meta = {"started_at": started, "held_minutes": minutes, "unheld_minutes": unheld_minutes, "rate": rate,
                "producers": settings.held_producers, "rotation_seconds": rotation_seconds,
                "sample_seconds": sample_seconds, "warmup_seconds": warmup_seconds,
                "postgresql": info.get("postgresql"), "machine": info.get("machine"),
                "load_start": info.get("machine", {}).get("load_average_at_start"),
                "load_end": machine.load(),
                "command": "python -m tests.harness.bench.held_xmin " + " ".join(sys.argv[1:])}
        (out / "held-xmin.json").write_text(json.dumps({"meta": meta, "phases": [p.to_json() for p in phases]},
                                                       indent=1, default=str) + "\n", encoding="utf-8")
        plot(phases, out / "held-xmin.png")
        (out / "README.md").write_text(summary(phases, meta), encoding="utf-8")
        click.echo(summary(phases, meta))
        click.echo(f"wrote {out}")

    command.main(args=argv, prog_name="python -m tests.harness.bench.held_xmin")


def _standalone_targets(ctx: BenchContext, wanted: list[str], made: list[System]) -> Iterator[Target]:
    for name in wanted:
        system: System
        if name == "pglogq":
            system = Pglogq(ctx)
            system.setup()
            made.append(system)
            yield PglogqTarget(ctx, system)
        elif name == "jobs":
            system = JobsTable(ctx)
            system.setup()
            made.append(system)
            yield JobsTarget(ctx, system)
        elif name == "pgq":
            system = Pglogq(ctx)  # PgQ needs no system of the bench's: its target makes its queue
            why = pgq_available(ctx)
            if why is not None:
                print(f"PgQ skipped: {why}")
                continue
            yield PgQTarget(ctx, system)
        elif name == "pgque":
            system = PgQue(ctx)
            why = system.unavailable()
            if why is not None:
                print(f"PgQue skipped: {why}")
                continue
            system.setup()
            made.append(system)
            yield PgQueTarget(ctx, system)
        else:
            raise SystemExit(f"unknown system {name!r} (pglogq, pgq, pgque, jobs)")


if __name__ == "__main__":
    main()
