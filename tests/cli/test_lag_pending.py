"""Lag, pending and unread say the same on every surface: ``pglogq status --json``, ``pglogq
consumer list``, the dashboard's pages and the ticker's ``/metrics`` rows (docs/how-to/monitoring.md,
"Lag and pending")."""

from __future__ import annotations

import re
from datetime import timedelta

import psycopg
from starlette.testclient import TestClient

import pglogq
from pglogq.dashboard import create_app
from pglogq.tickerd import queries as tq
from tests.support.cli import js, ok
from tests.support.db import TICK_HEAD_FOLLOWS

TOKEN = "lag-token-0123"


def _row(html: str, consumer: str) -> dict[str, str]:
    m = re.search(rf'<tr data-consumer="{consumer}"[^>]*>(.*?)</tr>', html, re.S)
    assert m, consumer
    return dict(re.findall(r'<td class="num" data-col="(\w+)">([^<]*)</td>', m.group(1)))


def test_a_worker_holding_a_batch_reads_the_same_everywhere(dsn: str, client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "busy")
    client.subscribe("q", "idle")
    client.send_batch("q", [{"n": i} for i in range(7)])
    client.tick("q", force=True)
    client.receive("q", "idle").ack()
    client.tick("q", force=True)
    client.tick("q", force=True)  # empty ticks after both consumers' positions
    page = client.receive("q", "busy", worker="w1")  # a cooperating worker holds all 7
    assert len(page) == 7
    with psycopg.connect(dsn, autocommit=True) as conn:  # ticked a minute ago: a lag no clock rounds away
        conn.execute("UPDATE pglogq.tick SET tick_time = tick_time - interval '1 minute'")
        conn.execute(TICK_HEAD_FOLLOWS)

    status = {c["consumer_name"]: c for c in js(dsn, "status", "q")["consumers"]}
    listed = {c["consumer_name"]: c for c in js(dsn, "consumer", "list", "q")}
    for got in (status, listed):
        assert (got["busy"]["pending_events"], got["busy"]["lag_events"]) == (7, 0)
        assert got["busy"]["lag"] >= 60
        assert (got["idle"]["pending_events"], got["idle"]["lag_events"], got["idle"]["lag"]) == (0, 0, 0)

    with psycopg.connect(dsn, autocommit=True) as conn:  # what /metrics reads
        metrics = {r[1]: r for r in conn.execute(tq.CONSUMER_INFO).fetchall()}
    assert (metrics["busy"][3], metrics["busy"][4]) == (0, 7) and metrics["busy"][2] >= 60
    assert (metrics["idle"][2], metrics["idle"][3], metrics["idle"][4]) == (0, 0, 0)

    app = create_app(dsn, token={"alice": TOKEN}, sample_interval=0)
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as tc:
        for html in (tc.get("/").text, tc.get("/queues/q").text):
            assert "lag (events)" not in html and "unread" in html
            busy, idle = _row(html, "busy"), _row(html, "idle")
            assert (busy["pending"], busy["unread"]) == ("7", "0")
            assert re.fullmatch(r"\d\d+ s|\d+ min \d+ s", busy["lag"]), busy["lag"]  # a minute or more
            assert (idle["pending"], idle["unread"], idle["lag"]) == ("0", "0", "0.0 s")

    table = ok(dsn, "status", "q").stdout
    assert "unread" in table and "pending" in table
    listing = ok(dsn, "consumer", "list", "q").stdout
    assert "lag events" not in listing and "unread" in listing
    page.ack()
    (info,) = client.consumer_info("q", "busy")
    assert (info.pending_events, info.lag) == (0, timedelta(0))
