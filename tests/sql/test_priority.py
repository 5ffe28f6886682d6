"""Priority: with a backlog, higher priority first; within a priority, commit order by tick.

The guarantee (docs/how-to/priority.md): a batch is delivered in (priority desc, txid, id)
order; a batch merges every tick up to about ``batch_max_events`` events, so a backlog up to
that size is one batch and comes highest priority first.  Beyond it, priority holds within each
batch; a single tick above ``big_batch_events`` is streamed in commit (txid) order instead.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support import draining

LEVELS = (30, 100, 150)  # backfill, routine, user-triggered (the seeds' reference levels)


def drain(api: Any, page: int = 5) -> list[tuple[int, int]]:
    """(priority, msg_id) in delivery order, paging through every batch."""
    return [(m.priority, m.msg_id) for m in draining.drain(api, "q", "c", page=page)]


def backlog(api: Any, rounds: int = 4, per_level: int = 3) -> list[tuple[int, int, int]]:
    """Rounds of sends at the three levels, interleaved, one tick per round: (round, priority, id)."""
    sent: list[tuple[int, int, int]] = []
    for r in range(rounds):
        for i in range(per_level):
            for prio in (LEVELS[i % 3], LEVELS[(i + 1) % 3], LEVELS[(i + 2) % 3]):
                sent.append((r, prio, api.send("q", {"round": r}, priority=prio)))
        api.tick("q", force=True)
    return sent


def test_backlog_comes_highest_priority_first(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    sent = backlog(api)
    got = drain(api)
    # by priority, then in commit order (each send was its own transaction, in id order)
    expected = [(p, i) for _, p, i in sorted(sent, key=lambda s: (-s[1], s[0], s[2]))]
    assert got == expected
    assert [p for p, _ in got[:12]] == [150] * 12 and [p for p, _ in got[-12:]] == [30] * 12


def test_the_consumer_runtime_handles_a_backlog_in_priority_order(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    sent = backlog(client)
    seen: list[int] = []
    consumer = pglogq.Consumer(dsn, "q", "c", max_messages=7)
    consumer.handler()(lambda msg: seen.append(msg.priority))
    consumer.run(stop_when_idle=True)
    consumer.close()
    assert seen == sorted((p for _, p, _ in sent), reverse=True)


def test_priority_holds_within_each_batch_beyond_batch_max_events(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    api.set_queue_config("q", "batch_max_events", 9)
    sent = backlog(api)  # 4 ticks of 9 events: each batch is one tick
    got = drain(api)
    expected: list[tuple[int, int]] = []
    for r in range(4):
        expected += [(p, i) for rr, p, i in sorted(sent, key=lambda s: (-s[1], s[2])) if rr == r]
    assert got == expected
    # so a backfill event of an older batch comes before a user-triggered one of a newer batch
    assert sent[0][:2] == (0, 30) and sent[11][:2] == (1, 150)
    assert got.index((30, sent[0][2])) < got.index((150, sent[11][2]))


def test_a_big_batch_is_streamed_in_commit_order(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    api.set_queue_config("q", "big_batch_events", 5)
    sent = backlog(api, rounds=1)  # one tick of 9 events > big_batch_events
    assert drain(api) == [(p, i) for _, p, i in sent]


def test_within_a_priority_the_order_is_commit_order_at_tick_granularity(
    client: pglogq.Client, dsn: str
) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    with psycopg.connect(dsn) as early, psycopg.connect(dsn) as late:
        # `early` starts first (lower txid) but commits after `late` and after a tick
        early.execute("SELECT pg_current_xact_id()")
        late_id = client.send("q", {"who": "late"}, conn=late)
        late.commit()
        client.tick("q", force=True)
        early_id = client.send("q", {"who": "early"}, conn=early)
        early.commit()
        client.tick("q", force=True)
        # same again, but both commit before one tick: then transaction order (txid) decides
        early.execute("SELECT pg_current_xact_id()")
        late2 = client.send("q", {"who": "late"}, conn=late)
        late.commit()
        early2 = client.send("q", {"who": "early"}, conn=early)
        early.commit()
        client.tick("q", force=True)
    got = [i for _, i in drain(client)]
    assert got == [late_id, early_id, early2, late2]


def test_a_retried_event_keeps_its_priority(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    hot = client.send("q", {"n": 1}, priority=150)
    client.tick("q", force=True)
    batch = client.receive("q", "c")
    assert client.nack(batch.messages[0], retry_after=timedelta(0)) == "retry"
    batch.ack()
    cold = client.send_batch("q", [{"n": i} for i in range(3)], priority=30)
    client.maintain()  # the pump re-inserts the due retry
    client.tick("q", force=True)
    got = drain(client)
    assert got[0] == (150, hot) and [i for _, i in got[1:]] == cold


@pytest.mark.parametrize("bad", [-32769, 32768])
def test_priority_out_of_range_is_refused(client: pglogq.Client, bad: int) -> None:
    client.create_queue("q")
    with pytest.raises((pglogq.InvalidInput, psycopg.Error)):
        client.send("q", {}, priority=bad)
