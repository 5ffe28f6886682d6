"""Share-group observability in SQL: who holds which lease, until when, and how often its events
were delivered (pglogq.leases, consumer_info's lease columns, in_flight, lookup and jobs).

The delivery count of a leased event is 1 + its failed deliveries so far (nacks and counted
crashes): the retry_count receive returns + 1."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.errors import UnknownConsumer, UnknownQueue
from tests.support.maintenance import pump_and_tick

Q = "jobs"


@pytest.fixture
def share(client: pglogq.Client) -> pglogq.Client:
    client.create_queue(Q)
    assert client.subscribe(Q, "mailer", share=True)
    return client


def _silence(dsn: str, worker: str) -> None:
    """Make a worker look silent for an hour (as if it died holding its lease)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = %s", (worker,))


def _rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        assert cur.description is not None
        names = [d.name for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _leases(dsn: str, queue: str | None = Q, consumer: str | None = "mailer") -> list[dict[str, Any]]:
    return _rows(dsn, "SELECT * FROM pglogq.leases(%s, %s)", (queue, consumer))


def _info(dsn: str, consumer: str = "mailer") -> dict[str, Any]:
    [row] = _rows(dsn, "SELECT * FROM pglogq.consumer_info(%s, %s)", (Q, consumer))
    return row


def test_leases_name_each_holder_with_its_events_and_lock_expiry(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(6)]
    share.tick(Q, force=True)
    a = share.receive(Q, "mailer", worker="a", max_messages=1)
    b = share.receive(Q, "mailer", worker="b", max_messages=3)
    assert [m.msg_id for m in a] == ids[:1] and [m.msg_id for m in b] == ids[1:4]
    rows = _leases(dsn)
    assert [(r["worker"], r["batch_id"], r["events"], r["returned"], r["started"], r["first_msg_id"],
             r["last_msg_id"], r["max_delivery_count"], r["redelivered"], r["expired"], r["released"])
            for r in rows] == [("a", a.id, 1, 1, 1, ids[0], ids[0], 1, 0, False, False),
                               ("b", b.id, 3, 3, 3, ids[1], ids[3], 1, 0, False, False)]
    for r in rows:  # the lock ends dead_interval after the last heartbeat
        assert r["expires_at"] - r["last_heartbeat"] == timedelta(seconds=30)
        assert r["leased_at"] <= r["last_heartbeat"]
    # a heartbeat renews the lock; an acknowledged lease is gone
    before = rows[0]["expires_at"]
    assert share.heartbeat(a.id or 0)
    assert _leases(dsn)[0]["expires_at"] > before
    assert b.ack()
    assert [r["worker"] for r in _leases(dsn)] == ["a"]
    # an ordinary consumer has no leases; a typo is an error
    share.subscribe(Q, "plain")
    assert _leases(dsn, Q, "plain") == []
    assert [r["consumer_name"] for r in _leases(dsn, None, None)] == ["mailer"]
    with pytest.raises(psycopg.Error) as err:
        _leases(dsn, "nope", None)
    assert err.value.sqlstate == UnknownQueue.sqlstate
    with pytest.raises(psycopg.Error) as err:
        _leases(dsn, None, "nope")
    assert err.value.sqlstate == UnknownConsumer.sqlstate


def test_a_page_inside_a_lease_counts_what_is_not_returned_yet(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(5)]
    share.tick(Q, force=True)
    first = share.receive(Q, "mailer", worker="a", max_messages=4)
    assert first.ack()
    share.send(Q, {"n": 9})
    share.tick(Q, force=True)
    lease = share.receive(Q, "mailer", worker="a", max_messages=1, start_first=0)
    assert [m.msg_id for m in lease] == ids[4:]
    [row] = _leases(dsn)
    assert (row["events"], row["returned"], row["started"]) == (1, 1, 0)
    share.mark_started(lease.messages[0])
    assert _leases(dsn)[0]["started"] == 1


def test_an_expired_lease_shows_until_it_is_taken_over_and_then_counts_its_redelivery(
        share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(3)]
    share.tick(Q, force=True)
    assert share.receive(Q, "mailer", worker="dead", max_messages=2, start_first=2).messages  # both started
    _silence(dsn, "dead")
    [row] = _leases(dsn)
    assert row["expired"] and not row["released"] and row["worker"] == "dead"
    info = _info(dsn)
    assert (info["in_flight_events"], info["expired_leases"], info["redelivered"]) == (2, 1, 0)
    # maintenance releases it: still expired, now released, until a worker asks
    assert _rows(dsn, "SELECT pglogq.maint_release(%s) AS n", (Q,)) == [{"n": 1}]
    [row] = _leases(dsn)
    assert row["expired"] and row["released"]
    taken = share.receive(Q, "mailer", worker="live", max_messages=10)
    assert [m.msg_id for m in taken] == ids[:1]  # halved: the run under suspicion, one at a time
    assert [m.retry_count for m in taken] == [1]
    [row] = _leases(dsn)
    assert row["worker"] == "live" and not row["expired"] and not row["released"]
    assert (row["events"], row["max_delivery_count"], row["redelivered"]) == (2, 2, 2)
    info = _info(dsn)
    assert (info["in_flight_events"], info["expired_leases"], info["redelivered"]) == (2, 0, 2)
    assert info["oldest_in_flight"] >= timedelta(0)
    # lookup and jobs give the same count (attempts: the deliveries whose handler ran or runs, this
    # one included: the delivery count)
    [look] = share.lookup(Q, ids[0])
    assert look.state == "in-flight" and look.worker == "live" and look.attempts == 2
    assert look.detail is not None and "delivery 2" in look.detail and "lock ends at" in look.detail
    flying = {j.msg_id: j.attempts for j in share.jobs(Q, "mailer", state="in-flight")}
    assert flying == {ids[0]: 2}
    assert taken.ack()
    assert _info(dsn)["redelivered"] == 1  # the second event, handed out next, was delivered once before


def test_a_nacked_event_comes_back_with_its_delivery_count(share: pglogq.Client, dsn: str) -> None:
    share.set_queue_config(Q, "retry_delay", "0")
    ids = [share.send(Q, {"n": i}) for i in range(2)]
    share.tick(Q, force=True)
    b = share.receive(Q, "mailer", worker="a", max_messages=2)
    b.nack(b.messages[0], retry_after=timedelta(0), reason="again")
    # the nacked event left the lease: one event in flight
    [row] = _leases(dsn)
    assert (row["events"], row["first_msg_id"]) == (1, ids[1])
    assert b.ack()
    pump_and_tick(share, Q)
    again = share.receive(Q, "mailer", worker="b", max_messages=5)
    assert [m.msg_id for m in again] == ids[:1] and again.messages[0].retry_count == 1
    [row] = _leases(dsn)
    assert (row["worker"], row["max_delivery_count"], row["redelivered"]) == ("b", 2, 1)


def test_a_ceded_tail_is_released_not_expired_and_held_by_nobody(share: pglogq.Client, dsn: str) -> None:
    ids = [share.send(Q, {"n": i}) for i in range(4)]
    share.tick(Q, force=True)
    lease = share.receive(Q, "mailer", worker="a", max_messages=4, start_first=1)
    assert lease.cede(keep=lease.messages[0])
    rows = _leases(dsn)
    assert [(r["worker"], r["events"], r["released"], r["expired"]) for r in rows] == [
        ("a", 1, False, False), (None, 3, True, False)]
    assert rows[1]["first_msg_id"] == ids[1] and rows[1]["expires_at"] <= rows[1]["last_heartbeat"] + timedelta(1)
    assert _info(dsn)["expired_leases"] == 0


def test_consumer_info_lease_columns_are_null_for_an_ordinary_consumer(share: pglogq.Client, dsn: str) -> None:
    share.subscribe(Q, "plain")
    share.send(Q, {"n": 1})
    share.tick(Q, force=True)
    share.receive(Q, "plain")
    plain = _info(dsn, "plain")
    assert [plain[k] for k in ("in_flight_events", "oldest_in_flight", "expired_leases", "redelivered")] == [
        None, None, None, None]
    idle = _info(dsn)
    assert [idle[k] for k in ("in_flight_events", "oldest_in_flight", "expired_leases", "redelivered")] == [
        0, None, 0, 0]


def test_in_flight_shows_the_lock_expiry_and_delivery_count(share: pglogq.Client, dsn: str) -> None:
    share.set_queue_config(Q, "dead_interval", "1 minute")
    ids = [share.send(Q, {"n": i}) for i in range(2)]
    share.tick(Q, force=True)
    dead = share.receive(Q, "mailer", worker="dead", max_messages=1, start_first=1)
    _silence(dsn, "dead")
    taken = share.receive(Q, "mailer", worker="live", max_messages=1, start_first=1)
    assert [m.msg_id for m in taken] == ids[:1] and taken.messages[0].retry_count == 1
    assert share.report_progress(taken.id, ids[0], percent=10)
    [row] = _rows(dsn, "SELECT * FROM pglogq.in_flight")
    assert row["worker"] == "live" and row["delivery_count"] == 2
    assert row["expires_at"] - row["last_heartbeat"] == timedelta(minutes=1)
    del dead
    # a consumer receiving without a worker name: nobody takes its batch over (no expiry)
    share.subscribe(Q, "plain")
    share.send(Q, {"n": 3})
    share.tick(Q, force=True)
    page = share.receive(Q, "plain")
    assert share.report_progress(page.id, page.messages[0].msg_id)
    [plain] = _rows(dsn, "SELECT * FROM pglogq.in_flight WHERE consumer_name = 'plain'")
    assert plain["expires_at"] is None and plain["delivery_count"] == 1
