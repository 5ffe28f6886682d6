"""Share consumers on partitioned queues (keys), with an urgent lane, and their in-flight window.

On a partitioned queue a share consumer's lease is a partition's page: at most one is out per
partition (a key's events never run at once and start in send order), while any idle worker
takes a page of any other partition.  On a queue with an urgent lane, urgent events are leased
before ordinary ones, to as many workers as ask.  The window bounds how many events are handed
out from the first event of the oldest open lease on."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pglogq
from pglogq.errors import (
    CedeRefused,
    InvalidArgument,
    NotAShareConsumer,
    StaleBatch,
    UnknownBatch,
)
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick

PARTS = 4


def _ids(batch: pglogq.Batch) -> list[int]:
    return [m.msg_id for m in batch]


def _silence(dsn: str, worker: str) -> None:
    """Make a worker look silent for an hour (as if it died holding its lease or page)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE worker_name = %s OR lease_worker = %s", (worker, worker))


def _keys_by_partition() -> dict[int, list[str]]:
    """Two keys in each partition of a queue of PARTS partitions."""
    found: dict[int, list[str]] = {p: [] for p in range(PARTS)}
    i = 0
    while any(len(v) < 2 for v in found.values()):
        k = f"key-{i}"
        i += 1
        part = pglogq.key_partition(k, PARTS)
        if len(found[part]) < 2:
            found[part].append(k)
    return found


KEYS = _keys_by_partition()


@pytest.fixture
def parts(client: pglogq.Client) -> pglogq.Client:
    client.create_queue("orders", partitions=PARTS)
    assert client.subscribe("orders", "shipper", share=True)
    return client


# -- keys ------------------------------------------------------------------------------------------


def test_two_workers_never_hold_events_of_one_key_at_once(parts: pglogq.Client) -> None:
    key = KEYS[0][0]
    mine = [parts.send("orders", {"n": i}, key=key) for i in range(3)]
    parts.tick("orders", force=True)
    first = parts.receive("orders", "shipper", worker="a", max_messages=1)
    assert _ids(first) == mine[:1]
    # the key's next events are not handed to anyone while a's lease of its partition is out
    for w in ("b", "c", "d"):
        assert not parts.receive("orders", "shipper", worker=w, max_messages=10).messages
    assert first.ack()
    # then the next worker that asks takes the next of the key, in send order
    second = parts.receive("orders", "shipper", worker="b", max_messages=10)
    assert _ids(second) == mine[1:]
    assert not parts.receive("orders", "shipper", worker="a").messages
    assert second.ack()


def test_unkeyed_and_other_keys_flow_to_idle_workers_while_one_keys_lease_is_out(parts: pglogq.Client) -> None:
    slow_key = KEYS[1][0]
    slow = parts.send("orders", {"job": "report"}, key=slow_key)
    parts.tick("orders", force=True)
    held = parts.receive("orders", "shipper", worker="a", max_messages=1)
    assert _ids(held) == [slow]
    # meanwhile: more of the slow key, a key sharing its partition, other keys, unkeyed events
    later_slow = parts.send("orders", {"n": 0}, key=slow_key)
    neighbour = parts.send("orders", {"n": 1}, key=KEYS[1][1])
    others = {parts.send("orders", {"n": 2 + p}, key=KEYS[p][0]) for p in (0, 2, 3)}
    unkeyed = [parts.send("orders", {"n": 10 + i}) for i in range(8)]
    parts.tick("orders", force=True)
    with psycopg.connect(parts.dsn, autocommit=True) as conn:
        where = dict(conn.execute("SELECT ev_id, ev_partition FROM pglogq.event WHERE ev_id = ANY(%s)",
                                  (unkeyed,)).fetchall())
    behind = {later_slow, neighbour} | {i for i in unkeyed if where[i] == 1}
    free = others | {i for i in unkeyed if where[i] != 1}
    assert behind and free
    got: set[int] = set()
    for _ in range(20):  # two idle workers drain what is free, a page at a time
        pages = [parts.receive("orders", "shipper", worker=w, max_messages=2) for w in ("b", "c")]
        if not any(p.messages for p in pages):
            break
        for p in pages:
            got |= set(_ids(p))
            if p.messages:
                assert p.ack()
    assert got == free  # nothing of the held partition, everything else
    assert held.ack()
    rest = drain(parts, "orders", "shipper", worker="b")
    assert {m.msg_id for m in rest} == behind
    assert [m.msg_id for m in rest if m.msg_id in (later_slow, neighbour)] == [later_slow, neighbour]


