"""Lag and pending, as docs/how-to/monitoring.md defines them ("Lag and pending").

pending: events ticked and not yet acknowledged (open batches and leases included); lag: the
age of the oldest pending event, counted from its tick (0 when nothing is pending); lag_events
(shown as "unread"): ticked events not yet handed to any worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pglogq
from tests.support.db import TICK_HEAD_FOLLOWS


def test_an_idle_consumer_after_empty_ticks_has_no_lag(client: pglogq.Client) -> None:
    """Empty ticks after the consumer's position are no work: lag stays 0 (it grew with them)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    client.receive("q", "c").ack()
    for _ in range(3):
        client.tick("q", force=True)  # keep-alive ticks: no event
    (info,) = client.consumer_info("q", "c")
    assert (info.pending_events, info.lag_events, info.lag) == (0, 0, timedelta(0))
    client.subscribe("q", "fresh")  # never had anything: also no lag after empty ticks
    client.tick("q", force=True)
    client.tick("q", force=True)
    (info,) = client.consumer_info("q", "fresh")
    assert (info.pending_events, info.lag) == (0, timedelta(0))


def test_a_worker_holding_a_batch_is_pending_and_lagging_not_unread(client: pglogq.Client) -> None:
    """A cooperating worker took 5 events: nothing is unread, but 5 are pending and they age."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)  # an empty tick first: lag counts from the tick holding events
    client.send_batch("q", [{"n": i} for i in range(5)])
    client.tick("q", force=True)
    client.tick("q", force=True)
    page = client.receive("q", "c", worker="w1")
    assert len(page) == 5
    (info,) = client.consumer_info("q", "c")
    assert (info.pending_events, info.lag_events) == (5, 0)
    assert info.lag is not None and info.lag > timedelta(0)
    page.ack()
    (info,) = client.consumer_info("q", "c")
    assert (info.pending_events, info.lag_events, info.lag) == (0, 0, timedelta(0))


def test_lag_is_the_age_of_the_oldest_pending_event_from_its_tick(client: pglogq.Client, dsn: str) -> None:
    """Counted from the first tick after the position that holds events, not from an empty one."""
    import psycopg

    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)  # empty
    client.send("q", {"n": 1})
    client.tick("q", force=True)  # holds the event
    with psycopg.connect(dsn, autocommit=True) as conn:
        # age the empty tick by an hour, the tick holding the event by a minute
        conn.execute("UPDATE pglogq.tick SET tick_time = tick_time - interval '1 hour'"
                     " WHERE tick_id = (SELECT max(tick_id) - 1 FROM pglogq.tick)")
        conn.execute("UPDATE pglogq.tick SET tick_time = tick_time - interval '1 minute'"
                     " WHERE tick_id = (SELECT max(tick_id) FROM pglogq.tick)")
        conn.execute(TICK_HEAD_FOLLOWS)
        for shortcut in (True, False):  # from tick_head's run of ticks, then from the ticks
            if not shortcut:
                conn.execute("UPDATE pglogq.tick_head SET prev_event_tick = NULL")
            (info,) = client.consumer_info("q", "c")
            assert info.pending_events == 1
            assert info.lag is not None and timedelta(minutes=1) <= info.lag < timedelta(hours=1)


def _figures(conn: Any) -> dict[tuple[str, str], tuple[int, int, timedelta]]:
    rows = conn.execute("SELECT queue_name, consumer_name, lag_events, pending_events, lag"
                        "  FROM pglogq.consumer_info()").fetchall()
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}


def _now(conn: Any) -> Any:
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]


def test_consumers_behind_the_last_tick_of_events_only_read_no_ticks(client: pglogq.Client, dsn: str) -> None:
    """A consumer whose cursor and batches lie in the run of ticks just before the queue's last
    tick of events has its figures from tick_head (the listing reads no tick partition for it):
    the same figures as read from the ticks, and a queue with a consumer further behind is read."""
    import psycopg

    client.create_queue("near")
    client.create_queue("far")
    for queue in ("near", "far"):
        for consumer in ("at", "one", "batch", "two"):
            client.subscribe(queue, consumer)
    for queue in ("near", "far"):
        client.send_batch(queue, [{"n": i} for i in range(2)])
        client.tick(queue, force=True)  # the tick of events before the last one
        client.tick(queue, force=True)  # and an empty one after it
        if queue == "near":
            for consumer in ("at", "one", "batch", "two"):
                client.receive(queue, consumer).ack()
        else:
            for consumer in ("at", "one", "batch"):
                client.receive(queue, consumer).ack()
        client.send_batch(queue, [{"n": i} for i in range(3)])
        client.tick(queue, force=True)  # the last tick of events
        client.tick(queue, force=True)
        client.receive(queue, "at").ack()
        assert len(client.receive(queue, "batch", worker="w")) == 3  # a batch open in the run
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as other:
        before = _now(conn)
        shortcut = _figures(conn)
        # the figures read from the ticks: tick_head's run unknown, as in a row of before it
        with conn.transaction():
            conn.execute("UPDATE pglogq.tick_head SET prev_event_tick = NULL")
            read = _figures(conn)
            conn.execute("ROLLBACK")
        elapsed = _now(conn) - before
        assert shortcut.keys() == read.keys()
        for key, (unread, pending, lag) in read.items():
            assert shortcut[key][:2] == (unread, pending), key
            assert abs(shortcut[key][2] - lag) <= elapsed, key
        expect = {"at": (0, 0), "one": (3, 3), "batch": (0, 3)}
        assert {c: shortcut[("near", c)][:2] for c in expect} == expect
        assert shortcut[("near", "two")][:2] == (3, 3)
        assert shortcut[("far", "two")][:2] == (5, 5)  # two ticks of events behind
        assert shortcut[("near", "one")][2] > timedelta(0)
        # with another session holding each queue's tick table, the listing of "near" goes on
        # (it reads none of its ticks), and that of "far" waits (it reads them)
        conn.execute("SET lock_timeout = '2s'")
        for queue, waits in (("near", False), ("far", True)):
            qid = conn.execute("SELECT queue_id FROM pglogq.queue WHERE queue_name = %s", (queue,)).fetchone()
            assert qid is not None
            with other.transaction():
                other.execute(f"LOCK TABLE pglogq.tick_{qid[0]} IN ACCESS EXCLUSIVE MODE".encode())
                try:
                    rows = conn.execute("SELECT count(*) FROM pglogq.consumer_info(%s)", (queue,)).fetchone()
                    assert not waits and rows == (4,)
                except psycopg.errors.LockNotAvailable:
                    assert waits
