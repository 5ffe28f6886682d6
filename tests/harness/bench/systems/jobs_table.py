"""The seeds' design: one ``jobs`` table with a partial index on pending rows, claimed in batches
with FOR UPDATE SKIP LOCKED (an UPDATE per claim) and completed by another UPDATE.

Written here for the benchmark after the pattern the seeds describe (status column, priority
then FIFO order, attempts/max_attempts, worker_id and claimed_at)."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

DDL = """
CREATE TABLE IF NOT EXISTS bench_jobs (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    job_type      varchar(50) NOT NULL,
    priority      int NOT NULL DEFAULT 100,
    status        varchar(20) NOT NULL DEFAULT 'pending',
    data          jsonb NOT NULL DEFAULT '{}',
    progress      int DEFAULT 0,
    current_stage varchar(100),
    worker_id     varchar(100),
    claimed_at    timestamptz,
    created_at    timestamptz DEFAULT now(),
    started_at    timestamptz,
    completed_at  timestamptz,
    attempts      int DEFAULT 0,
    max_attempts  int DEFAULT 3,
    last_error    text,
    CONSTRAINT bench_jobs_status_ok CHECK (
        status IN ('pending', 'claimed', 'running', 'completed', 'failed', 'cancelled'))
);
CREATE INDEX IF NOT EXISTS bench_jobs_claimable ON bench_jobs (priority DESC, created_at ASC)
    WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS bench_jobs_worker ON bench_jobs (worker_id)
    WHERE status IN ('claimed', 'running');

CREATE OR REPLACE FUNCTION bench_claim_jobs(worker text, types text[], batch_size int)
RETURNS SETOF bench_jobs LANGUAGE sql AS $$
    WITH pick AS (
        SELECT id FROM bench_jobs
         WHERE status = 'pending' AND job_type = ANY (types) AND attempts < max_attempts
         ORDER BY priority DESC, created_at ASC
         LIMIT batch_size
         FOR UPDATE SKIP LOCKED
    )
    UPDATE bench_jobs j
       SET status = 'claimed', worker_id = worker, claimed_at = now(), attempts = j.attempts + 1
      FROM pick WHERE j.id = pick.id
    RETURNING j.*
$$;
"""
INSERT_ONE = "INSERT INTO bench_jobs (job_type, data) VALUES ('bench', %s)"
INSERT_MANY = "INSERT INTO bench_jobs (job_type, data) SELECT 'bench', jsonb_array_elements(%s)"
CLAIM = "SELECT id, data FROM bench_claim_jobs(%s, ARRAY[%s], %s)"
COMPLETE = "UPDATE bench_jobs SET status = 'completed', completed_at = now() WHERE id = ANY (%s)"
CLAIM_BATCH = 100


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    n = 0
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:
        wait_until(start_at)
        while time.time() < stop_at:
            if mode == "single":
                conn.execute(INSERT_ONE, (Jsonb(rows[0]),))
                n += 1
            else:
                conn.execute(INSERT_MANY, (Jsonb(rows),))
                n += batch
    return n


def insert_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:

        def send(seqs: list[int]) -> None:
            if len(seqs) == 1:
                conn.execute(INSERT_ONE, (Jsonb(payload.make(seqs[0])),))
            else:
                conn.execute(INSERT_MANY, (Jsonb([payload.make(s) for s in seqs]),))

        return paced(rate, seconds, send, start_at=start_at)


def claim_loop(dsn: str, worker: str, start_at: float, stop_when_empty: bool = True,
               stop: threading.Event | None = None, record: Record | None = None,
               poll: float = 0.01, job_type: str = "bench") -> tuple[int, float, float]:
    """Claim a batch (one transaction), handle it, complete it (another transaction)."""
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(start_at)
        start = time.time()
        while True:
            rows = conn.execute(CLAIM, (worker, job_type, CLAIM_BATCH)).fetchall()
            if not rows:
                if stop_when_empty or (stop is not None and stop.is_set()):
                    break
                time.sleep(poll)
                continue
            if record is not None:
                now = clock()
                for _id, body in rows:
                    record(int(body["seq"]), now)
            conn.execute(COMPLETE, ([r[0] for r in rows],))
            n += len(rows)
        return n, start, time.time()


def claim_worker(conf: dict[str, Any], idx: int, start_at: float) -> tuple[int, float, float]:
    return claim_loop(conf["dsn"], f"w{idx}", start_at)


class JobsTable(System):
    name: ClassVar[str] = "jobs table (SKIP LOCKED)"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(insert_paced)

    def setup(self) -> None:
        self.ctx.sql(DDL)

    def cleanup(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.ctx.sql("TRUNCATE bench_jobs")

    def preload(self, n: int) -> None:
        self.reset()
        rows = [payload.make(i) for i in range(1000)]
        with self.ctx.connect() as conn:
            for start in range(0, n, 1000):
                conn.execute(INSERT_MANY, (Jsonb(rows[: min(1000, n - start)]),))
        self.ctx.sql("VACUUM ANALYZE bench_jobs")

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers == 1:
            count, start, end = claim_loop(self.ctx.dsn, "w0", 0.0)
            return count, end - start
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [pool.submit(claim_worker, self.conf(), i, start_at) for i in range(workers)]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at

    def latency_setup(self, rate: int) -> None:
        self.reset()

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        seen = 0

        def rec(seq: int, ts: float) -> None:
            nonlocal seen
            seen += 1
            record(seq, ts)

        stop = threading.Event()
        ready.set()

        def watch() -> None:
            while seen < expected and time.time() < deadline:
                time.sleep(0.01)
            stop.set()

        threading.Thread(target=watch, daemon=True).start()
        claim_loop(self.ctx.dsn, "lat", 0.0, stop_when_empty=False, stop=stop, record=rec)
