"""Seek and replay of a share consumer (a share group): every form of seek (a tick, a time,
'earliest', 'latest', by events back and forward) and its dry-run plan, with leases out.

What happens to the events in flight at that moment: ``seek_plan`` changes nothing (the leases
go on); ``seek`` refuses while a lease is out unless forced, and with ``force`` every lease
ends (the workers' leases, the events ceded and not yet taken over, the batch being handed out):
the late outcomes of their workers are refused with the stale-batch error (``StaleBatch``,
PQ009), heartbeats and progress reports say the lease is no longer theirs, and the events are
handed out again only if the target is before them, as for a cursor consumer's batches."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.errors import BatchOpen, StaleBatch
from tests.support.draining import drain

Q = "jobs"


@pytest.fixture
def share(client: pglogq.Client) -> pglogq.Client:
    client.create_queue(Q)
    client.set_queue_config(Q, "batch_max_events", 3)  # one batch per tick of 3 events
    assert client.subscribe(Q, "mailer", share=True)
    return client


class Setup:
    """Two ticks of 3 events (e[0..2] after tick t0, e[3..5] after t1); worker a's lease of e0 is
    acknowledged; leases out: b holds e1, c holds e2 (the end of the first batch), d holds e3
    and ceded e4 and e5 (a ceded holder row, not taken over yet)."""

    def __init__(self, client: pglogq.Client, ack_first_batch: bool) -> None:
        self.t0 = client.seek_plan(Q, "mailer", to="latest").target_tick
        self.e = [client.send(Q, {"n": i}) for i in range(3)]
        client.tick(Q, force=True)
        self.t1 = client.seek_plan(Q, "mailer", to="latest").target_tick
        self.e += [client.send(Q, {"n": i}) for i in range(3, 6)]
        client.tick(Q, force=True)
        a = client.receive(Q, "mailer", worker="a", max_messages=1)
        assert [m.msg_id for m in a] == self.e[:1] and a.ack()
        self.b = client.receive(Q, "mailer", worker="b", max_messages=1)
        self.c = client.receive(Q, "mailer", worker="c", max_messages=3)
        assert [m.msg_id for m in self.b] == self.e[1:2] and [m.msg_id for m in self.c] == self.e[2:3]
        self.d = client.receive(Q, "mailer", worker="d", max_messages=3, start_first=1)
        assert [m.msg_id for m in self.d] == self.e[3:6]
        assert self.d.cede(keep=self.d.messages[0])
        self.out = [self.b, self.c, self.d]
        if ack_first_batch:
            assert self.b.ack() and self.c.ack()
            self.out = [self.d]


def holders(dsn: str) -> list[tuple[str, bool]]:
    """The share consumer's worker rows: (name, holds a batch)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(worker_name, '(consumer)'), batch_id IS NOT NULL FROM pglogq.subscription"
            " WHERE consumer_name = 'mailer' ORDER BY 1").fetchall()
    return [(str(n), bool(b)) for n, b in rows]


def target(s: Setup, form: str, client: pglogq.Client) -> dict[str, Any]:
    if form == "tick t0":
        return {"to": s.t0}
    if form == "tick t1":
        return {"to": str(s.t1)}
    if form == "time of t1":
        return {"to": client.seek_plan(Q, "mailer", to=s.t1).target_tick_time}
    if form == "earliest":
        return {"to": "earliest"}
    if form == "latest":
        return {"to": "latest"}
    if form == "3 events forward":
        return {"by_events": 3}
    assert form == "3 events back"
    return {"by_events": -3}


# form, acknowledge the first batch's leases before the seek, the events handed out again
FORMS = [
    ("tick t0", False, range(6)),          # everything, e0 acknowledged before included
    ("tick t1", False, range(3, 6)),       # e1 and e2 in flight are skipped: their leases end
    ("time of t1", False, range(3, 6)),
    ("earliest", False, range(6)),
    ("latest", False, range(0)),
    ("3 events forward", False, range(3, 6)),  # from t0, the oldest lease's batch start
    ("3 events back", True, range(6)),         # from t1 (the first batch done): back to t0
]