def test_a_keys_events_start_in_send_order_under_retries(parts: pglogq.Client) -> None:
    parts.set_queue_config("orders", "retry_delay", "0")
    parts.set_queue_config("orders", "max_retries", 5)
    key = KEYS[2][0]
    sent = [parts.send("orders", {"n": i}, key=key) for i in range(5)]
    parts.tick("orders", force=True)
    failures = {sent[1]: 2, sent[3]: 1}  # fail these that many times
    started: list[int] = []
    for turn in range(40):
        worker = "abc"[turn % 3]  # the next lease goes to another worker each time
        page = parts.receive("orders", "shipper", worker=worker, max_messages=3)
        if not page.messages:
            break
        for m in page:
            started.append(m.msg_id)
            if failures.get(m.msg_id, 0) > 0:
                failures[m.msg_id] -= 1
                assert page.nack(m, retry_after=timedelta(0), reason="try again") == "retry"
                break  # the rest of the page comes again after it
        assert page.ack()
    # every start in send order: a failed event again before anything after it
    firsts = [i for n, i in enumerate(started) if i not in started[:n]]
    assert firsts == sent
    for a, b in itertools.pairwise(started):
        assert sent.index(b) <= sent.index(a) + 1, started
    assert started.count(sent[1]) == 3 and started.count(sent[3]) == 2


def test_a_dead_workers_partition_lease_is_taken_over(parts: pglogq.Client, dsn: str) -> None:
    key = KEYS[3][0]
    mine = [parts.send("orders", {"n": i}, key=key) for i in range(2)]
    parts.tick("orders", force=True)
    dead = parts.receive("orders", "shipper", worker="dead", max_messages=5, start_first=1)
    assert _ids(dead) == mine
    assert not parts.receive("orders", "shipper", worker="live").messages  # held: nothing else waits
    _silence(dsn, "dead")
    taken = parts.receive("orders", "shipper", worker="live", max_messages=5)
    assert _ids(taken) == mine[:1]  # halved after the crash: the started event alone first
    assert taken.messages[0].retry_count == 1  # the crash counted
    with pytest.raises((StaleBatch, UnknownBatch)):
        dead.ack()
    assert taken.ack()
    assert [m.msg_id for m in drain(parts, "orders", "shipper", worker="live")] == mine[1:]


def test_a_partition_page_is_not_ceded(parts: pglogq.Client) -> None:
    mine = [parts.send("orders", {"n": i}, key=KEYS[0][0]) for i in range(3)]
    parts.tick("orders", force=True)
    page = parts.receive("orders", "shipper", worker="a", max_messages=3, start_first=0)
    with pytest.raises(CedeRefused):
        page.cede(keep=page.messages[0])
    with pytest.raises(CedeRefused):
        page.cede()
    again = parts.receive("orders", "shipper", worker="a", max_messages=3, start_first=0)
    assert _ids(again) == mine  # as it was
    assert page.ack()


def test_seek_reinstall_and_rotation_while_partition_leases_are_out(parts: pglogq.Client, dsn: str) -> None:
    a_ids = [parts.send("orders", {"n": i}, key=KEYS[0][0]) for i in range(2)]
    b_ids = [parts.send("orders", {"n": i}, key=KEYS[2][0]) for i in range(2)]
    parts.tick("orders", force=True)
    first = parts.receive("orders", "shipper", worker="a", max_messages=5)
    second = parts.receive("orders", "shipper", worker="b", max_messages=5)
    assert {tuple(_ids(first)), tuple(_ids(second))} == {tuple(a_ids), tuple(b_ids)}
    parts.install_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
    # the leases stay: the same pages, nobody else gets their partitions
    assert _ids(parts.receive("orders", "shipper", worker="a", max_messages=5)) == _ids(first)
    assert not parts.receive("orders", "shipper", worker="c").messages
    parts.seek("orders", "shipper", to="earliest", force=True)
    for held in (first, second):
        with pytest.raises((StaleBatch, UnknownBatch)):
            held.ack()
    got = drain(parts, "orders", "shipper", worker="c")
    assert sorted(m.msg_id for m in got) == sorted(a_ids + b_ids)
    by_key = [m.msg_id for m in got if m.msg_id in a_ids]
    assert by_key == a_ids


