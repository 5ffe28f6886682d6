"""Model-based test of share consumers: a Hypothesis state machine drives workers of one share
consumer (and an ordinary consumer beside it) against an in-memory model.

Rules: send, send_batch, tick, a worker's receive (a lease of 1..4 events, handlers not counted
as started: ``start_first=0``), ack, nack to a retry, nack to the dead-letter queue, cede of the
unstarted tail, a worker dying (silent past ``dead_interval``: its lease is taken over by the
next worker that asks), its late ack (refused), maintenance (retry pump), a re-install of the
schema and a rotation of the metadata between any two steps.

The model keeps what the share consumer still owes (an event once, plus once per retry), each
live worker's lease, and the events of dead workers' leases not taken over yet.  Checked at every
step: a lease holds only owed events, never one held by another live worker; while a dead
worker's lease waits, the next lease comes from it (before any new event); a worker asking again
before ack gets its lease again; a late ack of a lease taken over is refused.  At the end every
worker is acknowledged and a fresh worker drains: the share consumer got exactly what was owed,
each once, and the ordinary consumer every event once.

One database for the whole test, a fresh queue per example; derandomized, so deterministic.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test
from psycopg.conninfo import make_conninfo

import pglogq
from pglogq.errors import StaleBatch, UnknownBatch
from tests.support.draining import drain

WORKERS = ("w1", "w2", "w3")
_queues = itertools.count()


class ShareModel(RuleBasedStateMachine):
    dsn: str = ""
    client: pglogq.Client

    def __init__(self) -> None:
        super().__init__()
        self.c = type(self).client
        self.q = f"s{os.getpid()}_{next(_queues)}"
        self.c.create_queue(self.q)
        self.c.set_queue_config(self.q, "max_retries", 5)
        self.c.subscribe(self.q, "share", share=True)
        self.c.subscribe(self.q, "plain")
        self.owed: Counter[int] = Counter()  # the share consumer's deliveries still owed
        self.sent: list[int] = []
        self.held: dict[str, pglogq.Batch] = {}  # live worker -> the page of its lease it holds
        self.rest: dict[str, set[int]] = {}  # live worker -> the events of its lease after that page
        # leases waiting to be taken over, oldest first: a dead worker's (with its batch, whose
        # late ack must then be refused) or the tail a worker ceded (None)
        self.orphans: list[tuple[set[int], pglogq.Batch | None]] = []
        self.refusable: list[pglogq.Batch] = []
        self.retrying: set[int] = set()
        self.dead: set[int] = set()
        self.names = itertools.count(1)
        self.alive = list(WORKERS)

    @initialize()
    def start(self) -> None:
        self.send_batch(3)
        self.tick()

    # -- producing and maintenance -----------------------------------------------------------

    @rule(n=st.integers(1, 3))
    def send(self, n: int) -> None:
        for k in range(n):
            i = self.c.send(self.q, {"k": k})
            self.sent.append(i)
            self.owed[i] += 1

    @rule(n=st.integers(1, 5))
    def send_batch(self, n: int) -> None:
        ids = self.c.send_batch(self.q, [{"k": k} for k in range(n)])
        self.sent += ids
        self.owed.update(ids)

    @rule()
    def tick(self) -> None:
        self.c.tick(self.q, force=True)

    @rule()
    def maintain(self) -> None:
        self.c.maintain()  # every retry is due (retry_after 0)
        self.owed.update(self.retrying)
        self.retrying.clear()
        self.c.tick(self.q, force=True)

    @rule()
    def reinstall(self) -> None:
        self.c.install_schema()

    @rule()
    def rotate_metadata(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pglogq.maint_rotate_meta(true)")

    # -- workers ---------------------------------------------------------------------------

    def _others(self, name: str) -> set[int]:
        """Events no other worker may be given: other live workers' pages and lease rests, and
        the dead workers' leases not taken over yet."""
        out: set[int] = set()
        for n, b in self.held.items():
            if n != name:
                out |= {m.msg_id for m in b}
        for n, r in self.rest.items():
            if n != name:
                out |= r
        for o, _ in self.orphans:
            out |= o
        return out

    @rule(w=st.sampled_from(range(3)), size=st.integers(1, 4))
    def receive(self, w: int, size: int) -> None:
        name = self.alive[w]
        if name in self.held:
            again = self.c.receive(self.q, "share", worker=name, max_messages=len(self.held[name].messages),
                                   start_first=0)
            assert [m.msg_id for m in again] == [m.msg_id for m in self.held[name]], name
            return
        lease = self.c.receive(self.q, "share", worker=name, max_messages=size, start_first=0)
        ids = {m.msg_id for m in lease}
        if not ids:
            assert not self.rest.get(name) and not self.orphans, ("nothing given", self.rest, self.orphans)
            return
        assert len(ids) <= size
        mine = self.rest.get(name, set())
        if mine:
            assert ids <= mine, ("not from the worker's own lease", ids, mine)
            mine -= ids
        elif self.orphans:
            # a dead worker's (or a ceded) lease is taken over before any new event, whole
            (o, stale) = self.orphans[0]
            assert ids <= o, ("not from the oldest waiting lease", ids, self.orphans)
            self.orphans.pop(0)
            self.rest[name] = o - ids
            if stale is not None:
                self.refusable.append(stale)
        else:
            assert not ids & self._others(name), ("held by another live worker", ids)
        for i in ids:
            assert self.owed[i] > 0, ("not owed", i)
        self.held[name] = lease

    def _done(self, name: str, lease: pglogq.Batch) -> None:
        for m in lease:
            self.owed[m.msg_id] -= 1
        if not self.rest.get(name):
            self.rest.pop(name, None)

    @rule(w=st.sampled_from(range(3)))
    def ack(self, w: int) -> None:
        name = self.alive[w]
        lease = self.held.pop(name, None)
        if lease is None:
            return
        assert lease.ack() is True
        self._done(name, lease)

    @rule(w=st.sampled_from(range(3)), dead=st.booleans())
    def nack_first(self, w: int, dead: bool) -> None:
        name = self.alive[w]
        lease = self.held.pop(name, None)
        if lease is None:
            return
        first = lease.messages[0]
        verdict = lease.nack(first, retry_after=timedelta(0), dead=dead, reason="model")
        assert verdict == ("dead" if dead else "retry")
        (self.dead if dead else self.retrying).add(first.msg_id)
        assert lease.ack() is True
        self._done(name, lease)

    @rule(w=st.sampled_from(range(3)), keep=st.integers(0, 3))
    def cede(self, w: int, keep: int) -> None:
        name = self.alive[w]
        lease = self.held.get(name)
        if lease is None:
            return
        k = min(keep, len(lease.messages) - 1)
        rest = {m.msg_id for m in lease.messages[k + 1:]} | self.rest.pop(name, set())
        assert lease.cede(keep=lease.messages[k]) is bool(rest)
        assert lease.ack() is True
        self.held.pop(name)
        for m in lease.messages[: k + 1]:
            self.owed[m.msg_id] -= 1
        if rest:  # it waits for the next worker that asks, like a dead worker's lease
            self.orphans.append((rest, None))

    @precondition(lambda self: any(n in self.held for n in self.alive))
    @rule(w=st.sampled_from(range(3)))
    def worker_dies(self, w: int) -> None:
        name = self.alive[w]
        lease = self.held.pop(name, None)
        if lease is None:
            return
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                         " WHERE queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s)"
                         " AND worker_name = %s", (self.q, name))
        self.orphans.append(({m.msg_id for m in lease} | self.rest.pop(name, set()), lease))
        self.alive[w] = f"n{next(self.names)}"  # a new process takes its place, under a new name

    @precondition(lambda self: bool(self.refusable))
    @rule()
    def late_ack(self) -> None:
        """A dead worker's ack after its lease was taken over: refused, nothing changes."""
        with pytest.raises((StaleBatch, UnknownBatch)):
            self.refusable.pop(0).ack()

    def teardown(self) -> None:
        try:
            for lease in self.held.values():
                assert lease.ack() is True
                for m in lease:
                    self.owed[m.msg_id] -= 1
            for name, rest in self.rest.items():  # a live worker finishes its lease
                while rest:
                    page = self.c.receive(self.q, "share", worker=name, max_messages=4, start_first=0)
                    ids = {m.msg_id for m in page}
                    assert ids and ids <= rest, ("the rest of the lease", name, ids, rest)
                    rest -= ids
                    assert page.ack() is True
                    for i in ids:
                        self.owed[i] -= 1
            self.c.maintain()
            self.owed.update(self.retrying)
            self.c.tick(self.q, force=True)
            got = Counter(m.msg_id for m in drain(self.c, self.q, "share", worker="drainer"))
            owed = +self.owed
            assert got == owed, ("share consumer", "still owed" if owed - got else "delivered twice",
                                 owed - got, got - owed)
            assert {d.msg_id for d in self.c.dlq_search(self.q, "share", limit=1000)} == self.dead
            plain = [m.msg_id for m in drain(self.c, self.q, "plain")]
            assert sorted(plain) == sorted(self.sent), "the ordinary consumer"
        finally:
            self.c.drop_queue(self.q, force=True)


