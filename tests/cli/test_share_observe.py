"""A share group on the command line: ``pglogq consumer leases``, the share consumers' table of
``consumer list`` and ``status``, and ``status``'s leases table and delivery counts."""

from __future__ import annotations

import re

import psycopg
import pytest

import pglogq
from pglogq.cli.errors import Exit
from tests.support.cli import js, ok, run


@pytest.fixture
def held(dsn: str) -> pglogq.Client:
    """A share consumer "mailer" of "jobs": worker "dead" fell silent holding a lease of one
    started event, worker "live" holds a lease of two; an ordinary consumer "audit" beside."""
    client = pglogq.Client(dsn)
    client.create_queue("jobs")
    client.subscribe("jobs", "mailer", share=True)
    client.subscribe("jobs", "audit")
    for n in range(4):
        client.send("jobs", {"n": n})
    client.tick("jobs", force=True)
    assert len(client.receive("jobs", "mailer", worker="dead", max_messages=1, start_first=1)) == 1
    assert len(client.receive("jobs", "mailer", worker="live", max_messages=2)) == 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = 'dead'")
    return client


def test_consumer_leases_lists_who_holds_what(dsn: str, held: pglogq.Client) -> None:
    rows = js(dsn, "consumer", "leases", "jobs")
    assert [(r["worker"], r["events"], r["started"], r["expired"], r["max_delivery_count"]) for r in rows] == [
        ("dead", 1, 1, True, 1), ("live", 2, 2, False, 1)]
    assert set(rows[0]) >= {"expires_at", "last_heartbeat", "leased_at", "redelivered", "batch_id"}
    text = " ".join(ok(dsn, "consumer", "leases", "jobs", "mailer").stdout.split())
    assert re.search(r"jobs/mailer dead 1 1 expired \S+ ago 1 ", text), text
    assert re.search(r"jobs/mailer live 2 2 in \S+ 1", text), text
    assert js(dsn, "consumer", "leases", "jobs", "audit") == []
    assert "no leases" in ok(dsn, "consumer", "leases", "jobs", "audit").stdout
    r = run(dsn, "consumer", "leases", "nope")
    assert r.exit_code == Exit.NOT_FOUND, r.output
    r = run(dsn, "consumer", "leases", "jobs", "nobody")
    assert r.exit_code == Exit.NOT_FOUND, r.output


def test_consumer_list_and_status_show_the_leases(dsn: str, held: pglogq.Client) -> None:
    rows = {r["consumer_name"]: r for r in js(dsn, "consumer", "list", "jobs")}
    assert (rows["mailer"]["in_flight_events"], rows["mailer"]["expired_leases"]) == (3, 1)
    assert rows["audit"]["in_flight_events"] is None
    listed = " ".join(ok(dsn, "consumer", "list", "jobs").stdout.split())
    assert re.search(r"Share consumers \(leased events\).* jobs mailer 3 \S+ 1 0", listed), listed
    status = js(dsn, "status", "jobs")
    assert [(x["worker"], x["events"]) for x in status["leases"]] == [("dead", 1), ("live", 2)]
    assert ("lease_expired", "jobs", "mailer") in {(w["kind"], w["queue"], w["consumer"])
                                                   for w in status["warnings"]}
    text = " ".join(ok(dsn, "status", "jobs").stdout.split())
    assert "Leases (share consumers)" in text and "expired" in text, text
    assert "past their lock's expiry" in text
    assert run(dsn, "status", "jobs", "--check").exit_code == Exit.CHECK_FAILED


def test_status_in_flight_shows_the_delivery_count(dsn: str, held: pglogq.Client) -> None:
    # the live worker finishes and takes the dead worker's lease over: its event's second delivery
    [mine] = [x for x in held.leases("jobs") if x.worker == "live"]
    assert held.ack(mine.batch_id)
    again = held.receive("jobs", "mailer", worker="live", max_messages=1, start_first=1)
    assert [m.retry_count for m in again] == [1]
    assert again.id is not None and held.report_progress(again.id, again.messages[0].msg_id, stage="sending")
    status = js(dsn, "status", "jobs")
    assert [(r["worker"], r["delivery_count"]) for r in status["in_flight"]] == [("live", 2)]
    assert status["in_flight"][0]["expires_at"] is not None
    text = ok(dsn, "status", "jobs").stdout
    assert "try" in text and "sending" in text
    assert [(x["worker"], x["max_delivery_count"], x["redelivered"]) for x in status["leases"]] == [("live", 2, 1)]
