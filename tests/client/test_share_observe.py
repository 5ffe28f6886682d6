"""The client's view of a share group: ``leases``, ``consumer_info``'s lease fields and
``in_flight``'s lock expiry and delivery count (Client and AsyncClient)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq


def _silence(dsn: str, worker: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = %s", (worker,))


def test_leases_and_consumer_info_of_a_share_consumer(api: Any, dsn: str) -> None:
    api.create_queue("jobs")
    api.subscribe("jobs", "mailer", share=True)
    api.subscribe("jobs", "audit")
    ids = [api.send("jobs", {"n": i}) for i in range(3)]
    api.tick("jobs", force=True)
    dead = api.receive("jobs", "mailer", worker="dead", max_messages=1, start_first=1)
    live = api.receive("jobs", "mailer", worker="live", max_messages=1)
    assert [m.msg_id for m in dead] == ids[:1] and [m.msg_id for m in live] == ids[1:2]
    _silence(dsn, "dead")
    leases = api.leases("jobs", "mailer")
    assert all(isinstance(x, pglogq.Lease) for x in leases)
    assert [(x.worker, x.events, x.expired, x.max_delivery_count) for x in leases] == [
        ("dead", 1, True, 1), ("live", 1, False, 1)]
    assert leases[1].expires_at - leases[1].last_heartbeat == timedelta(seconds=30)
    info = {c.consumer_name: c for c in api.consumer_info("jobs")}
    mailer, audit = info["mailer"], info["audit"]
    assert (mailer.in_flight_events, mailer.expired_leases, mailer.redelivered) == (2, 1, 0)
    assert mailer.oldest_in_flight is not None and mailer.oldest_in_flight >= timedelta(0)
    assert (audit.in_flight_events, audit.oldest_in_flight, audit.expired_leases, audit.redelivered) == (
        None, None, None, None)
    # the live worker takes the silent one's lease over: a second delivery
    assert live.ack()
    again = api.receive("jobs", "mailer", worker="live", max_messages=1, start_first=1)
    assert [(m.msg_id, m.retry_count) for m in again] == [(ids[0], 1)]
    assert api.report_progress(again.id, ids[0], stage="sending")
    [flight] = api.in_flight("jobs", "mailer")
    assert (flight.worker, flight.msg_id, flight.delivery_count) == ("live", ids[0], 2)
    assert flight.expires_at is not None and flight.expires_at > flight.last_heartbeat
    [lease] = api.leases("jobs")
    assert (lease.worker, lease.max_delivery_count, lease.redelivered) == ("live", 2, 1)
    assert api.consumer_info("jobs", "mailer")[0].redelivered == 1
    assert api.leases() == api.leases("jobs") == api.leases(consumer="mailer")
    assert api.leases("jobs", "audit") == []
    with pytest.raises(pglogq.UnknownQueue):
        api.leases("nope")
    with pytest.raises(pglogq.UnknownConsumer):
        api.leases("jobs", "nope")
    with pytest.raises(pglogq.InvalidName):
        api.leases(42)