def test_partitions_set_at_rest_on_a_queue_with_a_share_consumer(client: pglogq.Client) -> None:
    client.create_queue("jobs")
    client.subscribe("jobs", "mailer", share=True)
    client.send("jobs", {"n": 0})
    client.tick("jobs", force=True)
    assert len(drain(client, "jobs", "mailer", worker="a")) == 1
    assert client.set_queue_config("jobs", "partitions", PARTS) == str(PARTS)
    key = KEYS[1][0]
    mine = [client.send("jobs", {"n": i}, key=key) for i in range(2)]
    client.tick("jobs", force=True)
    held = client.receive("jobs", "mailer", worker="a", max_messages=1)
    assert _ids(held) == mine[:1]
    assert not client.receive("jobs", "mailer", worker="b").messages  # one lease per partition now
    assert held.ack()


# -- the urgent lane -------------------------------------------------------------------------------


@pytest.fixture
def lane(client: pglogq.Client) -> pglogq.Client:
    client.create_queue("mail", urgent_lane=True)
    assert client.subscribe("mail", "mailer", share=True)
    return client


def test_an_urgent_event_is_leased_before_a_waiting_backlog(lane: pglogq.Client) -> None:
    backlog = [lane.send("mail", {"n": i}) for i in range(5)]
    lane.tick("mail", force=True)
    first = lane.receive("mail", "mailer", worker="a", max_messages=1)
    assert _ids(first) == backlog[:1]
    urgent = [lane.send("mail", {"vip": i}, priority=200) for i in range(3)]
    lane.tick("mail", force=True)
    # every idle worker takes urgent events first, each its own lease of the lane
    b = lane.receive("mail", "mailer", worker="b", max_messages=1)
    c = lane.receive("mail", "mailer", worker="c", max_messages=5)
    assert _ids(b) == urgent[:1] and _ids(c) == urgent[1:]
    assert all(m.priority == 200 for m in c)
    d = lane.receive("mail", "mailer", worker="d", max_messages=10)
    assert _ids(d) == backlog[1:]  # then the backlog
    for held in (first, b, c, d):
        assert held.ack()
    assert not lane.receive("mail", "mailer", worker="a").messages


def test_urgent_leases_fail_crash_cede_and_show_like_any_lease(lane: pglogq.Client, dsn: str) -> None:
    lane.set_queue_config("mail", "retry_delay", "0")
    normal = lane.send("mail", {"n": 0})
    urgent = [lane.send("mail", {"vip": i}, priority=150 + i) for i in range(4)]
    lane.tick("mail", force=True)
    a = lane.receive("mail", "mailer", worker="a", max_messages=1)
    assert _ids(a) == [urgent[3]]  # the lane in priority order
    state = {r.msg_id: (r.state, r.worker) for i in urgent for r in lane.lookup("mail", i)}
    assert state[urgent[3]] == ("in-flight", "a") and state[urgent[0]] == ("waiting", None)
    assert [j.msg_id for j in lane.jobs("mail", "mailer", state="in-flight")] == [urgent[3]]
    assert a.nack(a.messages[0], retry_after=timedelta(0)) == "retry"
    assert a.ack()
    # a lease of three urgent events, the first started: the rest ceded to the next worker
    b = lane.receive("mail", "mailer", worker="b", max_messages=3, start_first=1)
    assert _ids(b) == [urgent[2], urgent[1], urgent[0]]
    assert b.cede(keep=b.messages[0])
    c = lane.receive("mail", "mailer", worker="c", max_messages=5, start_first=1)
    assert _ids(c) == [urgent[1], urgent[0]]
    # c dies: its lease of the lane is taken over before anything else, the crash counted
    _silence(dsn, "c")
    d = lane.receive("mail", "mailer", worker="d", max_messages=5)
    assert _ids(d) == [urgent[1]] and d.messages[0].retry_count == 1
    assert b.ack() and d.ack()
    with pytest.raises((StaleBatch, UnknownBatch)):
        c.ack()
    pump_and_tick(lane, "mail")  # the nacked urgent event's retry into the log
    rest = drain(lane, "mail", "mailer", worker="d")
    # the rest of the crashed lease, the retry (urgent: leased first), then the ordinary event
    assert [(m.msg_id, m.retry_count) for m in rest] == [(urgent[0], 0), (urgent[3], 1), (normal, 0)]


