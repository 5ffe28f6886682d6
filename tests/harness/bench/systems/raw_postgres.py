"""The physical ceiling: the same rows INSERTed into a plain table with a bigserial primary key
(per transaction, in batches, by COPY) and read back by a plain keyset SELECT.  No queue semantics
at all."""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

from tests.harness.bench import payload
from tests.harness.bench.pacing import wait_until
from tests.harness.bench.systems.base import System

DDL = """
CREATE TABLE IF NOT EXISTS bench_raw (
    id bigserial PRIMARY KEY,
    payload jsonb NOT NULL
);
CREATE TABLE IF NOT EXISTS bench_read (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload jsonb NOT NULL
);
"""
INSERT_ONE = "INSERT INTO bench_raw (payload) VALUES (%s)"
INSERT_MANY = "INSERT INTO bench_raw (payload) SELECT e FROM jsonb_array_elements(%s) AS e"
"""The ceiling of ``send_batch``: one JSON array parameter -- the same JSON that
pglogq's client ships for the batch -- inserted straight from ``jsonb_array_elements`` into a plain
table with a bigserial key, measured in the same run, rounds interleaved with the other systems."""
APP_INSERT = "INSERT INTO bench_app_order (customer, amount) VALUES (%s, %s)"
READ_PAGE = "SELECT id, payload::text FROM {table} WHERE id > %s AND id <= %s ORDER BY id LIMIT %s"
"""The ceiling of the drains: the payload read as text and decoded with ``json.loads``, the same
decoder as every system's drain (pglogq's, PgQue's)."""


def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    n = 0
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:
        wait_until(start_at)
        while time.time() < stop_at:
            if mode == "single":
                conn.execute(INSERT_ONE, (Jsonb(rows[0]),))
                n += 1
            elif mode == "batch":
                conn.execute(INSERT_MANY, (Jsonb(rows),))
                n += batch
            elif mode == "app_txn":
                with conn.transaction():
                    conn.execute(APP_INSERT, (idx, 99.95))
                    conn.execute(INSERT_ONE, (Jsonb(rows[0]),))
                n += 1
            elif mode == "copy":
                with conn.cursor() as cur, cur.copy("COPY bench_raw (payload) FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row((json.dumps(r),))
                n += batch
            else:
                raise ValueError(mode)
    return n


def read_range(dsn: str, lo: int, hi: int, page: int, start_at: float, table: str = "bench_read",
               ) -> tuple[int, float, float]:
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_until(start_at)
        start = time.time()
        last = lo
        while True:
            rows = conn.execute(READ_PAGE.format(table=table).encode(), (last, hi, page)).fetchall()
            if not rows:
                break
            for row in rows:  # decode, as the systems' drains do
                json.loads(row[1])
            n += len(rows)
            last = rows[-1][0]
        return n, start, time.time()


class RawPostgres(System):
    name: ClassVar[str] = "raw PostgreSQL"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch", "app_txn", "copy")
    produce_worker = staticmethod(produce)

    def setup(self) -> None:
        self.ctx.sql(DDL)

    def cleanup(self) -> None:
        self.ctx.sql("TRUNCATE bench_raw, bench_read")

    def preload(self, n: int) -> None:
        self.ctx.sql("TRUNCATE bench_read")
        with self.ctx.connect() as conn, conn.cursor() as cur, cur.copy("COPY bench_read (payload) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((json.dumps(payload.make(i)),))
        self.ctx.sql("VACUUM ANALYZE bench_read")

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        lo, hi = self.ctx.sql("SELECT min(id) - 1, max(id) FROM bench_read")[0]
        page = self.ctx.settings.page_size
        if workers == 1:
            count, start, end = read_range(self.ctx.dsn, lo, hi, page, 0.0)
            return count, end - start
        step = (hi - lo + workers - 1) // workers
        pool = self.ctx.pool()
        start_at = time.time() + 0.5
        futures = [
            pool.submit(read_range, self.ctx.dsn, lo + i * step, min(hi, lo + (i + 1) * step), page, start_at)
            for i in range(workers)
        ]
        parts = [f.result() for f in futures]
        return sum(p[0] for p in parts), max(p[2] for p in parts) - start_at
