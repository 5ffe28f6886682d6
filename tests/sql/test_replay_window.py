"""The replay window: after a rotation, every event still stored stays replayable (seek), and
'earliest' is the oldest tick whose later events are all still stored."""

from __future__ import annotations

import psycopg
import pytest

import pglogq
from tests.support import draining
from tests.support.waiting import wait_for


def drain(client: pglogq.Client, consumer: str = "c") -> list[int]:
    return [m.msg_id for m in draining.drain(client, "q", consumer, page=1000)]


def rotate_when_safe(client: pglogq.Client, *, force: bool = True) -> None:
    """Rotate; on a shared server another session's open transaction can pin the new ticks'
    xmin for a moment (rotation then says "not safe yet"): tick, catch up and try again."""

    def rotated() -> bool:
        if client.rotate("q", force=force):
            return True
        client.tick("q", force=True)
        drain(client)
        return False

    wait_for(rotated, "rotation to become safe")


def stored_ids(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {int(r[0]) for r in conn.execute("SELECT ev_id FROM pglogq.event").fetchall()}


def first_tick_time(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT min(tick_time)::text FROM pglogq.tick").fetchone()
        assert row is not None
        return str(row[0])


def test_rotation_keeps_the_events_it_did_not_truncate_replayable(client: pglogq.Client, dsn: str) -> None:
    """Regression: the first rotations truncate empty tables; the 3 events are still stored and
    must stay replayable (earliest, by_events, a timestamp before them)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "rotation_period", "2 seconds")
    sent = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    before = first_tick_time(dsn)
    assert drain(client) == sent
    rotate_when_safe(client)
    client.maintain()
    assert set(sent) <= stored_ids(dsn)
    plan = client.seek_plan("q", "c", to="earliest")
    assert plan.delta_events == -3
    assert client.seek_plan("q", "c", by_events=-3).delta_events == -3
    assert client.seek_plan("q", "c", to=before).delta_events == -3
    client.seek("q", "c", to="earliest")
    assert drain(client) == sent
    # a second rotation (an empty table again) keeps them too
    client.tick("q", force=True)
    drain(client)
    rotate_when_safe(client)
    client.maintain()
    client.seek("q", "c", by_events=-3)
    assert drain(client) == sent


def test_earliest_moves_only_past_what_a_rotation_truncated(client: pglogq.Client, dsn: str) -> None:
    """The third rotation truncates the table holding the first events: earliest moves just past
    them, the later events stay replayable, and a seek before them is refused."""
    client.create_queue("q")
    client.subscribe("q", "c")
    rounds: list[list[int]] = []
    for _ in range(3):
        rounds.append(client.send_batch("q", [{"n": i} for i in range(2)]))
        client.tick("q", force=True)
        drain(client)
        rotate_when_safe(client)
        client.tick("q", force=True)
        drain(client)
        client.maintain()
    # rounds[0] lived in the table the third rotation truncated
    assert not set(rounds[0]) & stored_ids(dsn)
    assert set(rounds[1] + rounds[2]) <= stored_ids(dsn)
    plan = client.seek_plan("q", "c", to="earliest")
    assert plan.delta_events == -4
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=-6)
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", to=1)
    client.seek("q", "c", to="earliest")
    assert drain(client) == rounds[1] + rounds[2]


def test_a_consumer_that_lagged_can_replay_what_it_just_passed(client: pglogq.Client, dsn: str) -> None:
    """Regression: rotation blocked by a lagging consumer; it acks 15 events; the rotation that
    follows at once truncates nothing of them, so they must stay replayable (their ticks kept)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "rotation_period", "1 ms")
    sent: list[int] = []
    for _ in range(5):
        sent += client.send_batch("q", [{"n": i} for i in range(3)])
        client.tick("q", force=True)
    assert not client.rotate("q", force=False)  # blocked by c, still at the first tick
    assert drain(client) == sent
    rotate_when_safe(client, force=False)
    client.maintain()
    assert set(sent) <= stored_ids(dsn)
    plan = client.seek_plan("q", "c", to="earliest")
    assert plan.delta_events == -15
    client.seek("q", "c", by_events=-15)
    assert drain(client) == sent
