"""Progress of long jobs: msg.progress() → pglogq.in_flight while the handler runs, gone on ack."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.consumers import MODES, Spec, running
from tests.support.waiting import wait_for


def setup(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")


def in_flight(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("SELECT * FROM pglogq.in_flight ORDER BY msg_id")
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def blocking_handler(mode: str, release: threading.Event, report: bool) -> Any:
    """A handler that (optionally) reports progress, then waits for ``release``."""
    if mode == "thread":

        def handle(msg: Any) -> None:
            if report:
                msg.progress(42, stage="rendering", counters={"rows": 1200})
            release.wait(60)

        return handle

    import asyncio

    def ahandle(msg: Any) -> Any:
        async def work() -> None:
            if report:
                await msg.progress(42, stage="rendering", counters={"rows": 1200})
            while not release.is_set():
                await asyncio.sleep(0.02)

        return work()

    return ahandle


@pytest.mark.parametrize("mode", MODES)
def test_progress_is_visible_while_running_and_gone_after_ack(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup(client)
    msg_id = client.send("q", {"report": "monthly"}, type="report")
    client.tick("q", force=True)
    release = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"worker": "reporter-1", "heartbeat_interval": 0.1})
    spec.handler("report")(blocking_handler(mode, release, report=True))
    with running(mode, spec, stop_when_idle=True) as r:
        [row] = wait_for(lambda: in_flight(dsn), "the message in flight")
        assert row["queue_name"] == "q" and row["consumer_name"] == "c"
        assert row["worker"] == "reporter-1" and row["msg_id"] == msg_id
        assert float(row["percent"]) == 42 and row["stage"] == "rendering"
        assert row["counters"] == {"rows": 1200}
        assert row["started_at"] <= row["last_heartbeat"]
        # the heartbeat goes on while the handler runs
        first = row["last_heartbeat"]
        wait_for(lambda: in_flight(dsn)[0]["last_heartbeat"] > first, "a newer heartbeat")
        [info] = client.in_flight("q")
        assert info.msg_id == msg_id and info.percent == 42 and info.worker == "reporter-1"
        release.set()
        stats = r.join()
    assert stats.handled == 1
    assert in_flight(dsn) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.progress").fetchone() == (0,)


@pytest.mark.parametrize("mode", MODES)
def test_a_long_handler_shows_up_without_reporting(mode: str, client: pglogq.Client, dsn: str) -> None:
    setup(client)
    msg_id = client.send("q", {}, type="slow")
    client.tick("q", force=True)
    release = threading.Event()
    spec = Spec(dsn, "q", "c", kwargs={"heartbeat_interval": 0.1})
    spec.handler()(blocking_handler(mode, release, report=False))
    with running(mode, spec, stop_when_idle=True) as r:
        [row] = wait_for(lambda: in_flight(dsn), "the message in flight")
        assert row["msg_id"] == msg_id and row["percent"] is None and row["stage"] is None
        assert row["worker"]  # host:pid of the worker
        release.set()
        r.join()
    assert in_flight(dsn) == []


def test_many_events_leave_the_progress_table_empty(client: pglogq.Client, dsn: str) -> None:
    setup(client)
    client.send_batch("q", [{"n": i} for i in range(300)], type="t")
    client.tick("q", force=True)
    consumer = pglogq.Consumer(dsn, "q", "c", max_messages=50, progress_interval=0.001)
    consumer.handler()(lambda msg: msg.progress(100, stage="done"))
    stats = consumer.run(stop_when_idle=True)
    consumer.close()
    assert stats.handled == 300
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.progress").fetchone() == (0,)


def test_report_progress_validates_its_input(client: pglogq.Client) -> None:
    setup(client)
    ids = client.send_batch("q", [{"n": i} for i in range(4)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=2)
    assert page.id is not None
    assert client.report_progress(page.id, ids[0], percent=10, stage="a") is True
    with pytest.raises(pglogq.InvalidProgress):
        client.report_progress(page.id, ids[0], percent=101)
    with pytest.raises(pglogq.InvalidProgress):
        client.report_progress(page.id, ids[0], percent=-1)
    with pytest.raises(pglogq.InvalidProgress):
        client.report_progress(page.id, ids[0], stage="x" * 201)
    with pytest.raises(pglogq.InvalidProgress):
        client.report_progress(page.id, ids[0], counters={"big": "x" * 5000})
    with pytest.raises(pglogq.MessageNotInBatch):
        client.report_progress(page.id, ids[2])  # in the batch, but not in the returned page
    with pytest.raises(pglogq.UnknownBatch):
        client.report_progress(12, ids[0])
    # None keeps the last values
    assert client.report_progress(page.id, ids[0], counters={"rows": 5}) is True
    [row] = client.in_flight()
    assert (row.percent, row.stage, row.counters) == (10, "a", {"rows": 5})
    assert client.heartbeat(page.id) is True
    page.ack()
    assert client.in_flight() == []
    # the batch is held until its last page is acknowledged
    assert client.heartbeat(page.id) is True
    page2 = client.receive("q", "c", max_messages=2)
    assert page2.id == page.id and [m.msg_id for m in page2] == ids[2:]
    page2.ack()
    assert client.heartbeat(page.id) is False
    assert client.report_progress(page.id, ids[3], percent=1) is False
    with pytest.raises(pglogq.UnknownBatch):
        client.heartbeat(0)
