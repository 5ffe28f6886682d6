"""The dashboard's queue page shows a share consumer's leases: holder, events, lock expiry and
delivery count, and the lock and delivery count of each event in flight."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

import pglogq
from pglogq.dashboard import Thresholds, create_app

TOKEN = "share-token-0123"


@pytest.fixture
def tc(dsn: str) -> Iterator[TestClient]:
    app = create_app(dsn, actions=False, token={"alice": TOKEN}, sample_interval=0,
                     thresholds=Thresholds(stuck_after=timedelta(minutes=5)))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def _row(html: str, attr: str, value: object) -> str:
    m = re.search(rf'<tr {attr}="{value}"[^>]*>(.*?)</tr>', html, re.S)
    assert m, f"no row {attr}={value}"
    return " ".join(re.sub(r"<[^>]+>", " ", m.group(0)).split())


def test_queue_page_shows_the_leases_of_a_share_consumer(tc: TestClient, client: pglogq.Client, dsn: str) -> None:
    client.create_queue("jobs")
    client.subscribe("jobs", "mailer", share=True)
    client.subscribe("jobs", "audit")
    ids = [client.send("jobs", {"n": n}) for n in range(3)]
    client.tick("jobs", force=True)
    dead = client.receive("jobs", "mailer", worker="dead", max_messages=1, start_first=1)
    live = client.receive("jobs", "mailer", worker="live", max_messages=2)
    assert dead.id is not None and live.id is not None
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = 'dead'")
    html = tc.get("/queues/jobs").text
    assert 'id="share-leases"' in html
    assert "share" in _row(html, "data-consumer", "mailer")
    summary = _row(html, "data-share-consumer", "mailer")
    assert summary.startswith("mailer 3 ") and summary.endswith(" 1 0"), summary
    held = _row(html, "data-lease", live.id)
    assert held.startswith("mailer live 2 2 ") and "expires in" in held and held.endswith(" 1"), held
    gone = _row(html, "data-lease", dead.id)
    assert gone.startswith("mailer dead 1 1 ") and "expired" in gone, gone
    assert 'data-share-consumer="audit"' not in html
    assert "lease(s) past their lock" in html  # the health rule's warning
    # the live worker takes the dead one's lease over: its event's second delivery, in flight
    assert live.ack()
    again = client.receive("jobs", "mailer", worker="live", max_messages=1, start_first=1)
    assert [m.msg_id for m in again] == ids[:1] and again.id is not None
    assert client.report_progress(again.id, ids[0], percent=20)
    html = tc.get("/queues/jobs").text
    assert _row(html, "data-lease", again.id).endswith(" 2 (1 redelivered)")
    flight = _row(html, "data-msg-id", ids[0])
    assert flight.startswith(f"mailer live {ids[0]} 2 ") and "expires in" in flight, flight


def test_no_share_section_without_a_share_consumer(tc: TestClient, client: pglogq.Client) -> None:
    client.create_queue("plain")
    client.subscribe("plain", "c")
    assert 'id="share-leases"' not in tc.get("/queues/plain").text