@pytest.fixture(scope="module")
def model_dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    name = f"pglogq_model_share_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'.encode())
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def test_share_consumer_behaves_like_its_model(model_dsn: str) -> None:
    ShareModel.dsn = model_dsn
    with pglogq.Client(model_dsn) as client:
        ShareModel.client = client
        run_state_machine_as_test(
            ShareModel,
            settings=settings(
                max_examples=30,
                stateful_step_count=30,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )


def test_the_share_model_catches_an_event_given_twice(model_dsn: str) -> None:
    """The checks can fail: a lease that overlaps another live worker's is reported."""
    with pglogq.Client(model_dsn) as client, psycopg.connect(model_dsn, autocommit=True) as conn:
        ShareModel.dsn, ShareModel.client = model_dsn, client
        m = ShareModel()
        m.send_batch(3)
        m.tick()
        m.receive(0, 2)
        # move the consumer's hand-out frontier back behind the API's back: the next lease repeats events
        conn.execute("UPDATE pglogq.sub_state SET page_prio = NULL, page_txid = NULL, page_id = NULL"
                     " WHERE sub_id = (SELECT sub_id FROM pglogq.subscriber WHERE consumer_name = 'share'"
                     " AND parent_id IS NULL AND queue_id = (SELECT queue_id FROM pglogq.queue"
                     " WHERE queue_name = %s))", (m.q,))
        with pytest.raises(AssertionError, match="held by another live worker"):
            m.receive(1, 4)
        client.drop_queue(m.q, force=True)


KEYS = ("a", "b", "c", None)  # None: an event without a key


class KeyShareModel(RuleBasedStateMachine):
    """The same share consumer on a queue of 2 partitions with keyed sends: a worker's lease is a
    partition's page.  Rules: keyed and unkeyed sends, ticks, a worker's receive (pages of 1..4),
    ack, nack of a page's first event to a retry (the partition holds at it, no delay) or to the
    dead-letter queue, a worker dying (its page comes whole to the next worker that takes its
    partition), a re-install and a rotation of the metadata.

    Checked at every step: a page holds only owed events; for each key, its events in a page are
    the key's first owed events, in send order (a key's events start in send order, a failed one
    again before the later ones); no two live workers hold events of one key (nor of one
    partition) at once.  At the end a fresh worker drains: each key's owed events in send order,
    nothing twice, the dead letters as nacked."""

    dsn: str = ""
    client: pglogq.Client

    def __init__(self) -> None:
        super().__init__()
        self.c = type(self).client
        self.q = f"k{os.getpid()}_{next(_queues)}"
        self.c.create_queue(self.q, partitions=2)
        self.c.set_queue_config(self.q, "max_retries", 100)
        self.c.set_queue_config(self.q, "retry_delay", "0")
        self.c.subscribe(self.q, "share", share=True)
        self.pending: dict[str | int, list[int]] = {}  # key (an unkeyed event: its id) -> owed, in send order
        self.key_of: dict[int, str | int] = {}
        self.held: dict[str, pglogq.Batch] = {}
        self.dead: set[int] = set()
        self.names = itertools.count(1)
        self.alive = list(WORKERS)

    @initialize()
    def start(self) -> None:
        self.send(0, 2)
        self.tick()

    @rule(k=st.sampled_from(range(len(KEYS))), n=st.integers(1, 3))
    def send(self, k: int, n: int) -> None:
        for _ in range(n):
            i = self.c.send(self.q, {"k": k}, key=KEYS[k])
            key: str | int = KEYS[k] or i
            self.key_of[i] = key
            self.pending.setdefault(key, []).append(i)

    @rule()
    def tick(self) -> None:
        self.c.tick(self.q, force=True)

    @rule()
    def reinstall(self) -> None:
        self.c.install_schema()

    @rule()
    def rotate_metadata(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pglogq.maint_rotate_meta(true)")

    def _check_page(self, name: str, ids: list[int]) -> None:
        by_key: dict[str | int, list[int]] = {}
        for i in ids:
            assert i in self.key_of and i in self.pending.get(self.key_of[i], []), ("not owed", i)
            by_key.setdefault(self.key_of[i], []).append(i)
        for key, got in by_key.items():
            assert got == self.pending[key][: len(got)], ("a key out of order", key, got, self.pending[key])
        parts = {self._partition(i) for i in ids}
        assert len(parts) == 1, ("a page of one partition", ids)
        for other, b in self.held.items():
            if other != name and b.messages:
                assert not {self.key_of[m.msg_id] for m in b} & set(by_key), ("a key held twice", other, ids)
                assert self._partition(b.messages[0].msg_id) not in parts, ("a partition held twice", other, ids)

    def _partition(self, msg_id: int) -> int:
        key = self.key_of[msg_id]
        return pglogq.key_partition(key, 2) if isinstance(key, str) else msg_id % 2

    @rule(w=st.sampled_from(range(3)), size=st.integers(1, 4))
    def receive(self, w: int, size: int) -> None:
        name = self.alive[w]
        if name in self.held:
            again = self.c.receive(self.q, "share", worker=name, max_messages=len(self.held[name].messages),
                                   start_first=0)
            assert [m.msg_id for m in again] == [m.msg_id for m in self.held[name]], name
            return
        page = self.c.receive(self.q, "share", worker=name, max_messages=size, start_first=0)
        ids = [m.msg_id for m in page]
        if not ids:
            return
        assert len(ids) <= size
        self._check_page(name, ids)
        self.held[name] = page

    def _done(self, ids: list[int]) -> None:
        for i in ids:
            self.pending[self.key_of[i]].remove(i)

    @rule(w=st.sampled_from(range(3)))
    def ack(self, w: int) -> None:
        page = self.held.pop(self.alive[w], None)
        if page is not None:
            assert page.ack() is True
            self._done([m.msg_id for m in page])

    @rule(w=st.sampled_from(range(3)), dead=st.booleans(), at=st.integers(0, 3))
    def nack(self, w: int, dead: bool, at: int) -> None:
        page = self.held.pop(self.alive[w], None)
        if page is None:
            return
        k = min(at, len(page.messages) - 1)
        failed = page.messages[k]
        assert page.nack(failed, retry_after=timedelta(0), dead=dead, reason="model") == ("dead" if dead else "retry")
        assert page.ack() is True
        # acknowledged up to the failed event; it (unless dead) and the rest of the page come again
        self._done([m.msg_id for m in page.messages[:k]])
        if dead:
            self.dead.add(failed.msg_id)
            self._done([failed.msg_id])

    @precondition(lambda self: any(n in self.held for n in self.alive))
    @rule(w=st.sampled_from(range(3)))
    def worker_dies(self, w: int) -> None:
        name = self.alive[w]
        if self.held.pop(name, None) is None:
            return
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                         " WHERE queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s)"
                         " AND lease_worker = %s", (self.q, name))
        self.alive[w] = f"n{next(self.names)}"

    def teardown(self) -> None:
        try:
            for page in self.held.values():
                assert page.ack() is True
                self._done([m.msg_id for m in page])
            self.c.tick(self.q, force=True)
            got = [m.msg_id for m in drain(self.c, self.q, "share", worker="drainer")]
            assert len(got) == len(set(got)), "delivered twice"
            for key, owed in self.pending.items():
                assert [i for i in got if self.key_of[i] == key] == owed, ("at the end", key)
            assert set(got) == {i for owed in self.pending.values() for i in owed}
            assert {d.msg_id for d in self.c.dlq_search(self.q, "share", limit=1000)} == self.dead
        finally:
            self.c.drop_queue(self.q, force=True)


def test_share_consumer_on_a_partitioned_queue_behaves_like_its_model(model_dsn: str) -> None:
    KeyShareModel.dsn = model_dsn
    with pglogq.Client(model_dsn) as client:
        KeyShareModel.client = client
        run_state_machine_as_test(
            KeyShareModel,
            settings=settings(
                max_examples=25,
                stateful_step_count=30,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )


def test_the_key_model_catches_a_key_held_twice(model_dsn: str) -> None:
    """The checks can fail: a page of a partition another live worker holds is reported."""
    with pglogq.Client(model_dsn) as client, psycopg.connect(model_dsn, autocommit=True) as conn:
        KeyShareModel.dsn, KeyShareModel.client = model_dsn, client
        m = KeyShareModel()
        m.send(0, 3)
        m.tick()
        m.receive(0, 1)
        # free the partition behind the API's back, as if the holder's page were acknowledged
        conn.execute("UPDATE pglogq.sub_state SET page_end_prio = NULL, page_end_txid = NULL, page_end_id = NULL"
                     " WHERE page_end_txid IS NOT NULL AND sub_id IN (SELECT sub_id FROM pglogq.subscriber"
                     " WHERE queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s))", (m.q,))
        with pytest.raises(AssertionError, match="a key"):
            m.receive(1, 4)
        client.drop_queue(m.q, force=True)
