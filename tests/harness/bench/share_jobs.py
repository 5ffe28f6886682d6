"""Scenario: share consumers against the ``SKIP LOCKED`` jobs table they replace.

Four parts, side by side in one run (the ticker of pglogq running throughout):

1. **No-op job throughput.** A backlog of ``share_drain_jobs`` jobs is drained by 2 and by 8
   worker processes (each system twice, in the order table, share, share, table) that do
   nothing with a job: pglogq's share consumer, subscribed with lanes (each worker
   ``Client.receive(queue, consumer, worker=..., max_messages=k, ack=page)``: the page before
   acknowledged in the same statement and commit; the workers cut their leases side by side on
   the consumer's eight lanes) against a jobs table of the seeds' design (claim ``k`` rows with
   ``FOR UPDATE SKIP LOCKED`` and an UPDATE, then DELETE them on completion), for k = 1 and
   k = 100.  The table is vacuumed before each of its drains (autovacuum's work, done ahead:
   the table at its best).  The backlog is ``share_drain_jobs`` jobs for k = 1, ten times that
   for k = 100.
2. **The same after ``share_held_seconds`` under a held snapshot.**  A session holds a
   REPEATABLE READ snapshot (the xmin horizon stays put); meanwhile both systems handle
   ``share_held_rate`` jobs/s (each second: that many jobs sent, then drained by 2 workers), so
   that the table's dead rows pile up as they do in production behind a long transaction.  Then
   part 1's drains again, the snapshot still held.
3. **A worker killed with kill -9 holding 100 leased events.**  Worker A (a process) takes a
   lease of 100 events and sends heartbeats as a worker running a long job does; worker B
   drains a backlog kept full by a feeder.  A is SIGKILLed; measured: B's events/s in the
   takeover window (``dead_interval`` + the ticker's maintenance period after the kill) over
   its events/s in a window as long before the kill, when A's 100 events came back (B takes
   them over), and that each of them was handled once.
4. **Metadata growth under the held snapshot** of part 2, at its fixed rate:
   ``pg_total_relation_size`` of every pglogq table other than the event tables (growth: the
   largest total of any later sample minus the largest in the first 10 % of the window, as in
   the held-xmin scenario) and the dead tuples of ``sub_state_*``; beside PgQ's (the
   ``pgq`` extension, one consumer's next_batch / get_batch_events / finish_batch per batch)
   when the server has it (Debian's ``postgresql-15-pgq3``), under the same snapshot.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import pglogq
from tests.harness.bench import payload, pgq_extension
from tests.harness.bench.context import BenchContext
from tests.harness.bench.held_xmin import HeldSnapshot
from tests.harness.bench.pacing import wait_until
from tests.harness.bench.results import Measure, Series
from tests.harness.bench.systems import JobsTable, Pglogq, System
from tests.harness.bench.systems.jobs_table import DDL
from tests.harness.bench.ticking import ticker_running

SCENARIO = "share_jobs"
SHARE = "pglogq (share consumer, lanes)"
TABLE = "jobs table (SKIP LOCKED, delete on completion)"
PGQ = "PgQ"
WORKERS = (2, 8)
CLAIMS = (1, 100)
CHURN_WORKERS = 2
CHURN_CLAIM = 100
MAINT_INTERVAL_S = 0.5  # the ticker's maintenance period (pglogq.tickerd.settings: maint_interval)
MB = 1024 * 1024

JOBS = "bench_share_jobs"
CLAIM_FN = "bench_share_claim"
CONSUMER = "workers"


def drain_case(workers: int, claim: int) -> str:
    return f"no-op jobs, {workers} workers, claim / lease {claim}"


def held_case(workers: int, claim: int) -> str:
    return f"held snapshot: {drain_case(workers, claim)}"


TAKEOVER_RATIO = "takeover: other worker's events/s in the window / before"
TAKEOVER_BACK = "takeover: the killed worker's 100 events back after the kill"
TAKEOVER_ONCE = "takeover: the killed worker's events handled exactly once"
META_GROWTH = "held snapshot: metadata growth"
META_DEAD = "held snapshot: dead tuples of sub_state_* at end"


# -- worker-process functions (spawned: module level) -----------------------------------------------


def _warm(_: int) -> int:
    import tests.harness.bench.workers  # noqa: F401

    return os.getpid()


# A worker process keeps its session from one drain to the next, as a fleet's workers keep
# theirs: a new session's first calls plan pglogq's functions (about 40 ms over the first three
# receives, against 1-3 ms a receive after), which a drain of a few thousand jobs by eight new
# sessions measured as throughput (16,967 events/s for 4,000 jobs, 47,377 for 40,000, 8 workers,
# leases of 100).  The first calls of a session are measured on their own, by the queues scenario.
_SESSIONS: dict[str, Any] = {}


def _share_session(dsn: str) -> pglogq.Client:
    client = _SESSIONS.get(f"share {dsn}")
    if client is None:
        client = _SESSIONS[f"share {dsn}"] = pglogq.Client(dsn, max_size=1)
        atexit.register(client.close)  # the process exits at once, not when its pool is collected
    return client


def _table_session(dsn: str) -> psycopg.Connection[Any]:
    conn = _SESSIONS.get(f"table {dsn}")
    if conn is None or conn.closed:
        conn = _SESSIONS[f"table {dsn}"] = psycopg.connect(dsn, autocommit=True)
        atexit.register(conn.close)
    return conn


def share_drain(dsn: str, queue: str, worker: str, lease: int, start_at: float,
                fused: bool = True) -> tuple[int, float]:
    """One share worker: leases of ``lease`` events until none is left; (events, end time).
    ``fused``: each page acknowledged with the next receive (``receive(..., ack=page)``: one
    statement and one commit), else acknowledged on its own."""
    n = 0
    client = _share_session(dsn)
    client.queue_info(queue)  # the connection open before the start
    wait_until(start_at)
    done: pglogq.Batch | None = None
    while True:
        got = client.receive(queue, CONSUMER, worker=worker, max_messages=lease, ack=done)
        if not got.messages:
            break
        for _m in got:
            pass  # the no-op job
        if fused:
            done = got
        else:
            got.ack()
        n += len(got.messages)
    return n, time.time()


def table_drain(dsn: str, worker: str, claim: int, start_at: float) -> tuple[int, float]:
    """One jobs-table worker: claim ``claim`` rows, delete them on completion, until none is left."""
    n = 0
    claim_sql = f"SELECT id, data FROM {CLAIM_FN}(%s, ARRAY['bench'], %s)"
    delete_sql = f"DELETE FROM {JOBS} WHERE id = ANY (%s)"
    conn = _table_session(dsn)
    conn.execute(f"SELECT 1 FROM {JOBS} LIMIT 0")
    wait_until(start_at)
    while True:
        rows = conn.execute(claim_sql, (worker, claim)).fetchall()
        if not rows:
            break
        conn.execute(delete_sql, ([r[0] for r in rows],))
        n += len(rows)
    return n, time.time()


def pgq_drain(dsn: str, queue: str) -> int:
    """PgQ's consumer: next_batch / get_batch_events / finish_batch until no batch is ready."""
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT pgq.next_batch(%s, %s)", (queue, CONSUMER)).fetchone()
            if row is None or row[0] is None:
                return n
            n += len(conn.execute("SELECT ev_id, ev_data FROM pgq.get_batch_events(%s)", (row[0],)).fetchall())
            conn.execute("SELECT pgq.finish_batch(%s)", (row[0],))


