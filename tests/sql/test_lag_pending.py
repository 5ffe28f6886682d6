"""Lag and pending, as docs/how-to/monitoring.md defines them ("Lag and pending").

pending: events ticked and not yet acknowledged (open batches and leases included); lag: the
age of the oldest pending event, counted from its tick (0 when nothing is pending); lag_events
(shown as "unread"): ticked events not yet handed to any worker.
"""

from __future__ import annotations

from datetime import timedelta

import pglogq


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
    (info,) = client.consumer_info("q", "c")
    assert info.pending_events == 1
    assert info.lag is not None and timedelta(minutes=1) <= info.lag < timedelta(hours=1)
