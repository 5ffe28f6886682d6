"""PgQ 3.5 itself as the oracle of the snapshot rule: the same random transaction schedule is
applied to a pglogq queue and a PgQ queue in one database, and every batch of each is compared.

A schedule interleaves several producer connections (BEGIN, sends, savepoints rolled back,
COMMIT, ROLLBACK, single-statement sends) with ticks and reads.  Every send writes one event into
*both* queues in the producer's transaction (``pgq.insert_event`` and ``pglogq.send``, one
statement), so both see the very same transaction ids; a tick step calls PgQ's ticker and then
pglogq's (``pglogq.force_tick``), one after the other with nothing committing in between, so
both snapshots agree on every one of those transactions.  A read step drains both consumers.

What pglogq promises relative to PgQ (docs/concepts/ticks-batches-cursors.md): the batch between
two ticks is every event whose transaction is visible in the later tick's snapshot and not in
the earlier one's -- PgQ's rule; a PgQ batch is one tick, and a pglogq batch is one tick when the
consumer is not behind, or several consecutive ticks merged up to ``batch_max_events`` when it
is.  So each pglogq batch must hold exactly the events of the PgQ batches of the ticks it spans,
a batch read after each tick must span one tick, and a merged batch must stay within
``batch_max_events`` (counted by the ticks).

PgQ comes from Debian's ``postgresql-15-pgq3`` (no preload: ``CREATE EXTENSION pgq`` in the
test's own database, dropped with it).  CI installs it for the machine's PostgreSQL 15, where
``tests/sql`` runs a second time with ``PGLOGQ_REQUIRE_PGQ=1`` (its absence is then a failure);
on the embedded PostgreSQL 18, which has no pgq, the test is skipped.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

import pglogq

PQ = "pq_oracle"  # the PgQ queue
LQ = "lq_oracle"  # the pglogq queue
CONSUMER = "oracle"
BATCH_MAX_EVENTS = 4  # small, so that a consumer behind gets merged batches cut by the limit
PRODUCERS = 3
SEEDS = range(10)
STEPS = 70


@pytest.fixture
def pgq_dsn(dsn: str) -> str:
    """The test's own database (pglogq installed) with the pgq extension created in it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pgq'").fetchone() is None:
            if os.environ.get("PGLOGQ_REQUIRE_PGQ"):  # CI installs it: a skip there would hide the test
                pytest.fail("the pgq extension is not available and PGLOGQ_REQUIRE_PGQ is set")
            pytest.skip("the pgq extension (PgQ 3.5, Debian's postgresql-15-pgq3) is not available on this server")
        conn.execute("CREATE EXTENSION pgq")
    return dsn


@dataclass
class Batches:
    """The batches one system handed out, each as (first tick step, last tick step, ids)."""

    got: list[tuple[int, int, frozenset[str]]] = field(default_factory=list)

    def ids(self) -> list[str]:
        return [i for _, _, ids in self.got for i in ids]