def hold_lease(dsn: str, queue: str, size: int, dead_interval: float, out: Any) -> None:
    """Worker A of the takeover: a lease of ``size`` events, then heartbeats (a long job) until
    it is killed.  Sends the lease's message ids to ``out`` first."""
    with pglogq.Client(dsn) as client:
        lease = client.receive(queue, CONSUMER, worker="A", max_messages=size)
        out.put([m.msg_id for m in lease])
        while True:
            time.sleep(dead_interval / 4)
            assert lease.id is not None
            client.heartbeat(lease.id)


# -- the two systems' sides --------------------------------------------------------------------------


@dataclass
class Sides:
    """The share consumer's queue, the jobs table and (when present) PgQ's queue of one run."""

    ctx: BenchContext
    pool: ProcessPoolExecutor
    queue: str = "share_jobs"
    pgq: bool = False
    pgq_queue: str = "share_jobs_pgq"
    seq: int = 0

    def setup(self) -> None:
        with self.ctx.client() as c:
            c.create_queue(self.queue)
            # lanes: the workers cut their leases side by side (the mode for many workers)
            c.subscribe(self.queue, CONSUMER, share=True, lanes=True)
        ddl = DDL.replace("bench_claim_jobs", CLAIM_FN).replace("bench_jobs", JOBS)
        self.ctx.sql(ddl)
        with self.ctx.connect() as conn:
            self.pgq = pgq_extension.install(conn)
        if self.pgq:
            self.ctx.sql("SELECT pgq.create_queue(%s)", (self.pgq_queue,))
            self.ctx.sql("SELECT pgq.register_consumer(%s, %s)", (self.pgq_queue, CONSUMER))

    def teardown(self) -> None:
        with contextlib.suppress(Exception), self.ctx.client() as c:
            c.drop_queue(self.queue, force=True)
        self.ctx.sql(f"DROP FUNCTION IF EXISTS {CLAIM_FN}; DROP TABLE IF EXISTS {JOBS}")
        if self.pgq:
            with contextlib.suppress(Exception):
                self.ctx.sql("SELECT pgq.unregister_consumer(%s, %s)", (self.pgq_queue, CONSUMER))
                self.ctx.sql("SELECT pgq.drop_queue(%s)", (self.pgq_queue,))

    def _payloads(self, n: int) -> list[dict[str, Any]]:
        out = [payload.make(self.seq + i) for i in range(n)]
        self.seq += n
        return out

    def fill_share(self, n: int) -> None:
        with self.ctx.client() as c:
            for start in range(0, n, 1000):
                c.send_batch(self.queue, self._payloads(min(1000, n - start)))
            c.tick(self.queue, force=True)

    def fill_table(self, n: int) -> None:
        with self.ctx.connect() as conn:
            for start in range(0, n, 1000):
                conn.execute(f"INSERT INTO {JOBS} (job_type, data) SELECT 'bench', jsonb_array_elements(%s)",
                             (Jsonb(self._payloads(min(1000, n - start))),))

    def fill_pgq(self, n: int) -> None:
        with self.ctx.connect() as conn:
            for start in range(0, n, 1000):
                conn.execute("SELECT pgq.insert_event(%s, 'bench', x::text) FROM jsonb_array_elements(%s) x",
                             (self.pgq_queue, Jsonb(self._payloads(min(1000, n - start)))))
            conn.execute("SELECT pgq.force_tick(%s)", (self.pgq_queue,))
            conn.execute("SELECT pgq.ticker(%s)", (self.pgq_queue,))

    def drain_share(self, workers: int, lease: int) -> tuple[int, float]:
        start_at = time.time() + 0.5
        futs = [self.pool.submit(share_drain, self.ctx.dsn, self.queue, f"w{i}", lease, start_at)
                for i in range(workers)]
        return _sum(futs, start_at)

    def drain_table(self, workers: int, claim: int) -> tuple[int, float]:
        start_at = time.time() + 0.5
        futs = [self.pool.submit(table_drain, self.ctx.dsn, f"w{i}", claim, start_at) for i in range(workers)]
        return _sum(futs, start_at)

    def warm(self) -> None:
        """A drain by every worker process of each system, not measured: each process's
        sessions (kept from then on) have run their whole path once."""
        n = max(WORKERS) * 20
        self.fill_table(n)
        self.drain_table(max(WORKERS), 1)
        self.fill_share(n)
        self.drain_share(max(WORKERS), 1)

    def drain_pgq(self) -> int:
        n = self.pool.submit(pgq_drain, self.ctx.dsn, self.pgq_queue).result()
        with contextlib.suppress(psycopg.Error):
            self.ctx.sql("SELECT pgq.maint_rotate_tables_step1(%s)", (self.pgq_queue,))
            self.ctx.sql("SELECT pgq.maint_rotate_tables_step2()")
        return n


