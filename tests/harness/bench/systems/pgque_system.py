"""PgQue (github.com/NikolayS/PgQue), the closest peer: a pure-SQL successor of PgQ.

Nothing of PgQue is part of this repository.  Its single install file (``sql/pgque.sql``) is
found at run time: ``--pgque-sql PATH`` / ``$PGLOGQ_BENCH_PGQUE_SQL`` (a file), else read with
``git show HEAD:sql/pgque.sql`` from a bare or normal clone at ``$PGLOGQ_BENCH_PGQUE_REPO``
(default: the mirror path ``/work/.mirror/NikolayS+PgQue/repo``).  Without it the system is
skipped with that reason.  The file is installed in one transaction into the bench database
(schema ``pgque``; it also creates the cluster-wide roles ``pgque_reader``/``_writer``/``_admin``
when missing, and teardown drops them again when the bench created them).

How it runs (its own API, default settings):

- produce: ``pgque.send(queue, jsonb)`` per transaction, ``pgque.send_batch(queue, jsonb[])``;
- SQL drain: ``pgque.next_batch`` / ``pgque.get_batch_events`` / ``pgque.finish_batch`` loop;
- ticker: PgQue's own mechanism, as its README describes for installs without pg_cron: what
  ``pgque.start()`` would schedule, driven by a harness thread -- ``CALL pgque.ticker_loop()``
  once a second (the procedure ticks every ``tick_period_ms``, default 100 ms, committing between
  ticks), ``pgque.maint_retry_events()`` and ``pgque.maint()`` every 30 s,
  ``pgque.maint_rotate_tables_step2()`` every 10 s;
- latency consumer: ``next_batch`` woken by PgQue's ``NOTIFY pgque_<queue>`` (sent by every tick);
- Python drain: not applicable (no Python consumer of PgQue is measured here).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from psycopg.types.json import Jsonb

from tests.harness.bench import payload
from tests.harness.bench.pacing import clock, paced, wait_until
from tests.harness.bench.systems.base import Record, System

SQL_ENV = "PGLOGQ_BENCH_PGQUE_SQL"
REPO_ENV = "PGLOGQ_BENCH_PGQUE_REPO"
DEFAULT_REPO = "/work/.mirror/NikolayS+PgQue/repo"
SQL_PATH_IN_REPO = "sql/pgque.sql"
ROLES = ("pgque_reader", "pgque_writer", "pgque_admin")

PRODUCE_QUEUE = "bench_produce"
SEND = "SELECT pgque.send(%s, %s)"
SEND_BATCH = "SELECT pgque.send_batch(%s, %s::jsonb[])"
APP_INSERT = "INSERT INTO bench_app_order (customer, amount) VALUES (%s, %s)"
NEXT_BATCH = "SELECT pgque.next_batch(%s, %s)"
BATCH_EVENTS = "SELECT ev_id, ev_data FROM pgque.get_batch_events(%s)"
FINISH_BATCH = "SELECT pgque.finish_batch(%s)"

METADATA_TABLES = """
SELECT n.nspname || '.' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname = 'pgque' AND c.relname !~ '^event_'
 ORDER BY 1
"""
"""PgQue's tables other than its event tables (queue, consumer, subscription, tick, retry_queue,
config, dead letters...): what "metadata size under a held snapshot" sums."""
EVENT_TABLES = """
SELECT n.nspname || '.' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname = 'pgque' AND c.relname ~ '^event_'
 ORDER BY 1
"""

QUEUE_EVENT_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgque' AND c.relkind = 'r'
   AND c.relname ~ ('^event_' || (SELECT queue_id FROM pgque.queue WHERE queue_name = %s) || '(_|$)')
"""