def test_urgent_leases_survive_a_reinstall_and_a_rotation_and_seek_ends_them(lane: pglogq.Client, dsn: str) -> None:
    normal = lane.send("mail", {"n": 0})
    urgent = [lane.send("mail", {"vip": i}, priority=200) for i in range(3)]
    lane.tick("mail", force=True)
    a = lane.receive("mail", "mailer", worker="a", max_messages=1)
    assert _ids(a) == urgent[:1]
    lane.install_schema()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
    assert _ids(lane.receive("mail", "mailer", worker="a", max_messages=1)) == urgent[:1]  # a's lease, as it was
    b = lane.receive("mail", "mailer", worker="b", max_messages=1)
    assert _ids(b) == urgent[1:2]  # the lane's frontier, as it was
    lane.seek("mail", "mailer", to="earliest", force=True)
    for held in (a, b):
        with pytest.raises((StaleBatch, UnknownBatch)):
            held.ack()
    assert [m.msg_id for m in drain(lane, "mail", "mailer", worker="c")] == [*urgent, normal]


# -- the window ------------------------------------------------------------------------------------


@pytest.fixture
def jobs(client: pglogq.Client) -> pglogq.Client:
    client.create_queue("jobs")
    assert client.subscribe("jobs", "mailer", share=True)
    return client


def test_a_full_window_gives_nothing_until_its_oldest_lease_ends(jobs: pglogq.Client) -> None:
    assert jobs.set_share_window("jobs", "mailer", 3) == 3
    ids = [jobs.send("jobs", {"n": i}) for i in range(7)]
    jobs.tick("jobs", force=True)
    slow = jobs.receive("jobs", "mailer", worker="a", max_messages=1)
    assert _ids(slow) == ids[:1]
    b = jobs.receive("jobs", "mailer", worker="b", max_messages=5)
    assert _ids(b) == ids[1:3]  # the room left: 2
    assert not jobs.receive("jobs", "mailer", worker="c", max_messages=5).messages  # full
    assert b.ack()
    # done, but behind the oldest open lease: still in the window
    assert not jobs.receive("jobs", "mailer", worker="c", max_messages=5).messages
    assert slow.ack()  # the window start moves past everything handed out
    c = jobs.receive("jobs", "mailer", worker="c", max_messages=5)
    assert _ids(c) == ids[3:6]
    # the start moves to the next open lease, not further
    d = jobs.receive("jobs", "mailer", worker="d", max_messages=5)
    assert not d.messages
    assert c.ack()
    assert _ids(jobs.receive("jobs", "mailer", worker="d", max_messages=5)) == ids[6:]


def test_a_full_window_still_hands_a_dead_workers_lease_over(jobs: pglogq.Client, dsn: str) -> None:
    jobs.set_share_window("jobs", "mailer", 2)
    ids = [jobs.send("jobs", {"n": i}) for i in range(4)]
    jobs.tick("jobs", force=True)
    dead = jobs.receive("jobs", "mailer", worker="dead", max_messages=2)
    assert _ids(dead) == ids[:2]
    assert not jobs.receive("jobs", "mailer", worker="live").messages  # full
    _silence(dsn, "dead")
    taken = jobs.receive("jobs", "mailer", worker="live", max_messages=5)
    assert _ids(taken) == ids[:2]
    assert taken.ack()
    assert _ids(jobs.receive("jobs", "mailer", worker="live", max_messages=5)) == ids[2:]