def _sum(futs: list[Future[tuple[int, float]]], start_at: float) -> tuple[int, float]:
    parts = [f.result() for f in futs]
    return sum(p[0] for p in parts), max(p[1] for p in parts) - start_at


# -- parts 1 and 2 -------------------------------------------------------------------------------------


def backlog(ctx: BenchContext, claim: int) -> int:
    """The jobs of one drain point: ``share_drain_jobs`` one at a time, ten times that by 100."""
    return ctx.settings.share_drain_jobs * (10 if claim > 1 else 1)


def drains(ctx: BenchContext, sides: Sides, held: bool, extra: dict[str, Any]) -> None:
    """Part 1's drains (part 2's when ``held``): every worker count and claim size, each system
    drained twice, in the order table, share, share, table (neither always runs first on a
    machine whose pace drifts); a system's figure is its jobs over its seconds of both drains."""
    case = held_case if held else drain_case
    for workers in WORKERS:
        for claim in CLAIMS:
            n = backlog(ctx, claim)
            jobs = {TABLE: 0, SHARE: 0}
            seconds = {TABLE: 0.0, SHARE: 0.0}
            for system in (TABLE, SHARE, SHARE, TABLE):
                if system == TABLE:
                    sides.fill_table(n)
                    if not held:
                        ctx.sql(f"VACUUM {JOBS}")
                    count, secs = sides.drain_table(workers, claim)
                else:
                    sides.fill_share(n)
                    count, secs = sides.drain_share(workers, claim)
                jobs[system] += count
                seconds[system] += secs
            for system in (TABLE, SHARE):
                ctx.results.add(Measure(SCENARIO, case(workers, claim), system, jobs[system] / seconds[system],
                                        "events/s", extra={"jobs": jobs[system], "seconds": round(seconds[system], 3),
                                                           "drains": 2, **extra}))


