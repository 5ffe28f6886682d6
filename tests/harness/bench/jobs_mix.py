"""Scenario: a long job, then many short ones, two workers (the seeds' job workload, seed 000's
shape).  Two workers run (``WARM_S`` after their start, idle) when one report of
``jobs_long_seconds`` is sent, then, 50 ms later, ``jobs_short`` mails in one transaction; they
handle them one at a time with the ticker running.  Measured: the time from the mails' send to
the start of each mail's handler, p50 and p99, over many trials (a worker's start-up, its
connections and the first statements of its sessions, is not in it: a fleet of workers runs
before the jobs come):

- pglogq, share consumer: two ``pglogq.Consumer(..., worker="auto")``, default options, on a
  subscription made with ``share=True`` (the runtime's handler slots: adaptive leases from one
  event, the unstarted tail of a lease ceded after ``cede_after``);
- pglogq, cooperating workers of an ordinary consumer (what a port from a jobs table used before
  share consumers): the same two consumers on an ordinary subscription;
- the ``SKIP LOCKED`` jobs table: each worker claims one row at a time.

A trial's long job ends when its time is up or, earlier, once every mail was started (a system
that lets the mails pass it measures the mails alone, so the trials stay short)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg

import pglogq
from tests.harness.bench.context import BenchContext
from tests.harness.bench.results import Measure
from tests.harness.bench.stats import percentile
from tests.harness.bench.systems import Pglogq, System
from tests.harness.bench.systems.jobs_table import DDL
from tests.harness.bench.ticking import ticker_running

SCENARIO = "jobs_mix"
WORKERS = 2
GAP_S = 0.05
WARM_S = 1.0


class _Trial:
    """What one trial shares between its workers: when the mails were sent, when each started."""

    def __init__(self, mails: int, long_s: float) -> None:
        self.mails = mails
        self.long_s = long_s
        self.sent_at = 0.0
        self.sent = threading.Event()
        self.starts: list[float] = []
        self.lock = threading.Lock()
        self.all_started = threading.Event()
        self.stop = threading.Event()

    def handle(self, kind: str) -> None:
        if kind == "report":
            self.all_started.wait(self.long_s)  # the long job: its time, or until the mails are all started
            return
        self.sent.wait()
        now = time.monotonic()
        with self.lock:
            self.starts.append(now - self.sent_at)
            if len(self.starts) >= self.mails:
                self.all_started.set()

    def waits(self) -> list[float]:
        return sorted(self.starts)


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(s, Pglogq) for s in systems):
        return
    s = ctx.settings
    ctx.results.note(SCENARIO, f"one job of {s.jobs_long_seconds:g} s, then {GAP_S * 1000:g} ms later "
                               f"{s.jobs_short:,} short jobs in one transaction, {WORKERS} workers (started "
                               f"{WARM_S:g} s before) handling one job at a time, ticker running; time from "
                               "the short jobs' send to the start of each one's handler")
    plans: list[tuple[str, int, Callable[[str, str, _Trial], None]]] = [
        ("pglogq (share consumer)", s.jobs_trials, _share_trial),
        ("pglogq (cooperating workers)", s.jobs_baseline_trials, _coop_trial),
        ("jobs table (SKIP LOCKED, claim 1)", s.jobs_baseline_trials, _table_trial),
    ]
    with ticker_running(ctx.dsn):
        for name, trials, fn in plans:
            waits: list[float] = []
            for t in range(trials):
                trial = _Trial(s.jobs_short, s.jobs_long_seconds)
                fn(ctx.dsn, f"jobs_mix_{t}_{abs(hash(name)) % 10_000}", trial)
                waits += trial.waits()
            if not waits:
                continue
            waits.sort()
            extra = {"trials": trials, "jobs": len(waits), "max_s": round(max(waits), 3)}
            for p in (50, 99):
                ctx.results.add(Measure(SCENARIO, f"short job: send to handler start, p{p}", name,
                                        percentile(waits, p) * 1000, "ms", higher_is_better=False, extra=extra))


def _send_pglogq(dsn: str, queue: str, trial: _Trial) -> None:
    with pglogq.Client(dsn) as client:
        client.send(queue, {"report": "yearly"}, type="report")
        time.sleep(GAP_S)
        trial.sent_at = time.monotonic()
        client.send_batch(queue, [{"n": i} for i in range(trial.mails)], type="mail")
        trial.sent.set()


def _share_trial(dsn: str, queue: str, trial: _Trial) -> None:
    with pglogq.Client(dsn) as client:
        client.create_queue(queue)
        client.subscribe(queue, "workers", share=True)
    _consumer_workers(dsn, queue, trial)


def _consumer_workers(dsn: str, queue: str, trial: _Trial) -> None:
    """Two worker processes' consumers (as threads here), default options, one handler slot each:
    the subscription says which runtime runs (share slots, or cooperating workers)."""

    def worker(_name: str) -> None:
        with pglogq.Client(dsn) as client:
            consumer = pglogq.Consumer(client, queue, "workers", worker="auto")

            @consumer.handler()
            def any_job(msg: pglogq.Delivery) -> None:
                trial.handle(msg.type or "")

            def stop_when_done() -> None:
                trial.stop.wait()
                consumer.stop()

            threading.Thread(target=stop_when_done, daemon=True).start()
            consumer.run()

    _run_workers(worker, lambda: _send_pglogq(dsn, queue, trial), trial)


def _coop_trial(dsn: str, queue: str, trial: _Trial) -> None:
    with pglogq.Client(dsn) as client:
        client.create_queue(queue)
        client.subscribe(queue, "workers")
    _consumer_workers(dsn, queue, trial)


def _table_trial(dsn: str, queue: str, trial: _Trial) -> None:
    table = f"bench_jobs_{queue}"
    ddl = DDL.replace("bench_jobs", table).replace("bench_claim_jobs", f"claim_{queue}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl)

    def send() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} (job_type, data) VALUES ('report', '{{}}')")
            time.sleep(GAP_S)
            trial.sent_at = time.monotonic()
            conn.execute(f"INSERT INTO {table} (job_type, data) SELECT 'mail', jsonb_build_object('n', n)"
                         " FROM generate_series(1, %s) n", (trial.mails,))
            trial.sent.set()

    def worker(name: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not trial.stop.is_set():
                row = conn.execute(f"SELECT id, job_type FROM claim_{queue}(%s, ARRAY['report', 'mail'], 1)",
                                   (name,)).fetchone()
                if row is None:
                    time.sleep(0.002)
                    continue
                trial.handle(row[1])
                conn.execute(f"UPDATE {table} SET status = 'completed', completed_at = now() WHERE id = %s",
                             (row[0],))

    _run_workers(worker, send, trial)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP FUNCTION claim_{queue}")
        conn.execute(f"DROP TABLE {table}")


def _run_workers(worker: Callable[[str], None], send: Callable[[], None], trial: _Trial) -> None:
    threads = [threading.Thread(target=worker, args=(f"w{i}",), daemon=True) for i in range(WORKERS)]
    for t in threads:
        t.start()
    time.sleep(WARM_S)  # the workers connected, found nothing and wait, as a running fleet does
    send()
    # every mail started (the long job ends then too), or the long job's time and a margin
    trial.all_started.wait(trial.long_s + 60)
    trial.stop.set()
    for t in threads:
        t.join(timeout=trial.long_s + 30)
