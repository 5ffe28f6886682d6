"""Model-based test: a Hypothesis state machine drives the real API against an in-memory model.

Rules: send, send_batch, send in a transaction that rolls back, send with a savepoint rolled
back, tick, receive (a consumer "crashing" is a receive that forgets its page: the same page
must come back), ack, nack, maintenance (retry pump), forced rotation, DLQ replay,
subscribe / unsubscribe, seek to the latest tick and to the earliest one (a replay), cancel of an
event on which no handler has started, pruning, retention with a limit nobody exceeds, and a
re-install of the schema between any two steps.  A consumer may receive
as the consumer runtime does (``start_first``, then ``mark_started`` before each handler):
cancel then withdraws received events not started yet (``mark_started`` reports them, the ack
covers them), and receiving such a page again after starts is a crash: every started event
counts a failed attempt (``retry_count + 1``), the page comes back halved, and a crashing event
that stands alone goes to the dead-letter queue after ``max_retries + 1`` attempts.

The model keeps, per consumer, a multiset of the deliveries it still owes (an event once, plus
once per retry or replay), the consumer's open page, its pending retries and dead letters, and
the events not yet covered by a tick (with their owner: retried and replayed events go to one
consumer only).  Checked at every step: a page holds only owed events, never a rolled-back one;
receiving again before ack returns the same page; pages are in delivery order; nack says
'retry' or 'dead' exactly by retry_count; retry and dead-letter counts match the database.  At
the end every consumer is drained: it gets exactly what is owed, each once.

One database for the whole test, a fresh queue per example; derandomized, so deterministic.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.conninfo import make_conninfo

import pglogq

CONSUMERS = ("a", "b", "c")
MAX_RETRIES = 1
_queues = itertools.count()


class QueueModel(RuleBasedStateMachine):
    dsn: str = ""
    client: pglogq.Client

    def __init__(self) -> None:
        super().__init__()
        self.c = type(self).client
        self.q = f"m{os.getpid()}_{next(_queues)}"
        self.c.create_queue(self.q)
        self.c.set_queue_config(self.q, "max_retries", MAX_RETRIES)
        self.gen: dict[str, int] = {}  # subscribed consumer → generation (owner token)
        self.gens = itertools.count(1)
        self.owed: dict[str, Counter[int]] = {}
        self.page: dict[str, list[pglogq.Message]] = {}
        self.retry: dict[str, set[int]] = {}
        self.dead: dict[str, set[int]] = {}
        self.unticked: Counter[tuple[int, int | None]] = Counter()  # (msg id, owner generation)
        self.rolled: set[int] = set()
        self.sent: set[int] = set()  # committed sends (original events, every consumer's)
        self.fresh: set[int] = set()  # sent since the last rotation: still stored for sure
        self.handed: set[int] = set()  # a handler started on it (receive without start_first: all the page)
        self.marks: dict[str, int] = {}  # consumer -> events of its open page marked started (marking pages only)
        self.cancelled: set[int] = set()  # cancel() said true: never delivered again, replay included
        self.replayable: dict[str, set[int]] = {}  # a seek back may deliver these once more

    @initialize()
    def start(self) -> None:
        """Two consumers and a ticked batch, so that consuming rules have work from step one."""
        self.subscribe("a")
        self.subscribe("b")
        self.send_batch(3)
        self.tick()

    # -- producing ---------------------------------------------------------------------------

    def committed(self, ids: list[int]) -> None:
        self.sent.update(ids)
        self.fresh.update(ids)
        for i in ids:
            self.unticked[(i, None)] += 1
            for c in self.gen:
                self.owed[c][i] += 1

    @rule(n=st.integers(1, 3))
    def send(self, n: int) -> None:
        self.committed([self.c.send(self.q, {"k": k}) for k in range(n)])

    @rule(n=st.integers(1, 4))
    def send_batch(self, n: int) -> None:
        self.committed(self.c.send_batch(self.q, [{"k": k} for k in range(n)]))

    @rule()
    def send_rolled_back(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            self.rolled.add(self.c.send(self.q, {"rolled": True}, conn=conn))
            conn.rollback()

    @rule()
    def send_with_savepoint(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            with pytest.raises(ZeroDivisionError), conn.transaction():
                self.rolled.add(self.c.send(self.q, {"rolled": True}, conn=conn))
                raise ZeroDivisionError
            kept = self.c.send(self.q, {"kept": True}, conn=conn)
            conn.commit()
        self.committed([kept])

    # -- ticking and maintenance ---------------------------------------------------------------

    @rule()
    def tick(self) -> None:
        self.c.tick(self.q, force=True)
        self.unticked.clear()

    @rule()
    def maintain(self) -> None:
        self.c.maintain()  # pumps every retry (retry_after 0: all due)
        for c, ids in self.retry.items():
            for i in ids:
                self.owed[c][i] += 1
                self.unticked[(i, self.gen[c])] += 1
            ids.clear()

    @rule()
    def maintain_and_tick(self) -> None:
        """Retries come back in the next batch: pump then tick (drawn as one step, often)."""
        self.maintain()
        self.tick()

    @rule()
    def rotate(self) -> None:
        self.c.rotate(self.q)
        self.fresh.clear()

    @rule()
    def prune(self) -> None:
        """Pruning removes only what nobody can need: every later step still holds."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SELECT pglogq.maint_prune(%s)", (self.q,))

    @rule()
    def retention_within_the_limit(self) -> None:
        """A limit of an hour moves nobody here (every event is seconds old): nothing skipped."""
        self.c.set_queue_config(self.q, "max_consumer_lag", "1 hour")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            moved = conn.execute("SELECT pglogq.maint_retention(%s)", (self.q,)).fetchone()
        assert moved == (0,)
        assert all(i.skipped_events == 0 for i in self.c.consumer_info(self.q))

    @rule()
    def reinstall(self) -> None:
        """install_schema is safe at every start-up: open pages, cursors and retries survive it."""
        self.c.install_schema()

    # -- consuming ---------------------------------------------------------------------------

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data(), size=st.sampled_from([1, 2, 5, 100]))
    def receive(self, data: st.DataObject, size: int) -> None:
        self._receive(data.draw(st.sampled_from(sorted(self.gen))), size)

    def _receive(self, c: str, size: int, start_first: int | None = None) -> None:
        old = self.page.get(c)
        marked = self.marks.get(c)
        got = self.c.receive(self.q, c, max_messages=size, start_first=start_first).messages
        ids = [m.msg_id for m in got]
        assert not set(ids) & self.rolled, "a rolled-back send was delivered"
        assert not set(ids) & self.cancelled, "a cancelled event was delivered"
        keys = [(-m.priority, int(m.txid), m.msg_id) for m in got]
        assert keys == sorted(keys), "page out of delivery order"
        assert len({m.batch_id for m in got}) <= 1
        if old and marked:
            # a crash: the page was handed out with started handlers and never acknowledged
            suspects = [m for m in old[:marked] if m.msg_id not in self.cancelled]
            again = {m.msg_id: m.retry_count + 1 for m in suspects}
            if len(suspects) == 1 and suspects[0].retry_count + 1 > MAX_RETRIES:
                dead = suspects[0].msg_id  # it crashed alone too often: buried, its place passed
                self.dead[c].add(dead)
                self.owed[c][dead] -= 1
                assert dead not in ids, (dead, ids)
            elif suspects:
                assert got and got[0].msg_id == suspects[0].msg_id, (suspects, ids)
                assert len(got) <= max(1, len(suspects) // 2), (len(suspects), ids)
            for m in got:
                if m.msg_id in again:
                    assert m.retry_count == again[m.msg_id], (m, again)
            owed = self.owed[c].copy()
            for i in ids:
                assert owed[i] > 0 or i in self.replayable[c], f"{c} got {i}, which it is not owed"
                owed[i] -= 1
        elif old:
            # before the ack, the same batch and the same start of page come back (less what was
            # cancelled meanwhile): under the same batch id when the page ends where it did,
            # else under a new one, and the earlier hand-out's ack is refused
            old_ids = [m.msg_id for m in old if m.msg_id not in self.cancelled]
            if got:
                same_end = got[-1].msg_id == old[-1].msg_id
                assert (got[0].batch_id == old[0].batch_id) is same_end, (old, got)
                if not same_end:
                    with pytest.raises(pglogq.StaleBatch):
                        self.c.ack(old[0].batch_id, last=old[-1])
            else:
                assert not old_ids, (old_ids, ids)
            n = min(len(ids), len(old_ids))
            assert ids[:n] == old_ids[:n]
        else:
            owed = self.owed[c].copy()
            for i in ids:
                assert owed[i] > 0 or i in self.replayable[c], f"{c} got {i}, which it is not owed"
                owed[i] -= 1
        if start_first is None:
            self.handed.update(ids)
            self.marks.pop(c, None)
        else:
            self.marks[c] = min(start_first, len(got))
            self.handed.update(ids[: self.marks[c]])
        self.page[c] = got

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data(), size=st.sampled_from([1, 2, 5, 100]), first=st.sampled_from([0, 1, 3]))
    def receive_marking(self, data: st.DataObject, size: int, first: int) -> None:
        """Receive as the consumer runtime does: it marks handler starts itself."""
        self._receive(data.draw(st.sampled_from(sorted(self.gen))), size, first)

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data(), size=st.sampled_from([2, 5, 100]))
    def cancel_after_receive(self, data: st.DataObject, size: int) -> None:
        """The case that motivated start marks: a worker received a page and runs its first
        event; a later event of the page, started by no consumer, is cancelled; the worker never starts it."""
        c = data.draw(st.sampled_from(sorted(self.gen)))
        self._receive(c, size, 1)
        page = self.page.get(c) or []
        free = [m for m in page[1:] if m.msg_id in self.fresh - self.handed - self.cancelled]
        if not free:
            return
        m = data.draw(st.sampled_from(free))
        assert self.c.cancel(self.q, m.msg_id) is True, m
        self._cancelled(m.msg_id)
        assert self.c.mark_started(page[-1]) == sorted(
            x.msg_id for x in page[self.marks[c]:] if x.msg_id in self.cancelled)
        self.handed.update(x.msg_id for x in page if x.msg_id not in self.cancelled)
        self.marks[c] = len(page)

    @precondition(lambda self: any(v and c in self.marks for c, v in self.page.items()))
    @rule(data=st.data())
    def mark_started(self, data: st.DataObject) -> None:
        """A handler starts: what was cancelled up to it is reported, never to be started."""
        c = data.draw(st.sampled_from(sorted(c for c, v in self.page.items() if v and c in self.marks)))
        page = self.page[c]
        j = data.draw(st.integers(0, len(page) - 1))
        gone = self.c.mark_started(page[j])
        done = self.marks[c]
        fresh = page[done : j + 1]
        assert gone == sorted(m.msg_id for m in fresh if m.msg_id in self.cancelled), (gone, fresh)
        self.handed.update(m.msg_id for m in fresh if m.msg_id not in self.cancelled)
        self.marks[c] = max(done, j + 1)

    @precondition(lambda self: any(self.page.values()))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(k for k, v in self.page.items() if v)))
        self.ack_all(c)

    @precondition(lambda self: any(self.page.values()))
    @rule(data=st.data())
    def nack(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(k for k, v in self.page.items() if v)))
        m = data.draw(st.sampled_from(self.page[c]))
        if m.msg_id in self.cancelled:
            return  # cancelled after it was received: never started, nothing to nack
        result = self.c.nack(m, retry_after=timedelta(0))
        assert result == ("dead" if m.retry_count >= MAX_RETRIES else "retry"), (m, result)
        (self.dead if result == "dead" else self.retry)[c].add(m.msg_id)
        self.handed.add(m.msg_id)

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data(), size=st.sampled_from([2, 100]), fail=st.booleans())
    def consume_one_page(self, data: st.DataObject, size: int, fail: bool) -> None:
        """receive, maybe nack the first event, ack: the common path, drawn more often."""
        c = data.draw(st.sampled_from(sorted(self.gen)))
        self._receive(c, size)
        if not self.page.get(c):
            return
        if fail:
            m = max(self.page[c], key=lambda x: x.retry_count)  # retried ones first: reach the DLQ
            result = self.c.nack(m, retry_after=timedelta(0))
            assert result == ("dead" if m.retry_count >= MAX_RETRIES else "retry"), (m, result)
            (self.dead if result == "dead" else self.retry)[c].add(m.msg_id)
        self.ack_all(c)

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data())
    def fail_everything(self, data: st.DataObject) -> None:
        """A consumer fails every event of its next pages until they are dead-lettered."""
        c = data.draw(st.sampled_from(sorted(self.gen)))
        for _ in range(MAX_RETRIES + 1):
            self._receive(c, 100)
            for m in self.page.get(c) or []:
                result = self.c.nack(m, retry_after=timedelta(0))
                assert result == ("dead" if m.retry_count >= MAX_RETRIES else "retry"), (m, result)
                (self.dead if result == "dead" else self.retry)[c].add(m.msg_id)
            if self.page.get(c):
                self.ack_all(c)
            self.maintain_and_tick()

    @precondition(lambda self: any(self.dead.values()))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(k for k, v in self.dead.items() if v)))
        letters = self.c.dlq_inspect(self.q, c)
        assert sorted(d.msg_id for d in letters) == sorted(self.dead[c])
        letter = data.draw(st.sampled_from(letters))
        assert self.c.dlq_replay(letter.dead_id) == letter.msg_id
        self.dead[c].discard(letter.msg_id)
        self.owed[c][letter.msg_id] += 1
        self.unticked[(letter.msg_id, self.gen[c])] += 1

    # -- registry and cursors ----------------------------------------------------------------

    @rule(c=st.sampled_from(CONSUMERS))
    def subscribe(self, c: str) -> None:
        created = self.c.subscribe(self.q, c)
        assert created is (c not in self.gen)
        if created:
            self.gen[c] = next(self.gens)
            self.owed[c] = Counter({i: n for (i, owner), n in self.unticked.items() if owner is None})
            self.retry[c], self.dead[c] = set(), set()
            self.replayable[c] = set()

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data())
    def unsubscribe(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.gen)))
        assert self.c.unsubscribe(self.q, c) is True
        g = self.gen.pop(c)
        for key in [k for k in self.unticked if k[1] == g]:
            del self.unticked[key]  # retried for it only: nobody gets them any more
        for d in (self.owed, self.page, self.retry, self.dead, self.replayable, self.marks):
            d.pop(c, None)  # type: ignore[attr-defined]

    def drop_open_batch(self, c: str) -> None:
        """A forced seek drops the consumer's open batch, which then counts as handed for cancel
        (docs/reference/sql-failures.md#cancel): the model, not knowing the batch's bounds,
        counts every ticked event the consumer was owed."""
        unticked = {i for (i, _owner) in self.unticked}
        self.handed.update(i for i, n in self.owed[c].items() if n > 0 and i not in unticked)
        self.page.pop(c, None)
        self.marks.pop(c, None)

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data())
    def seek_latest(self, data: st.DataObject) -> None:
        c = data.draw(st.sampled_from(sorted(self.gen)))
        self.drop_open_batch(c)
        self.c.seek(self.q, c, to="latest", force=True)
        g = self.gen[c]
        self.owed[c] = Counter({i: n for (i, owner), n in self.unticked.items() if owner in (None, g)})
        self.page.pop(c, None)

    @precondition(lambda self: bool(self.gen))
    @rule(data=st.data())
    def seek_earliest(self, data: st.DataObject) -> None:
        """A replay: what is owed still comes; stored events may come again; cancelled never."""
        c = data.draw(st.sampled_from(sorted(self.gen)))
        self.drop_open_batch(c)
        self.c.seek(self.q, c, to="earliest", force=True)
        self.replayable[c] |= self.sent - self.cancelled

    @precondition(lambda self: bool(self.fresh - self.handed - self.cancelled))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        """An event no handler started on (whatever the cursors passed, also one in a page received
        by a consumer that marks its starts) can be cancelled, for good."""
        i = data.draw(st.sampled_from(sorted(self.fresh - self.handed - self.cancelled)))
        assert self.c.cancel(self.q, i) is True, i
        self._cancelled(i)

    def _cancelled(self, i: int) -> None:
        self.cancelled.add(i)
        for c in self.owed:
            self.owed[c][i] = 0
        self.unticked.pop((i, None), None)
        for ids in self.replayable.values():
            ids.discard(i)

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def counts_match_the_database(self) -> None:
        info = {i.consumer_name: i for i in self.c.consumer_info(self.q)}
        assert set(info) == set(self.gen)
        for c in self.gen:
            assert info[c].retry_depth == len(self.retry[c]), c
            assert info[c].dead_letters == len(self.dead[c]), c
            assert all(n >= 0 for n in self.owed[c].values()), c

    def teardown(self) -> None:
        """Drain every consumer: exactly what is owed arrives, each once."""
        try:
            for _ in range(4):
                self.maintain()
                self.tick()
                for c in sorted(self.gen):
                    while True:
                        self._receive(c, 50)
                        if not self.page.get(c):
                            break
                        self.ack_all(c)
            for c in self.gen:
                assert +self.owed[c] == Counter(), f"{c} still owed {+self.owed[c]}"
        finally:
            self.c.drop_queue(self.q, force=True)

    def ack_all(self, c: str) -> None:
        page = self.page.pop(c)
        self.marks.pop(c, None)
        assert self.c.ack(page[0].batch_id) is True
        for m in page:
            self.handed.add(m.msg_id)
            if m.msg_id in self.cancelled:
                continue  # cancelled after it was received: the ack covers it, it never ran
            if self.owed[c][m.msg_id] > 0:
                self.owed[c][m.msg_id] -= 1
            else:  # a second delivery after a seek back
                assert m.msg_id in self.replayable[c], (c, m.msg_id)