@dataclass
class MetaSampler:
    """Every ``every`` seconds: the metadata tables' total size of pglogq (and PgQ) and the dead
    tuples of pglogq's sub_state partitions."""

    dsn: str
    every: float
    schemas: tuple[str, ...]
    t0: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, dict[str, int], int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    QUERY = """
    WITH RECURSIVE ev(oid) AS (
            SELECT 'pglogq.event'::regclass::oid
        UNION
            SELECT i.inhrelid FROM pg_inherits i JOIN ev ON i.inhparent = ev.oid)
    SELECT n.nspname, coalesce(sum(pg_total_relation_size(c.oid)), 0)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind = 'r' AND n.nspname = ANY (%s)
       AND c.oid NOT IN (SELECT oid FROM ev) AND NOT (n.nspname = 'pgq' AND c.relname ~ '^event_')
     GROUP BY n.nspname
    """
    DEAD = ("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
            " WHERE schemaname = 'pglogq' AND relname LIKE 'sub_state%'")

    def read(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        sizes = {str(k): int(v) for k, v in conn.execute(self.QUERY, (list(self.schemas),)).fetchall()}
        dead = conn.execute(self.DEAD).fetchone()
        self.samples.append((time.monotonic() - self.t0, sizes, int(dead[0]) if dead else 0))

    def start(self) -> None:
        def loop() -> None:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                self.read(conn)
                while not self._stop.wait(self.every):
                    self.read(conn)
                time.sleep(1.2)  # backends publish their table statistics about once a second
                self.read(conn)

        self._thread = threading.Thread(target=loop, daemon=True, name="share-meta-sampler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def growth_mb(self, schema: str) -> float:
        """The largest total of any sample after the first 10 % of the window minus the largest
        within it (never below 0), as the held-xmin scenario measures it."""
        if not self.samples:
            return math.nan
        end = self.samples[-1][0]
        first = [s[1].get(schema, 0) for s in self.samples if s[0] <= 0.1 * end] or [self.samples[0][1].get(schema, 0)]
        later = [s[1].get(schema, 0) for s in self.samples if s[0] > 0.1 * end] or first
        return max(0.0, (max(later) - max(first)) / MB)


def churn(ctx: BenchContext, sides: Sides, seconds: float) -> dict[str, Any]:
    """Each second: ``share_held_rate`` jobs sent to each system and drained (2 workers, claim /
    lease 100; PgQ: its one consumer).  Returns what was handled and the rate reached."""
    rate = ctx.settings.share_held_rate
    done = {TABLE: 0, SHARE: 0, PGQ: 0}
    start = time.monotonic()
    cycles = 0
    while time.monotonic() - start < seconds:
        due = start + cycles + 1
        sides.fill_table(rate)
        done[TABLE] += sides.drain_table(CHURN_WORKERS, CHURN_CLAIM)[0]
        sides.fill_share(rate)
        done[SHARE] += sides.drain_share(CHURN_WORKERS, CHURN_CLAIM)[0]
        if sides.pgq:
            sides.fill_pgq(rate)
            done[PGQ] += sides.drain_pgq()
        cycles += 1
        time.sleep(max(0.0, due - time.monotonic()))
    elapsed = time.monotonic() - start
    return {"seconds": round(elapsed, 1), "offered_per_s": rate,
            "handled_per_s": {k: round(v / elapsed, 1) for k, v in done.items() if v}}


# -- part 3 --------------------------------------------------------------------------------------------


def takeover(ctx: BenchContext, sides: Sides) -> None:
    s = ctx.settings
    dead = s.share_dead_interval
    queue = "share_takeover"
    with ctx.client() as c:
        c.create_queue(queue)
        c.subscribe(queue, CONSUMER, share=True, lanes=True)
        c.set_queue_config(queue, "dead_interval", f"{dead:g} s")
        # a lane holds every eighth event: 800 give the holder's lane the 100 of its lease
        c.send_batch(queue, [payload.make(i) for i in range(800)])
        c.tick(queue, force=True)
    mp = multiprocessing.get_context("spawn")
    ids_q: Any = mp.Queue()
    holder = mp.Process(target=hold_lease, args=(ctx.dsn, queue, 100, dead, ids_q), daemon=True)
    holder.start()
    held_ids: list[int] = ids_q.get(timeout=60)
    assert len(held_ids) == 100, held_ids
    seen: dict[int, list[float]] = {}
    times: list[float] = []
    stop = threading.Event()
    sent = [0]

    def feeder() -> None:  # keeps B's backlog full, at the same cost in both windows
        with pglogq.Client(ctx.dsn) as c:
            while not stop.is_set():
                if sent[0] - len(times) < 3000:
                    c.send_batch(queue, [payload.make(800 + sent[0] + i) for i in range(1000)])
                    c.tick(queue, force=True)
                    sent[0] += 1000
                else:
                    time.sleep(0.005)

    def worker_b() -> None:
        with pglogq.Client(ctx.dsn) as c:
            while not stop.is_set():
                got = c.receive(queue, CONSUMER, worker="B", max_messages=100)
                now = time.monotonic()
                for m in got:
                    seen.setdefault(m.msg_id, []).append(now)
                if got.messages:
                    got.ack()
                    times.extend([now] * len(got.messages))

    window = dead + MAINT_INTERVAL_S
    with ticker_running(ctx.dsn, maint_interval=MAINT_INTERVAL_S):
        threads = [threading.Thread(target=feeder, daemon=True), threading.Thread(target=worker_b, daemon=True)]
        for t in threads:
            t.start()
        time.sleep(max(window, s.share_takeover_warmup) + window)  # warm-up, then the window before
        assert holder.pid is not None
        os.kill(holder.pid, signal.SIGKILL)
        killed = time.monotonic()
        holder.join(10)
        deadline = killed + window + 30
        while time.monotonic() < max(killed + window, min(deadline, killed + window + 1)) or (
                time.monotonic() < deadline and not all(i in seen for i in held_ids)):
            time.sleep(0.05)
        stopped = time.monotonic()
        stop.set()
        for t in threads:
            t.join(30)
    before = sum(1 for x in times if killed - window <= x < killed) / window
    during = sum(1 for x in times if killed <= x < killed + window) / window
    back = [min(seen[i]) - killed for i in held_ids if i in seen]
    once = sum(1 for i in held_ids if len(seen.get(i, [])) == 1)
    extra = {"dead_interval_s": dead, "maintenance_period_s": MAINT_INTERVAL_S, "window_s": window,
             "before_events_per_s": round(before, 1), "window_events_per_s": round(during, 1),
             "held_events": len(held_ids), "came_back": len(back), "bound_s": window}
    r = ctx.results
    r.add(Measure(SCENARIO, TAKEOVER_RATIO, SHARE, during / before if before else math.nan, "x", extra=extra))
    # all back: when the last came; else how long they were waited for (came_back says how many)
    waited = max(back) if len(back) == len(held_ids) else stopped - killed
    r.add(Measure(SCENARIO, TAKEOVER_BACK, SHARE, waited, "s", higher_is_better=False, extra=extra))
    r.add(Measure(SCENARIO, TAKEOVER_ONCE, SHARE, float(once), "events", extra=extra))
    step = 0.25
    xs = [k * step - window for k in range(int(2 * window / step) + 1)]
    r.series.append(Series(SCENARIO, "worker B events/s (kill at 0)", xs,
                           [sum(1 for x in times if killed + a <= x < killed + a + step) / step for a in xs],
                           "seconds after the kill", "events/s handled by the other worker"))
    with contextlib.suppress(Exception), ctx.client() as c:
        c.drop_queue(queue, force=True)


# -- the scenario ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _pool(n: int) -> Iterator[ProcessPoolExecutor]:
    pool = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
    try:
        list(pool.map(_warm, range(n)))
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run(ctx: BenchContext, systems: list[System]) -> None:
    if not any(isinstance(x, Pglogq) for x in systems):
        return
    if not any(isinstance(x, JobsTable) for x in systems):
        ctx.results.skip(SCENARIO, JobsTable.name, "not selected: the share consumer is measured beside it")
    s = ctx.settings
    r = ctx.results
    r.note(SCENARIO, f"no-op jobs: a backlog of {backlog(ctx, 1):,} (claim / lease 1) or {backlog(ctx, 100):,} "
                     f"(claim / lease 100) drained by {' and '.join(map(str, WORKERS))} "
                     "worker processes; the share consumer's workers Client.receive(worker=..., max_messages=k) "
                     "then ack; the table's claim k rows (FOR UPDATE SKIP LOCKED, UPDATE) then DELETE them; "
                     "the table is vacuumed before each drain of part 1; each worker process keeps its "
                     "sessions from one drain to the next, warmed by a drain not measured")
    r.note(SCENARIO, f"held snapshot: a REPEATABLE READ session holds its snapshot while each system handles "
                     f"{s.share_held_rate:,} jobs/s for {s.share_held_seconds:g} s (sent each second, drained by "
                     f"{CHURN_WORKERS} workers, claim / lease {CHURN_CLAIM}), then the drains again")
    with _pool(max(WORKERS)) as pool:
        sides = Sides(ctx, pool)
        sides.setup()
        try:
            if not sides.pgq:
                r.skip(SCENARIO, PGQ, "the pgq extension is not available on this server (Debian's "
                                      "postgresql-15-pgq3 for PostgreSQL 15): no metadata row beside PgQ's")
            with ticker_running(ctx.dsn, maint_interval=MAINT_INTERVAL_S):
                sides.warm()
                drains(ctx, sides, held=False, extra={})
                snap = HeldSnapshot(ctx.dsn)
                try:
                    sampler = MetaSampler(ctx.dsn, s.share_sample_seconds,
                                          ("pglogq", "pgq") if sides.pgq else ("pglogq",))
                    sampler.start()
                    try:
                        how = churn(ctx, sides, s.share_held_seconds)
                    finally:
                        sampler.stop()
                    r.note(SCENARIO, f"held snapshot: the load reached {json.dumps(how['handled_per_s'])} "
                                     f"jobs/s in {how['seconds']:g} s (offered {how['offered_per_s']:,}/s)")
                    drains(ctx, sides, held=True, extra={"held_seconds": how["seconds"]})
                    if snap.backend_xmin(ctx.dsn) != snap.xmin:
                        raise RuntimeError("the held snapshot's xmin moved: not a held run")
                finally:
                    snap.close()
            _metadata(ctx, sampler, sides.pgq)
            takeover(ctx, sides)
        finally:
            sides.teardown()


def _metadata(ctx: BenchContext, sampler: MetaSampler, pgq: bool) -> None:
    r = ctx.results
    extra = {"samples": len(sampler.samples), "rate": ctx.settings.share_held_rate}
    r.add(Measure(SCENARIO, META_GROWTH, SHARE, sampler.growth_mb("pglogq"), "MB", higher_is_better=False,
                  extra=extra))
    if pgq:
        r.add(Measure(SCENARIO, META_GROWTH, PGQ, sampler.growth_mb("pgq"), "MB", higher_is_better=False,
                      extra=extra))
    if sampler.samples:
        r.add(Measure(SCENARIO, META_DEAD, SHARE, float(sampler.samples[-1][2]), "tuples", higher_is_better=False))
    for schema, name in (("pglogq", SHARE), *((("pgq", PGQ),) if pgq else ())):
        r.series.append(Series(f"{SCENARIO}_meta", name, [x[0] for x in sampler.samples],
                               [x[1].get(schema, 0) / MB for x in sampler.samples], "seconds under the held snapshot",
                               "metadata tables, MB (total)"))