@pytest.mark.parametrize(("form", "ack_first", "again"), FORMS, ids=[f[0] for f in FORMS])
def test_each_seek_form_ends_the_leases_and_replays_from_its_target(
    form: str, ack_first: bool, again: range, share: pglogq.Client, dsn: str
) -> None:
    s = Setup(share, ack_first)
    where = target(s, form, share)
    before = holders(dsn)
    # the dry run: the plan counts the leases out, and changes nothing
    plan = share.seek_plan(Q, "mailer", **where)
    assert plan.current_tick == (s.t1 if ack_first else s.t0)
    assert plan.open_batches == len(s.out) + 1  # the workers' leases and the ceded events
    assert holders(dsn) == before
    for lease in s.out:
        assert share.heartbeat(lease.id)  # still theirs
    # without force: refused while leases are out, nothing changes
    with pytest.raises(BatchOpen):
        share.seek(Q, "mailer", **where)
    assert holders(dsn) == before
    applied = share.seek(Q, "mailer", force=True, **where)
    assert applied.target_tick == plan.target_tick and applied.open_batches == plan.open_batches
    # every lease ended; the ceded events' row is gone with them
    assert [h for h in holders(dsn) if h[1]] == []
    assert not any(n.startswith("ceded.") for n, _ in holders(dsn))
    # the late outcomes of the workers that held them: refused, stale
    for lease in s.out:
        assert not share.heartbeat(lease.id)
        assert not share.report_progress(lease.id, lease.messages[0].msg_id, percent=50)
        with pytest.raises(StaleBatch):
            share.nack(lease.messages[0], retry_after=timedelta(0))
        with pytest.raises(StaleBatch):
            lease.ack()
    with pytest.raises(StaleBatch):
        s.d.cede()
    # the events after the target come again (to any worker), each once
    got = drain(share, Q, "mailer", worker="z")
    assert sorted(m.msg_id for m in got) == [s.e[i] for i in again]
    assert all(m.retry_count == 0 for m in got)


def test_a_seek_with_no_lease_out_needs_no_force(share: pglogq.Client) -> None:
    # the consumer's batch being handed out is nobody's lease: a seek does not pull it from under
    # a worker, so it is not refused (cursor consumers' seeks refuse only a batch a worker holds)
    t0 = share.seek_plan(Q, "mailer", to="latest").target_tick
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    a = share.receive(Q, "mailer", worker="a", max_messages=1)
    assert a.ack()  # e1 and e2 not handed out yet: the batch is still being handed out
    plan = share.seek_plan(Q, "mailer", to=t0)
    assert plan.open_batches == 0
    share.seek(Q, "mailer", to=t0)
    assert sorted(m.msg_id for m in drain(share, Q, "mailer", worker="b")) == ids


def test_a_seek_back_while_a_worker_runs_replays_its_event_after_its_refused_ack(
    share: pglogq.Client,
) -> None:
    # a worker runs an event (started), an operator replays the last hour: the worker's ack is
    # refused when it finishes (nothing of its lease is recorded as done), and its event comes
    # again with the others, counted as a new delivery (not a failed attempt)
    ids = [share.send(Q, {"n": i}) for i in range(2)]
    share.tick(Q, force=True)
    running = share.receive(Q, "mailer", worker="a", max_messages=1, start_first=1)
    done = share.receive(Q, "mailer", worker="b", max_messages=1)
    assert done.ack()
    share.seek(Q, "mailer", to="1 hour ago", force=True)
    with pytest.raises(StaleBatch, match="not the current batch"):
        running.ack()
    again = drain(share, Q, "mailer", worker="c")
    assert sorted(m.msg_id for m in again) == ids
    assert [m.retry_count for m in again] == [0, 0]