@pytest.fixture(scope="module")
def model_dsn(server_dsn: str, template_db: str) -> Iterator[str]:
    name = f"pglogq_model_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'.encode())
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def test_queue_behaves_like_its_model(model_dsn: str) -> None:
    QueueModel.dsn = model_dsn
    with pglogq.Client(model_dsn) as client:
        QueueModel.client = client
        run_state_machine_as_test(
            QueueModel,
            settings=settings(
                max_examples=50,
                stateful_step_count=30,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )


def test_the_model_catches_a_lost_event(model_dsn: str) -> None:
    """The teardown check can fail: an event deleted behind the API's back is reported."""
    with pglogq.Client(model_dsn) as client, psycopg.connect(model_dsn, autocommit=True) as conn:
        QueueModel.dsn, QueueModel.client = model_dsn, client
        m = QueueModel()
        m.subscribe("a")
        m.send(2)
        conn.execute("DELETE FROM pglogq.event WHERE ev_queue = (SELECT queue_id FROM pglogq.queue"
                     " WHERE queue_name = %s) AND ev_id = (SELECT max(ev_id) FROM pglogq.event)", (m.q,))
        with pytest.raises(AssertionError, match="still owed"):
            m.teardown()


_TUPLE_KEYS = re.compile(
    r"\(\s*(?:-[\w.]*ev_priority(?:::\w+)?\s*,\s*)?[\w.]*ev_txid\s*,\s*[\w.]*ev_id\s*\)", re.I
)
_ID_AS_CURSOR = re.compile(
    r"[\w.]*\bev_id\s*(?:<|>|<=|>=)(?!\s*\()|(?:<|>|<=|>=)\s*[\w.]*\bev_id\b|order\s+by\s+[\w.]*\bev_id\b"
    r"|\b(?:max|min)\s*\(\s*[\w.]*\bev_id\b",
    re.I,
)


def ev_id_cursor_uses(sql: str) -> list[str]:
    """Places where ev_id is compared or ordered on its own (not as the tie-breaker of a
    (txid, id) key): ids come from a sequence and are not in commit order."""
    return _ID_AS_CURSOR.findall(_TUPLE_KEYS.sub("(key)", sql))


def test_no_function_uses_ev_id_as_a_cursor() -> None:
    """Checklist 35, statically: every ordering or range over events goes by txid first."""
    from pglogq import schema

    assert ev_id_cursor_uses("SELECT * FROM pglogq.event e WHERE e.ev_id > last_id") != []
    assert ev_id_cursor_uses("SELECT max(e.ev_id) FROM pglogq.event e") != []
    assert ev_id_cursor_uses("SELECT 1 ORDER BY e.ev_id") != []
    assert ev_id_cursor_uses("WHERE (e.ev_txid, e.ev_id) > (a, b) ORDER BY e.ev_txid, e.ev_id") == []
    found = {name: hits for name, sql in schema.functions() if (hits := ev_id_cursor_uses(sql))}
    assert found == {}
