"""Share consumers: any idle worker takes the next events of the consumer's batch, in leases.

Each worker of a share consumer holds a lease (at most ``max_messages`` events of the consumer's
batch that no other worker was given); nothing waits behind another worker's slow event, and a
silent worker's lease alone is taken over."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest

import pglogq
from pglogq.errors import (
    AlreadyExists,
    BatchOpen,
    CedeRefused,
    InvalidArgument,
    InvalidName,
    MessageNotInBatch,
    ShareWorkerRequired,
    StaleBatch,
    UnknownBatch,
)
from tests.support.draining import drain
from tests.support.inflight import silence
from tests.support.maintenance import pump_and_tick
from tests.support.waiting import wait_for

Q = "jobs"


def _ids(batch: pglogq.Batch) -> list[int]:
    return [m.msg_id for m in batch]


@pytest.fixture
def share(client: pglogq.Client) -> pglogq.Client:
    client.create_queue(Q)
    assert client.subscribe(Q, "mailer", share=True)
    return client


def test_an_idle_worker_takes_the_next_events_while_another_holds_a_slow_one(share: pglogq.Client) -> None:
    report = share.send(Q, {"job": "report"})
    mails = [share.send(Q, {"job": "mail", "n": i}) for i in range(5)]
    share.tick(Q, force=True)
    # worker a takes the report (a lease of one event) and is busy with it for a long time
    slow = share.receive(Q, "mailer", worker="a", max_messages=1)
    assert _ids(slow) == [report]
    # worker b is not blocked by it: it takes the mails, one lease after another
    got: list[int] = []
    while True:
        b = share.receive(Q, "mailer", worker="b", max_messages=2)
        if not b.messages:
            break
        got += _ids(b)
        assert b.ack()
    assert got == mails
    # the slow job ends; nothing is left, nothing comes twice
    assert slow.ack()
    assert not share.receive(Q, "mailer", worker="a").messages
    assert not share.receive(Q, "mailer", worker="b").messages


def test_leases_are_disjoint_and_cover_every_event_once(share: pglogq.Client) -> None:
    sent = [share.send(Q, {"n": i}) for i in range(23)]
    share.tick(Q, force=True)
    more = [share.send(Q, {"n": i}) for i in range(23, 30)]
    share.tick(Q, force=True)
    seen: list[int] = []
    held = {w: share.receive(Q, "mailer", worker=w, max_messages=4) for w in ("a", "b", "c")}
    while any(b.messages for b in held.values()):
        for w, b in list(held.items()):
            seen += _ids(b)
            if b.messages:
                assert b.ack()
            held[w] = share.receive(Q, "mailer", worker=w, max_messages=4)
    assert sorted(seen) == sorted(sent + more)
    assert len(seen) == len(set(seen))


def test_a_worker_pages_through_its_lease_and_gets_the_same_page_until_it_acks(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(6)]
    share.tick(Q, force=True)
    first = share.receive(Q, "mailer", worker="a", max_messages=3)
    assert _ids(first) == ids[:3]
    assert _ids(share.receive(Q, "mailer", worker="a", max_messages=3)) == ids[:3]  # not acked: the same page
    other = share.receive(Q, "mailer", worker="b", max_messages=10)
    assert _ids(other) == ids[3:]  # the rest of the batch, not a's lease
    assert first.ack() and other.ack()
    assert not share.receive(Q, "mailer", worker="a").messages


def test_a_silent_workers_lease_alone_is_taken_over(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(4)]
    share.tick(Q, force=True)
    dead = share.receive(Q, "mailer", worker="dead", max_messages=2)
    assert _ids(dead) == ids[:2]
    live = share.receive(Q, "mailer", worker="live", max_messages=1)
    assert _ids(live) == ids[2:3]
    silence(dsn, "dead")
    assert live.ack()
    # the next free worker takes the dead worker's lease over before new events
    taken = share.receive(Q, "mailer", worker="live", max_messages=5)
    assert _ids(taken) == ids[:2]
    assert taken.ack()
    assert _ids(share.receive(Q, "mailer", worker="live", max_messages=5)) == ids[3:]
    # the dead worker's late ack is refused, nothing changes
    with pytest.raises((StaleBatch, UnknownBatch)):
        dead.ack()


def test_a_released_event_comes_back_to_any_worker_and_a_rejected_one_is_dead(share: pglogq.Client) -> None:
    share.set_queue_config(Q, "retry_delay", "0")
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    b = share.receive(Q, "mailer", worker="a", max_messages=3)
    b.nack(b.messages[0], retry_after=timedelta(0), reason="try again")
    b.nack(b.messages[1], dead=True, reason="bad input")
    assert b.ack()
    pump_and_tick(share, Q)
    again = drain(share, Q, "mailer", worker="b")
    assert [m.msg_id for m in again] == [ids[0]]
    assert again[0].retry_count == 1
    assert [d.msg_id for d in share.dlq_search(Q, "mailer")] == [ids[1]]


def test_a_crashing_event_ends_dead_and_its_neighbours_run_once(share: pglogq.Client, dsn: str) -> None:
    share.set_queue_config(Q, "max_retries", 1)
    poison, fine = share.send(Q, {"poison": True}), share.send(Q, {"fine": True})
    share.tick(Q, force=True)
    handled: list[int] = []
    for attempt in range(2):
        b = share.receive(Q, "mailer", worker=f"w{attempt}", max_messages=1, start_first=1)
        assert _ids(b) == [poison]
        silence(dsn, f"w{attempt}")  # its handler started, then the worker died
    rest = drain(share, Q, "mailer", worker="w9")
    handled += [m.msg_id for m in rest]
    assert handled == [fine]
    assert [d.msg_id for d in share.dlq_search(Q, "mailer")] == [poison]


def test_priority_inside_a_batch_first(share: pglogq.Client) -> None:
    low = share.send(Q, {"n": 1}, priority=10)
    high = share.send(Q, {"n": 2}, priority=200)
    mid = share.send(Q, {"n": 3})
    share.tick(Q, force=True)
    order = [_ids(share.receive(Q, "mailer", worker=w, max_messages=1))[0] for w in ("a", "b", "c")]
    assert order == [high, mid, low]


def test_an_ordinary_consumer_beside_it_gets_every_event(share: pglogq.Client) -> None:
    share.subscribe(Q, "audit")
    ids = [share.send(Q, {"n": i}) for i in range(5)]
    share.tick(Q, force=True)
    assert [m.msg_id for m in drain(share, Q, "mailer", worker="a", page=2)] == ids
    assert [m.msg_id for m in drain(share, Q, "audit")] == ids


def test_a_cancelled_event_not_yet_leased_is_never_handed_out(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    first = share.receive(Q, "mailer", worker="a", max_messages=1)
    assert _ids(first) == ids[:1]
    assert share.cancel(Q, ids[2])
    assert [m.msg_id for m in drain(share, Q, "mailer", worker="b")] == ids[1:2]
    assert first.ack()


def test_seek_ends_the_leases(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    held = share.receive(Q, "mailer", worker="a", max_messages=1)
    with pytest.raises(BatchOpen):
        share.seek(Q, "mailer", to="earliest")
    share.seek(Q, "mailer", to="earliest", force=True)
    with pytest.raises((StaleBatch, UnknownBatch)):
        held.ack()
    assert sorted(m.msg_id for m in drain(share, Q, "mailer", worker="b")) == ids


def test_share_consumer_refusals(share: pglogq.Client, dsn: str) -> None:
    share.send(Q, {"n": 1})
    share.tick(Q, force=True)
    with pytest.raises(ShareWorkerRequired):
        share.receive(Q, "mailer")
    with pytest.raises(AlreadyExists):
        share.subscribe(Q, "mailer")  # exists as a share consumer
    share.subscribe(Q, "plain")
    with pytest.raises(AlreadyExists):
        share.subscribe(Q, "plain", share=True)
    assert not share.subscribe(Q, "mailer", share=True)  # the same mode: nothing changes
    with pytest.raises(InvalidArgument):
        share.subscribe(Q, "y", share="yes")  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pglogq.subscriber WHERE consumer_name IN ('x', 'y')").fetchone()
    assert left == (0,)


def test_lookup_and_jobs_name_the_worker_of_each_lease(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}, type="mail") for i in range(5)]
    share.tick(Q, force=True)
    a = share.receive(Q, "mailer", worker="a", max_messages=1)
    b = share.receive(Q, "mailer", worker="b", max_messages=2)
    assert _ids(a) == ids[:1] and _ids(b) == ids[1:3]

    def state(msg_id: int) -> tuple[str, str | None]:
        (row,) = share.lookup(Q, msg_id)
        return row.state, row.worker

    assert [state(i) for i in ids] == [("in-flight", "a"), ("in-flight", "b"), ("in-flight", "b"),
                                       ("waiting", None), ("waiting", None)]
    flying = share.jobs(Q, "mailer", state="in-flight")
    assert sorted((j.msg_id, j.worker) for j in flying) == [(ids[0], "a"), (ids[1], "b"), (ids[2], "b")]
    assert [j.msg_id for j in share.jobs(Q, "mailer", state="waiting")] == ids[3:]
    assert b.ack()
    assert [state(i)[0] for i in ids] == ["in-flight", "done", "done", "waiting", "waiting"]
    # a's lease is still out while c takes the rest: the rest is in c's lease
    c = share.receive(Q, "mailer", worker="c", max_messages=10)
    assert _ids(c) == ids[3:]
    assert [state(i) for i in ids[3:]] == [("in-flight", "c"), ("in-flight", "c")]
    assert state(ids[0]) == ("in-flight", "a")
    assert a.ack() and c.ack()
    assert {state(i)[0] for i in ids} == {"done"}
    assert share.jobs(Q, "mailer") == []


def test_a_worker_pages_inside_its_lease(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(5)]
    share.tick(Q, force=True)
    assert _ids(share.receive(Q, "mailer", worker="a", max_messages=4)) == ids[:4]  # the lease: 4 events
    # not acknowledged: asked again with smaller pages, the worker pages through its lease only
    first = share.receive(Q, "mailer", worker="a", max_messages=2)
    assert _ids(first) == ids[:2]
    assert first.ack()
    second = share.receive(Q, "mailer", worker="a", max_messages=2)
    assert _ids(second) == ids[2:4]  # the lease ends here, not at the batch's end
    other = share.receive(Q, "mailer", worker="b", max_messages=10)
    assert _ids(other) == ids[4:]
    assert second.ack() and other.ack()
    assert not share.receive(Q, "mailer", worker="a").messages


def test_two_workers_racing_for_the_last_events_never_both_get_one(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        got_first = [r[0] for r in first.execute(
            "SELECT msg_id FROM pglogq.receive('jobs', 'mailer', 2, 'a')").fetchall()]
        # the first transaction is still open: the second waits for the consumer's row, then
        # takes what the first did not
        with ThreadPoolExecutor(1) as pool:
            later = pool.submit(lambda: [r[0] for r in second.execute(
                "SELECT msg_id FROM pglogq.receive('jobs', 'mailer', 2, 'b')").fetchall()])
            wait_for(lambda: _waiting_on_a_lock(dsn), what="the second worker waits for the first")
            first.commit()
            got_second = later.result(timeout=60)
        second.commit()
    assert got_first == ids[:2] and got_second == ids[2:]


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


def test_leases_survive_a_reinstall_and_a_metadata_rotation(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(4)]
    share.tick(Q, force=True)
    a = share.receive(Q, "mailer", worker="a", max_messages=2)
    share.install_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
    b = share.receive(Q, "mailer", worker="b", max_messages=5)
    assert _ids(a) == ids[:2] and _ids(b) == ids[2:]
    assert _ids(share.receive(Q, "mailer", worker="a", max_messages=2)) == ids[:2]  # a's lease, as it was
    assert a.ack() and b.ack()
    assert not share.receive(Q, "mailer", worker="c").messages


def test_unsubscribe_and_drop_end_the_leases(share: pglogq.Client) -> None:
    share.send(Q, {"n": 1})
    share.tick(Q, force=True)
    a = share.receive(Q, "mailer", worker="a", max_messages=1)
    assert share.unsubscribe(Q, "mailer")
    with pytest.raises((StaleBatch, UnknownBatch)):
        a.ack()
    share.subscribe(Q, "mailer", share=True)
    share.send(Q, {"n": 2})
    share.tick(Q, force=True)
    b = share.receive(Q, "mailer", worker="a", max_messages=1)
    assert [m.payload for m in b] == [{"n": 2}]
    share.drop_queue(Q, force=True)
    with pytest.raises((StaleBatch, UnknownBatch)):
        b.ack()


@pytest.mark.parametrize("size", [0, 100001, -1])
def test_a_lease_size_out_of_range_is_refused(share: pglogq.Client, dsn: str, size: int) -> None:
    share.send(Q, {"n": 1})
    share.tick(Q, force=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT * FROM pglogq.receive('jobs', 'mailer', %s, 'a')", (size,))
        assert err.value.sqlstate == "PQ019"
        # nothing was handed out
        assert conn.execute("SELECT count(*) FROM pglogq.subscription WHERE batch_id IS NOT NULL").fetchone() == (0,)


@pytest.mark.parametrize("worker", ["", "bad name", "x" * 64])
def test_an_invalid_worker_name_is_refused(share: pglogq.Client, worker: str) -> None:
    with pytest.raises(InvalidName):
        share.receive(Q, "mailer", worker=worker)


def test_one_lease_of_up_to_100000_events(share: pglogq.Client) -> None:
    share.send_batch(Q, [{"n": i} for i in range(1000)])
    share.tick(Q, force=True)
    lease = share.receive(Q, "mailer", worker="a", max_messages=100000)
    assert len(lease.messages) == 1000
    assert not share.receive(Q, "mailer", worker="b").messages
    assert lease.ack()


def test_the_same_worker_name_twice_shares_one_lease(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    one = share.receive(Q, "mailer", worker="a", max_messages=2)
    two = share.receive(Q, "mailer", worker="a", max_messages=2)
    assert _ids(one) == _ids(two) == ids[:2]
    assert one.ack()
    with pytest.raises(StaleBatch):
        two.ack()


def test_cede_gives_the_unstarted_tail_of_a_lease_to_the_next_worker(share: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(5)]
    share.tick(Q, force=True)
    lease = share.receive(Q, "mailer", worker="a", max_messages=5, start_first=1)  # the first has started
    assert _ids(lease) == ids
    assert lease.cede(keep=lease.messages[0])  # it runs long: give the rest back
    other = share.receive(Q, "mailer", worker="b", max_messages=10)
    assert _ids(other) == ids[1:]  # before any new event, at once
    # the ceded events are b's now: a may not nack them, lookup names b
    with pytest.raises(MessageNotInBatch):
        lease.nack(lease.messages[2], retry_after=timedelta(0))
    assert [r.worker for r in share.lookup(Q, ids[2])] == ["b"]
    assert [r.worker for r in share.lookup(Q, ids[0])] == ["a"]
    assert lease.ack() and other.ack()  # a acknowledges its page as it was returned
    assert not share.receive(Q, "mailer", worker="c").messages
    share.send(Q, {"n": 5})
    share.tick(Q, force=True)
    assert [m.payload for m in share.receive(Q, "mailer", worker="c")] == [{"n": 5}]


def test_cede_all_ends_the_lease_and_nothing_is_lost_or_twice(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(4)]
    share.tick(Q, force=True)
    lease = share.receive(Q, "mailer", worker="a", max_messages=4, start_first=0)
    assert lease.cede()  # a stops before starting anything
    with pytest.raises(StaleBatch):
        lease.ack()
    got = drain(share, Q, "mailer", worker="b")
    assert [m.msg_id for m in got] == ids
    assert all(m.retry_count == 0 for m in got)  # nothing started: no attempt counted
    with psycopg.connect(dsn, autocommit=True) as conn:  # the row cede made went with its takeover
        rows = conn.execute("SELECT count(*) FROM pglogq.subscriber WHERE worker_name LIKE 'ceded.%'").fetchone()
    assert rows == (0,)


def test_cede_refusals_change_nothing(share: pglogq.Client, client: pglogq.Client) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    started = share.receive(Q, "mailer", worker="a", max_messages=3)  # no start_first: all counted as started
    with pytest.raises(CedeRefused):
        started.cede(keep=started.messages[0])
    with pytest.raises(CedeRefused):
        started.cede()
    assert _ids(share.receive(Q, "mailer", worker="a", max_messages=3)) == ids  # the lease as it was
    # the last event of the lease kept: nothing follows, nothing changes
    assert started.cede(keep=started.messages[-1]) is False
    assert started.ack()
    # an ordinary consumer's batch is no lease
    share.subscribe(Q, "plain")
    share.send(Q, {"n": 9})
    share.tick(Q, force=True)
    plain = share.receive(Q, "plain", start_first=0)
    with pytest.raises(CedeRefused):
        plain.cede()
    # a kept event that is not in the page (one of the lease acknowledged above)
    lease = share.receive(Q, "mailer", worker="b", max_messages=1, start_first=0)
    with pytest.raises(MessageNotInBatch):
        lease.cede(keep=started.messages[0])
    assert lease.ack() and plain.ack()


def _event_rows_read(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT coalesce(sum(coalesce(idx_tup_fetch, 0) + seq_tup_read), 0) FROM pg_stat_xact_all_tables"
                       " WHERE schemaname = 'pglogq' AND relname LIKE 'event%'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("lanes", [False, True], ids=["one frontier", "lanes"])
def test_a_lease_reads_its_own_events_not_the_rest_of_the_batch(client: pglogq.Client, dsn: str, lanes: bool) -> None:
    # the page of a lease used to look for one row past the lease's end through the rest of the
    # batch (the end was a filter, not a bound of the index range): every receive cost the batch
    client.create_queue(Q)
    client.subscribe(Q, "mailer", share=True, lanes=lanes)
    client.send_batch(Q, [{"n": i} for i in range(5000)])
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        before = _event_rows_read(conn)
        got = conn.execute("SELECT msg_id FROM pglogq.receive('jobs', 'mailer', 10, 'a')").fetchall()
        read = _event_rows_read(conn) - before
        conn.rollback()
    assert len(got) == 10
    assert read < 500, read  # the lease's rows (every eighth on a lane), twice; never the batch's 5,000
