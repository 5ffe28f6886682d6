"""The dashboard's job page shows every attempt of the consumers' outcome logs, and the attempt count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import pglogq
from pglogq.dashboard import create_app
from tests.support.jobs import setup


@pytest.fixture
def tc(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn)) as c:
        yield c


def test_job_page_shows_every_attempt(tc: TestClient, client: pglogq.Client, dsn: str) -> None:
    [m] = setup(client, 1, max_retries=1, retry_delay="0")
    c = pglogq.Consumer(dsn, "q", "c", worker="w7")

    @c.handler("t")
    def fail(msg: Any) -> None:
        raise pglogq.Nack(f"<b>try {msg.retry_count}</b>")

    try:
        c.run(max_batches=1)
        client.maintain()
        client.tick("q", force=True)
        c.run(max_batches=1)
    finally:
        c.close()
    html = tc.get(f"/lookup?queue=q&msg_id={m}").text
    assert 'id="lookup-history"' in html
    assert html.count('data-outcome="failed"') == 1 and html.count('data-outcome="dead"') == 1
    assert "w7" in html and "&lt;b&gt;try 1&lt;/b&gt;" in html and "<b>try" not in html
    assert "<th>history</th>" not in html  # not a column of the states table
    dlq = tc.get("/queues/q/dlq").text
    assert "2 attempts" in dlq