def test_the_window_counts_urgent_leases_and_none_means_no_limit(lane: pglogq.Client) -> None:
    lane.set_share_window("mail", "mailer", 2)
    ids = [lane.send("mail", {"n": i}) for i in range(2)]
    vip = lane.send("mail", {"vip": True}, priority=200)
    lane.tick("mail", force=True)
    a = lane.receive("mail", "mailer", worker="a", max_messages=1)
    b = lane.receive("mail", "mailer", worker="b", max_messages=1)
    assert _ids(a) == [vip] and _ids(b) == ids[:1]
    assert not lane.receive("mail", "mailer", worker="c").messages
    assert lane.set_share_window("mail", "mailer", None) is None
    assert _ids(lane.receive("mail", "mailer", worker="c")) == ids[1:]


@pytest.mark.parametrize("size", [0, -1, 100_000_001, True, 2.5, "3"])
def test_a_bad_window_is_refused_and_changes_nothing(jobs: pglogq.Client, dsn: str, size: Any) -> None:
    jobs.set_share_window("jobs", "mailer", 5)
    with pytest.raises(InvalidArgument):
        jobs.set_share_window("jobs", "mailer", size)
    if isinstance(size, int) and not isinstance(size, bool):
        with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT pglogq.set_share_window('jobs', 'mailer', %s)", (size,))
        assert err.value.sqlstate == "PQ019"
    with psycopg.connect(dsn, autocommit=True) as conn:
        got = conn.execute("SELECT share_window FROM pglogq.subscription WHERE consumer_name = 'mailer'"
                           " AND parent_id IS NULL").fetchone()
    assert got == (5,)


def test_only_a_share_consumer_has_a_window(jobs: pglogq.Client) -> None:
    jobs.subscribe("jobs", "audit")
    with pytest.raises(NotAShareConsumer):
        jobs.set_share_window("jobs", "audit", 10)
    with pytest.raises(pglogq.UnknownConsumer):
        jobs.set_share_window("jobs", "nobody", 10)
    with pytest.raises(pglogq.UnknownQueue):
        jobs.set_share_window("nowhere", "mailer", 10)


# -- shards ----------------------------------------------------------------------------------------


ONE_SHARD = {"version": 1, "shards": [{"name": "a", "dsn": "dbname=a"}],
             "ranges": [{"lo": 0, "hi": 16383, "shard": "a"}]}


def test_share_consumers_run_on_sharded_queues(jobs: pglogq.Client, dsn: str) -> None:
    # a database with a share consumer joins a cluster, and a sharded queue takes new ones: each
    # shard's share consumer leases that shard's events (the cluster's runtime runs its slots)
    jobs.send("jobs", {"n": 1}, key="k1")
    jobs.tick("jobs", force=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pglogq.cluster_join('c1', 'a', %s)", (Jsonb(ONE_SHARD),)).fetchone() == (True,)
        assert conn.execute("SELECT sharded FROM pglogq.queue WHERE queue_name = 'jobs'").fetchone() == (True,)
    assert jobs.subscribe("jobs", "mailer2", share=True)
    assert not jobs.subscribe("jobs", "mailer2", share=True)  # once
    with pytest.raises(pglogq.AlreadyExists):
        jobs.subscribe("jobs", "mailer2")  # a consumer keeps its mode, sharded or not
    jobs.send("jobs", {"n": 2}, key="k2")
    jobs.tick("jobs", force=True)
    got = [m.payload["n"] for m in jobs.receive("jobs", "mailer", worker="w1", max_messages=10)]
    assert got == [1, 2]
    got = [m.payload["n"] for m in jobs.receive("jobs", "mailer2", worker="w1", max_messages=10)]
    assert got == [2]  # subscribed after the first
    assert jobs.subscribe("jobs", "plain")  # ordinary consumers, as ever