@dataclass
class Run:
    """One schedule against both queues; tick steps are numbered 1, 2, ... (0: the start)."""

    conn: psycopg.Connection[Any]
    client: pglogq.Client
    pq_step: dict[int, int] = field(default_factory=dict)  # PgQ tick id -> tick step
    lq_step: dict[int, int] = field(default_factory=dict)  # pglogq tick id -> tick step
    pgq: Batches = field(default_factory=Batches)
    lq: Batches = field(default_factory=Batches)
    ticks: int = 0
    read_after: list[int] = field(default_factory=list)  # the tick steps a read came right after

    def value(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        row = self.conn.execute(sql, args).fetchone()
        assert row is not None
        return row[0]

    def tick(self) -> None:
        self.ticks += 1
        self.pq_step[int(self.value("SELECT pgq.ticker(%s)", (PQ,)))] = self.ticks
        self.lq_step[int(self.value("SELECT pglogq.force_tick(%s)", (LQ,)))] = self.ticks

    def read(self) -> None:
        while True:
            batch_id = self.value("SELECT pgq.next_batch(%s, %s)", (PQ, CONSUMER))
            if batch_id is None:
                break
            prev, cur = self.conn.execute(
                "SELECT prev_tick_id, tick_id FROM pgq.get_batch_info(%s)", (batch_id,)).fetchone() or (None, None)
            ids = [r[0] for r in self.conn.execute("SELECT ev_data FROM pgq.get_batch_events(%s)", (batch_id,))]
            assert len(ids) == len(set(ids))
            self.pgq.got.append((self.pq_step[prev], self.pq_step[cur], frozenset(ids)))
            self.value("SELECT pgq.finish_batch(%s)", (batch_id,))
        while True:
            page = self.client.receive(LQ, CONSUMER, max_messages=1000)
            if not page:
                break
            prev, cur = self.conn.execute(
                "SELECT batch_prev_tick, batch_cur_tick FROM pglogq.subscription"
                " WHERE batch_id = %s", (page.id,)).fetchone() or (None, None)
            ids = [m.payload["id"] for m in page]
            assert len(ids) == len(set(ids))
            self.lq.got.append((self.lq_step[prev], self.lq_step[cur], frozenset(ids)))
            assert page.ack()
        self.read_after.append(self.ticks)


def schedule(seed: int) -> Iterator[tuple[str, int]]:
    """(action, producer) steps: a random interleaving that ends with every transaction closed,
    a tick and a read.  Some seeds read after every tick (the consumers never fall behind)."""
    rng = random.Random(seed)
    open_: set[int] = set()
    read_every_tick = seed % 3 == 0
    for _ in range(STEPS):
        p = rng.randrange(PRODUCERS)
        r = rng.random()
        if r < 0.18:
            yield "tick", -1
            if read_every_tick or rng.random() < 0.3:
                yield "read", -1
        elif p not in open_:
            if r < 0.45:
                open_.add(p)
                yield "begin", p
            else:
                yield "send_alone", p
        elif r < 0.65:
            yield "send", p
        elif r < 0.72:
            yield "savepoint_rolled_back", p
        elif r < 0.9:
            open_.discard(p)
            yield "commit", p
        else:
            open_.discard(p)
            yield "rollback", p
    for p in sorted(open_):
        yield ("commit" if rng.random() < 0.7 else "rollback"), p
    yield "tick", -1
    yield "read", -1


def apply(run: Run, seed: int, producers: list[psycopg.Connection[Any]]) -> set[str]:
    """Run the seed's schedule; returns the ids whose transaction committed."""
    rng = random.Random(seed * 1000 + 1)
    pending: dict[int, list[str]] = {p: [] for p in range(PRODUCERS)}
    committed: set[str] = set()
    n = 0

    def send(p: int) -> str:
        nonlocal n
        n += 1
        ev = f"s{seed}:{n}"
        producers[p].execute(
            "SELECT pgq.insert_event(%s, 'oracle', %s), pglogq.send(%s, jsonb_build_object('id', %s::text),"
            " priority => %s)", (PQ, ev, LQ, ev, rng.choice([50, 100, 200])))
        return ev

    for action, p in schedule(seed):
        if action == "tick":
            run.tick()
        elif action == "read":
            run.read()
        elif action == "begin":
            producers[p].execute("BEGIN")
        elif action == "send":
            pending[p].append(send(p))
        elif action == "send_alone":
            committed.add(send(p))  # autocommit: its own transaction
        elif action == "savepoint_rolled_back":
            producers[p].execute("SAVEPOINT s")
            send(p)
            producers[p].execute("ROLLBACK TO SAVEPOINT s")
        elif action == "commit":
            producers[p].execute("COMMIT")
            committed.update(pending[p])
            pending[p] = []
        elif action == "rollback":
            producers[p].execute("ROLLBACK")
            pending[p] = []
    return committed


def compare(run: Run, committed: set[str]) -> None:
    """Every pglogq batch holds exactly the PgQ batches of the ticks it spans (see the module)."""
    per_tick: dict[int, frozenset[str]] = {}
    for prev, cur, ids in run.pgq.got:
        assert cur == prev + 1, "a PgQ batch is one tick"
        per_tick[cur] = ids
    assert sorted(per_tick) == list(range(1, run.ticks + 1)), "PgQ handed every tick out once"
    covered: list[int] = []
    for prev, cur, ids in run.lq.got:
        spans = list(range(prev + 1, cur + 1))
        assert spans, (prev, cur)
        covered.extend(spans)
        assert ids == frozenset().union(*(per_tick[t] for t in spans)), (prev, cur, sorted(ids))
        if len(spans) > 1:
            assert sum(len(per_tick[t]) for t in spans) <= BATCH_MAX_EVENTS, (prev, cur)
            assert not any(prev < t < cur for t in run.read_after), "merged across a read: the consumer was not behind"
    assert covered == sorted(set(covered)), "pglogq batches overlap or go backwards"
    assert all(not per_tick[t] for t in set(per_tick) - set(covered)), "a tick with events was never handed out"
    assert sorted(run.pgq.ids()) == sorted(committed)
    assert sorted(run.lq.ids()) == sorted(committed)


@pytest.mark.parametrize("seed", SEEDS)
def test_pglogq_batches_match_pgq_for_random_transaction_schedules(pgq_dsn: str, seed: int) -> None:
    with psycopg.connect(pgq_dsn, autocommit=True) as conn, pglogq.Client(pgq_dsn) as client:
        conn.execute("SELECT pgq.create_queue(%s)", (PQ,))
        # PgQ's ticker(queue) decides by itself: make it tick at every call, as force_tick does
        for key, val in (("ticker_max_count", "1"), ("ticker_max_lag", "0"), ("ticker_idle_period", "0")):
            conn.execute("SELECT pgq.set_queue_config(%s, %s, %s)", (PQ, key, val))
        conn.execute("SELECT pgq.register_consumer(%s, %s)", (PQ, CONSUMER))
        client.create_queue(LQ)
        client.set_queue_config(LQ, "batch_max_events", str(BATCH_MAX_EVENTS))
        client.subscribe(LQ, CONSUMER)
        run = Run(conn, client)
        run.pq_step[int(run.value(
            "SELECT sub_last_tick FROM pgq.subscription s JOIN pgq.consumer c ON c.co_id = s.sub_consumer"
            " WHERE c.co_name = %s", (CONSUMER,)))] = 0
        run.lq_step[int(run.value(
            "SELECT last_tick FROM pglogq.subscription WHERE consumer_name = %s AND parent_id IS NULL",
            (CONSUMER,)))] = 0
        producers = [psycopg.connect(pgq_dsn, autocommit=True) for _ in range(PRODUCERS)]
        try:
            committed = apply(run, seed, producers)
        finally:
            for p in producers:
                p.close()
        assert run.ticks > 3 and committed, "a schedule worth comparing"
        compare(run, committed)