def find_sql() -> tuple[str | None, str]:
    """PgQue's install SQL and where it came from; (None, why) when it is not found."""
    path = os.environ.get(SQL_ENV)
    if path:
        p = Path(path)
        if not p.is_file():
            return None, f"${SQL_ENV} / --pgque-sql names {path}, which is not a file"
        return p.read_text(encoding="utf-8"), str(p)
    repo = os.environ.get(REPO_ENV, DEFAULT_REPO)
    if not Path(repo).exists():
        return None, (f"PgQue's install file not found: pass --pgque-sql PATH (or ${SQL_ENV}), or set "
                      f"${REPO_ENV} to a clone of github.com/NikolayS/PgQue (default {DEFAULT_REPO})")
    try:
        out = subprocess.run(["git", "--git-dir" if repo.endswith((".git", "repo")) else "-C", repo,
                              "show", f"HEAD:{SQL_PATH_IN_REPO}"],
                             capture_output=True, check=True, timeout=30)
        commit = subprocess.run(["git", "--git-dir" if repo.endswith((".git", "repo")) else "-C", repo,
                                 "rev-parse", "--short", "HEAD"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not read {SQL_PATH_IN_REPO} from {repo} with git: {exc}"
    return out.stdout.decode(), f"{repo} @ {commit.stdout.decode().strip()}:{SQL_PATH_IN_REPO}"


# -- worker-process functions (spawned: module level) ----------------------------------------------
def produce(conf: dict[str, Any], mode: str, batch: int, idx: int, start_at: float, stop_at: float) -> int:
    """One producer client: pgque.send per transaction, pgque.send_batch, or an app INSERT + send."""
    queue = conf["queue"]
    rows = [payload.make(idx * 1_000_000 + i) for i in range(max(batch, 1))]
    one = Jsonb(rows[0])
    many = [Jsonb(r) for r in rows]
    n = 0
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:
        wait_until(start_at)
        while time.time() < stop_at:
            if mode == "single":
                conn.execute(SEND, (queue, one))
                n += 1
            elif mode == "batch":
                conn.execute(SEND_BATCH, (queue, many))
                n += batch
            elif mode == "app_txn":
                with conn.transaction():
                    conn.execute(APP_INSERT, (idx, 99.95))
                    conn.execute(SEND, (queue, one))
                n += 1
            else:
                raise ValueError(mode)
    return n


def send_paced(conf: dict[str, Any], rate: int, seconds: float, start_at: float) -> list[tuple[int, float]]:
    """Latency / held-load producer: ``rate`` events/s, one transaction per call."""
    queue = conf["queue"]
    with psycopg.connect(conf["dsn"], autocommit=True) as conn:

        def send(seqs: list[int]) -> None:
            if len(seqs) == 1:
                conn.execute(SEND, (queue, Jsonb(payload.make(seqs[0]))))
            else:
                conn.execute(SEND_BATCH, (queue, [Jsonb(payload.make(s)) for s in seqs]))

        return paced(rate, seconds, send, start_at=start_at)


def drain_loop(dsn: str, queue: str, consumer: str) -> tuple[int, float, float]:
    """next_batch / get_batch_events / finish_batch until next_batch returns NULL."""
    n = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")
        start = time.time()
        while True:
            row = conn.execute(NEXT_BATCH, (queue, consumer)).fetchone()
            batch_id = row[0] if row else None
            if batch_id is None:
                break
            rows = conn.execute(BATCH_EVENTS, (batch_id,)).fetchall()
            for _id, data in rows:  # decode, as a consumer would (ev_data is text)
                json.loads(data)
            n += len(rows)
            conn.execute(FINISH_BATCH, (batch_id,))
        return n, start, time.time()


# -- the ticker: PgQue's own loop, as pg_cron would run it -----------------------------------------
class Ticker:
    """A thread doing what ``pgque.start()`` schedules with pg_cron (see the module docstring)."""

    DESCRIPTION = ("PgQue's own ticker: CALL pgque.ticker_loop() every second (ticks every tick_period_ms, "
                   "default 100 ms), pgque.maint_retry_events() and pgque.maint() every 30 s, "
                   "pgque.maint_rotate_tables_step2() every 10 s -- what pgque.start() schedules with pg_cron, "
                   "driven by a harness thread")

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pgque-ticker", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                last_maint = last_step2 = time.monotonic()
                while not self._stop.is_set():
                    slot = time.monotonic()
                    conn.execute("CALL pgque.ticker_loop()")
                    now = time.monotonic()
                    if now - last_step2 >= 10:
                        conn.execute("SELECT pgque.maint_rotate_tables_step2()")
                        last_step2 = now
                    if now - last_maint >= 30:
                        conn.execute("SELECT pgque.maint_retry_events()")
                        conn.execute("SELECT pgque.maint()")
                        last_maint = now
                    self._stop.wait(max(0.0, 1.0 - (time.monotonic() - slot)))  # the next 1-second slot
        except BaseException as exc:  # surfaced by the scenario through .error
            self.error = exc


@contextmanager
def ticker_running(dsn: str) -> Iterator[str]:
    t = Ticker(dsn)
    t.start()
    try:
        yield Ticker.DESCRIPTION
    finally:
        t.stop()
    if t.error is not None:
        raise RuntimeError(f"the PgQue ticker failed: {t.error}") from t.error


class PgQue(System):
    name: ClassVar[str] = "PgQue"
    produce_modes: ClassVar[tuple[str, ...]] = ("single", "batch", "app_txn")
    produce_worker = staticmethod(produce)
    latency_producer = staticmethod(send_paced)
    max_drain_workers: ClassVar[int] = 1
    ticker_description: ClassVar[str] = Ticker.DESCRIPTION

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._sql: str | None = None
        self.source = ""
        self._version = ""
        self._made_roles: list[str] = []
        self._queues = 0

    def unavailable(self) -> str | None:
        sql, where = find_sql()
        if sql is None:
            return where
        self._sql, self.source = sql, where
        return None

    def setup(self) -> None:
        assert self._sql is not None
        with self.ctx.connect() as conn:
            existing = {r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)",
                                                   (list(ROLES),)).fetchall()}
            self._made_roles = [r for r in ROLES if r not in existing]
            with conn.transaction():
                conn.execute(self._sql.encode())
            row = conn.execute("SELECT pgque.version()").fetchone()
            self._version = str(row[0]) if row else ""
        self.create_queue(PRODUCE_QUEUE)

    def teardown(self) -> None:
        """Drop the roles the install created (they are cluster-wide; the database goes anyway)."""
        if not self._made_roles:
            return
        with self.ctx.connect() as conn:
            conn.execute("DROP SCHEMA IF EXISTS pgque CASCADE")
            for r in self._made_roles:
                try:
                    conn.execute(f"DROP OWNED BY {r}".encode())
                    conn.execute(f"DROP ROLE IF EXISTS {r}".encode())
                except psycopg.Error as exc:  # another database of the server uses it now: leave it
                    print(f"  PgQue: role {r} left in place: {exc}".rstrip(), flush=True)
        self._made_roles = []

    def version(self) -> str:
        return f"PgQue {self._version} ({self.source})"

    def conf(self) -> dict[str, Any]:
        return {"dsn": self.ctx.dsn, "queue": PRODUCE_QUEUE}

    # -- helpers for the scenarios (held_xmin uses them too) -----------------------------------
    def create_queue(self, queue: str, consumers: tuple[str, ...] = ()) -> None:
        with self.ctx.connect() as conn:
            conn.execute("SELECT pgque.create_queue(%s)", (queue,))
            for c in consumers:
                conn.execute("SELECT pgque.subscribe(%s, %s)", (queue, c))

    def queues(self) -> list[str]:
        return [r[0] for r in self.ctx.sql("SELECT queue_name FROM pgque.queue ORDER BY 1")]

    def metadata_tables(self) -> list[str]:
        return [r[0] for r in self.ctx.sql(METADATA_TABLES)]

    def event_tables(self) -> list[str]:
        return [r[0] for r in self.ctx.sql(EVENT_TABLES)]

    def force_tick(self, queue: str) -> None:
        """A tick now (two transactions, as PgQue requires: bump, then ticker)."""
        with self.ctx.connect() as conn:
            conn.execute("SELECT pgque.force_next_tick(%s)", (queue,))
            conn.execute("SELECT pgque.ticker(%s)", (queue,))

    def ticker(self) -> Any:
        """Context manager: PgQue's ticker running (see ``Ticker``)."""
        return ticker_running(self.ctx.dsn)

    def cleanup(self) -> None:
        """Drop every queue but the produce queue (recreated empty)."""
        with self.ctx.connect() as conn:
            for q in self.queues():
                for (c,) in conn.execute("SELECT consumer_name FROM pgque.get_consumer_info(%s)", (q,)).fetchall():
                    conn.execute("SELECT pgque.unregister_consumer(%s, %s)", (q, c))
                conn.execute("SELECT pgque.drop_queue(%s)", (q,))
        self.create_queue(PRODUCE_QUEUE)

    # -- consume ------------------------------------------------------------------------------
    def fill(self, queue: str, n: int) -> None:
        """Send ``n`` events in batches of 1,000, forcing a tick every backlog_tick_every and at the end."""
        tick_every = self.ctx.settings.backlog_tick_every
        chunk = [Jsonb(payload.make(i)) for i in range(1000)]
        sent = since = 0
        with self.ctx.connect() as conn:
            while sent < n:
                k = min(1000, n - sent)
                conn.execute(SEND_BATCH, (queue, chunk[:k]))
                sent += k
                since += k
                if tick_every and since >= tick_every:
                    self.force_tick(queue)
                    since = 0
        self.force_tick(queue)

    def preload(self, n: int) -> None:
        self._queues += 1
        self._drain_queue = f"bench_drain_{self._queues}"
        self.create_queue(self._drain_queue, ("c",))
        self.fill(self._drain_queue, n)

    def fanout(self, subs: int, n: int) -> tuple[int, list[float]]:
        """``n`` events for ``subs`` consumers: bytes of the queue's event tables, each one's drain rate."""
        self._queues += 1
        queue = f"bench_fanout_{self._queues}"
        self.create_queue(queue, tuple(f"s{i}" for i in range(subs)))
        self.fill(queue, n)
        size = int(self.ctx.sql(QUEUE_EVENT_BYTES, (queue,))[0][0])
        rates = []
        for i in range(subs):
            count, start, end = drain_loop(self.ctx.dsn, queue, f"s{i}")
            rates.append(count / (end - start))
        return size, rates

    def drain(self, n: int, workers: int) -> tuple[int, float]:
        if workers != 1:
            raise NotImplementedError("PgQue's cooperative consumers are experimental: one consumer only")
        count, start, end = drain_loop(self.ctx.dsn, self._drain_queue, "c")
        return count, end - start

    # -- latency: next_batch woken by NOTIFY pgque_<queue>, PgQue's ticker running ---------------
    def latency_setup(self, rate: int) -> None:
        self._queues += 1
        self._lat_queue = f"lat_{rate}_{self._queues}"
        self.create_queue(self._lat_queue, ("lat",))

    def latency_conf(self) -> dict[str, Any]:
        return {"dsn": self.ctx.dsn, "queue": self._lat_queue}

    def latency_consumer(self, expected: int, deadline: float, record: Record, ready: threading.Event) -> None:
        queue = self._lat_queue
        seen = 0
        with self.ticker(), psycopg.connect(self.ctx.dsn, autocommit=True) as conn:
            conn.execute(f'LISTEN "pgque_{queue}"'.encode())
            ready.set()
            while seen < expected and time.time() < deadline:
                row = conn.execute(NEXT_BATCH, (queue, "lat")).fetchone()
                batch_id = row[0] if row else None
                if batch_id is None:
                    for _ in conn.notifies(timeout=0.5, stop_after=1):
                        pass
                    continue
                rows = conn.execute(BATCH_EVENTS, (batch_id,)).fetchall()
                for _id, data in rows:
                    record(int(json.loads(data)["seq"]), clock())
                seen += len(rows)
                conn.execute(FINISH_BATCH, (batch_id,))
        self.latency_consumer_kind = ("next_batch/get_batch_events/finish_batch woken by NOTIFY pgque_<queue>; "
                                      + Ticker.DESCRIPTION)
