"""A stuck consumer: visible while it blocks rotation; moved forward only under an explicit limit."""

from __future__ import annotations

import time

import pytest

import pglogq


def test_stuck_consumer_blocks_rotation_and_is_named(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "stuck")
    client.subscribe("q", "live")
    client.set_queue_config("q", "rotation_period", "1 ms")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    assert client.receive("q", "live")
    info = client.queue_info("q")[0]
    assert info.rotation_blocked_by is not None and "stuck" in info.rotation_blocked_by
    stuck = {c.consumer_name: c for c in client.consumer_info("q")}["stuck"]
    assert stuck.lag_events == 1 and stuck.lag is not None and stuck.lag.total_seconds() > 0
    # removing it unblocks rotation
    client.unsubscribe("q", "stuck")
    client.receive("q", "live").ack()
    client.tick("q", force=True)
    client.receive("q", "live")
    assert client.rotate("q", force=False)


def test_retention_limit_moves_a_stuck_consumer_and_says_so(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "stuck")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    time.sleep(1.1)
    client.send("q", {"n": 2})
    client.tick("q", force=True)
    assert client.maintain().get("retention:q") is None  # no limit: nothing moves
    client.set_queue_config("q", "max_consumer_lag", "1 second")
    done = client.maintain()
    assert done["retention:q"] == 1
    info = client.consumer_info("q", "stuck")[0]
    assert info.skipped_events >= 1 and info.skipped_at is not None
    got = [m.payload for m in client.receive("q", "stuck")]
    assert {"n": 1} not in got


def test_retention_limit_must_be_an_interval(client: pglogq.Client) -> None:
    client.create_queue("q")
    with pytest.raises(pglogq.InvalidConfig):
        client.set_queue_config("q", "max_consumer_lag", "soon")
    with pytest.raises(pglogq.InvalidConfig):
        client.set_queue_config("q", "max_consumer_lag", "-1 hour")


def test_retention_never_skips_a_fresh_event_of_a_caught_up_consumer(client: pglogq.Client) -> None:
    """Regression: the consumer's tick is older than the limit after a quiet spell, but the
    consumer is not behind: the event ticked just now must be delivered, nothing skipped."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "max_consumer_lag", "1 second")
    client.send("q", {"n": 0})
    client.tick("q", force=True)
    page = client.receive("q", "c")
    assert [m.payload for m in page] == [{"n": 0}]
    page.ack()
    assert not client.receive("q", "c")  # caught up
    time.sleep(1.3)
    fresh = client.send("q", {"n": 1})
    client.tick("q", force=True)
    info = client.consumer_info("q", "c")[0]
    assert info.lag is not None and info.lag.total_seconds() < 1
    assert client.maintain().get("retention:q") == 0
    info = client.consumer_info("q", "c")[0]
    assert info.skipped_events == 0 and info.skipped_at is None
    assert [m.msg_id for m in client.receive("q", "c")] == [fresh]
