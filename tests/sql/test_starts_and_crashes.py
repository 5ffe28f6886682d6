"""The job queue at the SQL level: cancel until a handler starts
(receive's start_first, mark_started), crashes counted as failed attempts, maintenance releasing
a dead worker's batch (docs/reliability/attacks-jobs-cancel.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.jobs import rows, setup

# -- cancel: SQL contract ------------------------------------------------------------------------


def test_cancel_after_receive_when_the_receiver_marks_starts(client: pglogq.Client) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=1)
    assert [m.msg_id for m in page] == ids
    assert client.cancel("q", ids[0]) is False  # marked started by receive
    assert client.cancel("q", ids[2]) is True  # received, not started
    assert client.cancel("q", ids[2]) is False  # cancelled twice: false, nothing changes
    # the runtime marks the next starts: the cancelled one is reported, never to be started
    assert client.mark_started(page.messages[1]) == []
    assert client.cancel("q", ids[1]) is False
    assert client.mark_started(page.messages[2]) == [ids[2]]
    assert page.ack()
    assert len(client.receive("q", "c")) == 0


def test_a_receiver_that_does_not_mark_starts_keeps_the_old_contract(client: pglogq.Client) -> None:
    """SQL-only consumers (receive without start_first): the whole page counts as started."""
    ids = setup(client, 3)
    page = client.receive("q", "c")
    assert all(client.cancel("q", i) is False for i in ids)
    assert client.mark_started(page.messages[2]) == []  # nothing to mark
    # a second receive returns the same page, no attempt counted
    again = client.receive("q", "c")
    assert [(m.msg_id, m.retry_count) for m in again] == [(i, 0) for i in ids]


def test_cancel_counts_every_consumer(client: pglogq.Client) -> None:
    ids = setup(client, 2)
    client.subscribe("q", "d")  # subscribed after the tick: never handed these events
    client.receive("q", "c", start_first=0)
    assert client.cancel("q", ids[1]) is True
    assert client.cancel("q", ids[0]) is True


def test_cancel_and_start_race_has_exactly_one_winner(client: pglogq.Client, dsn: str) -> None:
    """A cancel and a start racing for each of 200 events: cancel true <=> never started."""
    ids = setup(client, 200)
    page = client.receive("q", "c", max_messages=200, start_first=0)
    outcome_cancel: dict[int, bool] = {}
    started: set[int] = set()
    barrier = threading.Barrier(2)

    def canceller() -> None:
        with pglogq.Client(dsn) as other:
            barrier.wait()
            for i in reversed(ids):
                try:
                    outcome_cancel[i] = other.cancel("q", i)
                except pglogq.CancelConflict:
                    outcome_cancel[i] = False  # refused at COMMIT: the start won

    t = threading.Thread(target=canceller)
    t.start()
    barrier.wait()
    for m in page:
        gone = client.mark_started(m)
        assert gone is not None
        if m.msg_id not in gone:
            started.add(m.msg_id)
    t.join()
    assert page.ack()
    for i in ids:
        assert outcome_cancel[i] is (i not in started), i
    assert 0 < len(started) < len(ids) or len(started) in (0, len(ids))


def test_start_frontier_can_move_back(client: pglogq.Client) -> None:
    ids = setup(client, 3)
    page = client.receive("q", "c", start_first=3)
    assert client.cancel("q", ids[2]) is False
    assert client.mark_started(page.messages[0], back=True) == []
    assert client.cancel("q", ids[2]) is True
    assert client.cancel("q", ids[0]) is False
    with pytest.raises(pglogq.NotStartedThatFar):
        client.mark_started(page.messages[1], back=True)
    assert client.mark_started(None, back=True, batch_id=page.id) == []
    assert client.cancel("q", ids[0]) is True


@pytest.mark.parametrize("bad", [-1, 100001, 2**31, True, "1"])
def test_start_first_out_of_range(client: pglogq.Client, bad: Any) -> None:
    setup(client, 1)
    with pytest.raises((pglogq.InvalidStartCount, pglogq.InvalidArgument)):
        client.receive("q", "c", start_first=bad)
    with psycopg.connect(client.dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT * FROM pglogq.receive('q', 'c', 10, NULL, -1)")
    assert info.value.sqlstate == "PQ060"
    assert client.cancel("q", 1) is True  # nothing was received


def test_mark_started_refuses_what_is_not_in_the_page(client: pglogq.Client) -> None:
    setup(client, 3)
    page = client.receive("q", "c", max_messages=1, start_first=0)
    with psycopg.connect(client.dsn, autocommit=True) as conn:
        for args, code in [((page.id, 2), "PQ010"), ((page.id, None), "PQ010"), ((0, 1), "PQ008"),
                           ((2**62, 1), "PQ008")]:
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT pglogq.mark_started(%s, %s)", args)
            assert info.value.sqlstate == code, args
    assert page.ack()
    with pytest.raises(pglogq.MessageNotInBatch):
        client.mark_started(page.messages[0])  # acknowledged, the batch goes on
    rest = client.receive("q", "c", max_messages=10, start_first=0)
    assert rest.ack()
    assert client.mark_started(page.messages[0]) is None  # the batch is closed: no longer ours


# -- crashes are failed attempts ----------------------------------------------------------------


def test_a_crashed_page_counts_attempts_and_isolates_the_culprit(client: pglogq.Client) -> None:
    """SQL level: a page handed out again without ack, with handlers started, is a crash."""
    ids = setup(client, 4, max_retries=2)
    page = client.receive("q", "c", start_first=0)
    client.mark_started(page.messages[2])  # handlers ran 1, 2, started 3; 4 never started
    # the worker dies; the same worker name asks again
    again = client.receive("q", "c", start_first=0)
    assert [(m.msg_id, m.retry_count) for m in again] == [(ids[0], 1)]  # halved: 3 suspects -> 1
    assert client.cancel("q", ids[1]) is False  # started before the crash
    client.mark_started(again.messages[0])
    assert again.ack()
    page = client.receive("q", "c", start_first=0)
    assert [(m.msg_id, m.retry_count) for m in page] == [(ids[1], 1)]
    client.mark_started(page.messages[0])
    assert page.ack()
    deliveries = 1
    while True:
        page = client.receive("q", "c", start_first=0)
        if not page or page.messages[0].msg_id != ids[2]:
            break
        assert len(page) == 1  # the culprit stands alone
        deliveries += 1
        client.mark_started(page.messages[0])  # ... and kills its worker again
    assert deliveries == 3  # max_retries + 1
    assert [(m.msg_id, m.retry_count) for m in page] == [(ids[3], 0)]  # never started: no attempt
    [dead] = client.dlq_inspect("q", "c")
    assert dead.msg_id == ids[2] and dead.retry_count == 2
    assert "never finished" in (dead.reason or "") and "3 hand-out" in (dead.reason or "")
    assert page.ack()
    assert rows(client.dsn, "SELECT count(*) FROM pglogq.attempt") == [(0,)]


def test_nack_after_a_crash_counts_the_crash(client: pglogq.Client) -> None:
    ids = setup(client, 1, max_retries=1)
    page = client.receive("q", "c", start_first=1)
    page = client.receive("q", "c", start_first=1)  # crashed once
    assert page.messages[0].retry_count == 1
    assert client.nack(page.messages[0], reason="boom") == "dead"  # 2 failed attempts = max_retries + 1
    assert page.ack()
    [dead] = client.dlq_inspect("q", "c")
    assert (dead.msg_id, dead.retry_count) == (ids[0], 1)


# -- maintenance releases a dead worker's batch -----------------------------------


def test_maintenance_releases_a_silent_workers_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 second")
    ids = client.send_batch("q", [{"n": i} for i in range(3)], type="t")
    client.tick("q", force=True)
    a = client.receive("q", "c", worker="A", start_first=1)
    assert [m.msg_id for m in a] == ids
    assert ("release", "q") not in client_ops(client)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pglogq.q"')
        time.sleep(1.2)  # A falls silent
        assert ("release", "q") in client_ops(client)
        assert client.maintain()["release:q"] == 1
        assert client.maintain().get("release:q") is None  # released once
        got = list(listener.notifies(timeout=2, stop_after=1))
        assert [n.channel for n in got] == ["pglogq.q"]  # idle workers wake at once
    [(released,)] = rows(dsn, "SELECT released_at IS NOT NULL FROM pglogq.subscription WHERE worker_name = 'A'")
    assert released
    b = client.receive("q", "c", worker="B", start_first=1)  # the next to ask takes it
    assert [(m.msg_id, m.retry_count) for m in b] == [(ids[0], 1)]  # A had started the first one
    assert client.heartbeat(a.id) is False


def test_a_released_worker_that_is_alive_keeps_its_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 second")
    client.send_batch("q", [{"n": i} for i in range(2)], type="t")
    client.tick("q", force=True)
    a = client.receive("q", "c", worker="A")
    time.sleep(1.2)
    assert client.maintain()["release:q"] == 1
    assert client.heartbeat(a.id) is True  # back before anyone took it: keeps it
    assert len(client.receive("q", "c", worker="B")) == 0
    assert a.ack()


def client_ops(client: pglogq.Client) -> list[tuple[str, str | None]]:
    return [(r[0], r[1]) for r in rows(client.dsn, "SELECT op, queue_name FROM pglogq.maint_operations()")]


