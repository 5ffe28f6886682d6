"""Share consumers with lanes: workers cut their leases side by side.

A share consumer subscribed with ``lanes=True`` hands its events out on eight lanes (events
spread by id), each with its own frontier, cursor and batch; a worker cuts its lease on the first
lane no other worker is cutting on.  What must hold as without lanes: every event handed out
once, an idle worker never waits behind a slow one, a silent worker's lease alone comes back,
the urgent lane first, lookup/jobs/seek/cancel see the leases; and what lanes add: a second
worker's acquisition does not wait for the first one's transaction."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import psycopg
import pytest

import pglogq
from pglogq.errors import AlreadyExists, LanesRefused
from tests.support.draining import drain
from tests.support.inflight import silence

Q = "jobs"


def _ids(batch: pglogq.Batch) -> list[int]:
    return [m.msg_id for m in batch]


@pytest.fixture
def lanes(client: pglogq.Client) -> pglogq.Client:
    client.create_queue(Q)
    assert client.subscribe(Q, "mailer", share=True, lanes=True)
    return client


def _streams(dsn: str, consumer: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT s.stream FROM pglogq.subscriber s JOIN pglogq.subscriber c"
                            " ON c.sub_id = s.parent_id WHERE c.consumer_name = %s AND s.stream IS NOT NULL"
                            " ORDER BY s.stream DESC", (consumer,)).fetchall()
    return [r[0] for r in rows]


def test_lanes_are_refused_where_they_mean_nothing_and_a_consumer_keeps_them(client: pglogq.Client,
                                                                             dsn: str) -> None:
    client.create_queue(Q)
    client.create_queue("parts", partitions=4)
    with pytest.raises(LanesRefused):
        client.subscribe(Q, "plain", lanes=True)
    with pytest.raises(LanesRefused):
        client.subscribe("parts", "mailer", share=True, lanes=True)
    with pytest.raises(pglogq.errors.InvalidArgument):
        client.subscribe(Q, "mailer", share=True, lanes=1)  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.subscriber").fetchone() == (0,)
    assert client.subscribe(Q, "mailer", share=True, lanes=True)
    assert not client.subscribe(Q, "mailer", share=True, lanes=True)
    with pytest.raises(AlreadyExists):
        client.subscribe(Q, "mailer", share=True)
    assert _streams(dsn, "mailer") == list(range(-2, -10, -1))
    # a layout change gives the consumer its lanes again (none while partitioned)
    client.set_queue_config(Q, "urgent_lane", True)
    assert _streams(dsn, "mailer") == [-1, *range(-2, -10, -1)]


def test_every_event_once_across_workers_and_in_send_order_within_a_lane(lanes: pglogq.Client) -> None:
    lanes.subscribe(Q, "audit")
    ids = [lanes.send(Q, {"n": i}) for i in range(60)]
    lanes.tick(Q, force=True)
    got: list[int] = []
    for round_ in range(40):
        for worker in ("a", "b", "c"):
            batch = lanes.receive(Q, "mailer", worker=worker, max_messages=1 + round_ % 3)
            got.extend(_ids(batch))
            assert batch.ack() or not batch.messages
    assert sorted(got) == ids  # each once
    for lane in range(8):
        mine = [i for i in got if i % 8 == lane]
        assert mine == sorted(mine)
    assert [m.msg_id for m in drain(lanes, Q, "audit")] == ids  # an ordinary consumer beside: all, in order
    # the consumer's cursor follows its slowest lane: nothing left behind it once all is read
    (info,) = lanes.consumer_info(Q, "mailer")
    assert info.lag_events == 0 and info.pending_events == 0


def test_a_second_worker_does_not_wait_for_the_first_ones_transaction(lanes: pglogq.Client, dsn: str) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(16)]
    lanes.tick(Q, force=True)
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        got_first = [r[0] for r in first.execute(
            "SELECT msg_id FROM pglogq.receive('jobs', 'mailer', 2, 'a')").fetchall()]
        # the first transaction is still open: without lanes the second would wait for it
        second.execute("SET lock_timeout = '30s'")
        got_second = [r[0] for r in second.execute(
            "SELECT msg_id FROM pglogq.receive('jobs', 'mailer', 2, 'b')").fetchall()]
        second.commit()
        first.commit()
    assert len(got_first) == 2 and len(got_second) == 2 and not set(got_first) & set(got_second)
    assert set(got_first) | set(got_second) <= set(ids)


def test_racing_workers_get_every_event_exactly_once(lanes: pglogq.Client, dsn: str) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(400)]
    lanes.tick(Q, force=True)
    seen: list[int] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        with pglogq.Client(dsn) as c:
            idle = 0
            while idle < 3:
                batch = c.receive(Q, "mailer", worker=name, max_messages=3)
                if not batch.messages:
                    idle += 1
                    continue
                idle = 0
                with lock:
                    seen.extend(_ids(batch))
                assert batch.ack()

    with ThreadPoolExecutor(6) as pool:
        for f in [pool.submit(work, f"w{i}") for i in range(6)]:
            f.result(timeout=300)
    assert sorted(seen) == ids


def test_an_idle_worker_takes_the_rest_while_one_holds_a_slow_event(lanes: pglogq.Client) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(20)]
    lanes.tick(Q, force=True)
    slow = lanes.receive(Q, "mailer", worker="a", max_messages=1)
    assert len(slow.messages) == 1
    rest = drain(lanes, Q, "mailer", worker="b", page=3)
    assert sorted([*_ids(slow), *(m.msg_id for m in rest)]) == ids
    assert slow.ack()
    assert not lanes.receive(Q, "mailer", worker="c").messages


def test_a_silent_workers_lease_alone_comes_back(lanes: pglogq.Client, dsn: str) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(10)]
    lanes.tick(Q, force=True)
    a = lanes.receive(Q, "mailer", worker="a", max_messages=1, start_first=1)
    b = lanes.receive(Q, "mailer", worker="b", max_messages=2)
    assert b.ack()
    silence(dsn, "a")
    c = lanes.receive(Q, "mailer", worker="c", max_messages=5)
    assert _ids(c) == _ids(a)  # a's lease, taken over, counted as an attempt
    assert [m.retry_count for m in c] == [1]
    assert c.ack()
    rest = drain(lanes, Q, "mailer", worker="c")
    assert sorted([*_ids(a), *_ids(b), *(m.msg_id for m in rest)]) == ids


def test_a_silent_workers_lease_is_taken_over_before_a_lane_is_cut(lanes: pglogq.Client, dsn: str) -> None:
    """Lanes with events left to hand out (five events a lane) do not hide a silent worker's
    lease: the next receive takes it over rather than cutting a new lease from a lane."""
    ids = [lanes.send(Q, {"n": i}) for i in range(40)]
    lanes.tick(Q, force=True)
    a = lanes.receive(Q, "mailer", worker="a", max_messages=1, start_first=1)
    b = lanes.receive(Q, "mailer", worker="b", max_messages=1)
    assert b.ack()
    silence(dsn, "a")
    # b's round starts at the lane it cut from, whose batch is still being handed out
    c = lanes.receive(Q, "mailer", worker="b", max_messages=5)
    assert _ids(c) == _ids(a)
    assert [m.retry_count for m in c] == [1]
    assert c.ack()
    rest = drain(lanes, Q, "mailer", worker="b", page=3)
    assert sorted([*_ids(a), *_ids(b), *(m.msg_id for m in rest)]) == ids


def test_a_lease_cut_from_a_lane_ends_with_its_page(lanes: pglogq.Client, dsn: str) -> None:
    """A lease of one event from a lane with more: the worker's page is the whole lease (its
    ack ends it: nothing of it is read again), and the lane's frontier is its event."""
    for i in range(40):
        lanes.send(Q, {"n": i})
    lanes.tick(Q, force=True)
    # the first lease opens the batch of a lane, the second is cut from that batch
    assert lanes.receive(Q, "mailer", worker="a", max_messages=1).ack()
    first = lanes.receive(Q, "mailer", worker="a", max_messages=1)
    (event,) = _ids(first)
    state = """SELECT st.page_more, st.lease_end_id, st.batch_id
                 FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
                WHERE s.worker_name = 'a'"""
    lane = """SELECT st.page_id, st.batch_id IS NOT NULL
                FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
               WHERE s.stream = -2 - %s %% 8 AND s.parent_id IS NOT NULL"""
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(state).fetchone() == (False, event, first.id)
        assert conn.execute(lane, (event,)).fetchone() == (event, True)
        assert first.ack()
        assert conn.execute(state).fetchone() == (None, None, None)
    second = lanes.receive(Q, "mailer", worker="a", max_messages=1)
    assert len(second.messages) == 1 and _ids(second) != [event]


def test_lookup_and_jobs_see_leases_of_lanes(lanes: pglogq.Client) -> None:
    ids = [lanes.send(Q, {"n": i}, type="mail") for i in range(12)]
    lanes.tick(Q, force=True)
    a = lanes.receive(Q, "mailer", worker="a", max_messages=2)
    held = set(_ids(a))
    states = {i: (r.state, r.worker) for i in ids for r in lanes.lookup(Q, i)}
    assert {i for i, s in states.items() if s == ("in-flight", "a")} == held
    assert {i for i, s in states.items() if s[0] == "waiting"} == set(ids) - held
    assert {j.msg_id for j in lanes.jobs(Q, "mailer", state="in-flight")} == held
    assert {j.msg_id for j in lanes.jobs(Q, "mailer", state="waiting")} == set(ids) - held
    assert a.ack()
    rest = drain(lanes, Q, "mailer", worker="b")
    assert sorted([*held, *(m.msg_id for m in rest)]) == ids
    assert {r.state for i in ids for r in lanes.lookup(Q, i)} == {"done"}
    assert lanes.jobs(Q, "mailer") == []


def test_a_cancelled_event_of_a_lane_is_never_handed_out(lanes: pglogq.Client) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(10)]
    lanes.tick(Q, force=True)
    first = lanes.receive(Q, "mailer", worker="a", max_messages=1)
    victim = next(i for i in ids if i not in _ids(first))
    assert lanes.cancel(Q, victim)
    rest = drain(lanes, Q, "mailer", worker="b")
    assert sorted([*_ids(first), *(m.msg_id for m in rest)]) == [i for i in ids if i != victim]
    assert first.ack()


def test_urgent_events_go_first_and_nacks_come_back(client: pglogq.Client) -> None:
    client.create_queue(Q, urgent_lane=True)
    client.set_queue_config(Q, "retry_delay", "0")
    assert client.subscribe(Q, "mailer", share=True, lanes=True)
    backlog = [client.send(Q, {"n": i}) for i in range(6)]
    urgent = client.send(Q, {"vip": 1}, priority=150)
    client.tick(Q, force=True)
    a = client.receive(Q, "mailer", worker="a", max_messages=1)
    assert _ids(a) == [urgent]
    b = client.receive(Q, "mailer", worker="b", max_messages=1)
    assert b.nack(b.messages[0], retry_after=timedelta(0)) == "retry"
    assert b.ack() and a.ack()
    got: list[int] = []
    for _ in range(5):
        from tests.support.maintenance import pump_and_tick
        pump_and_tick(client, Q)
        got.extend(m.msg_id for m in drain(client, Q, "mailer", worker="c"))
        if sorted(got) == backlog:
            break
    assert sorted(got) == backlog


def test_seek_ends_the_leases_and_replays_every_event(lanes: pglogq.Client) -> None:
    ids = [lanes.send(Q, {"n": i}) for i in range(10)]
    lanes.tick(Q, force=True)
    held = lanes.receive(Q, "mailer", worker="a", max_messages=3)
    assert held.ack()
    lanes.receive(Q, "mailer", worker="b", max_messages=2)
    lanes.seek(Q, "mailer", to="earliest", force=True)
    again = drain(lanes, Q, "mailer", worker="c", page=4)
    assert sorted(m.msg_id for m in again) == ids
    lanes.seek(Q, "mailer", to="latest", force=True)
    assert not lanes.receive(Q, "mailer", worker="c").messages


def test_a_window_bounds_leases_on_lanes_too(lanes: pglogq.Client) -> None:
    [lanes.send(Q, {"n": i}) for i in range(10)]
    lanes.tick(Q, force=True)
    assert lanes.set_share_window(Q, "mailer", 3) == 3
    a = lanes.receive(Q, "mailer", worker="a", max_messages=2)
    b = lanes.receive(Q, "mailer", worker="b", max_messages=2)
    assert len(a.messages) == 2 and len(b.messages) == 1
    assert not lanes.receive(Q, "mailer", worker="c", max_messages=2).messages  # full
    assert a.ack()
    assert lanes.receive(Q, "mailer", worker="c", max_messages=5).messages


@pytest.mark.parametrize("with_lanes", [False, True], ids=["one frontier", "lanes"])
def test_starts_and_progress_of_an_urgent_lease_are_its_own_events(client: pglogq.Client, with_lanes: bool) -> None:
    client.create_queue(Q, urgent_lane=True)
    assert client.subscribe(Q, "mailer", share=True, lanes=with_lanes)
    client.send(Q, {"n": 0})
    urgent = [client.send(Q, {"vip": i}, priority=150) for i in range(2)]
    client.tick(Q, force=True)
    a = client.receive(Q, "mailer", worker="a", max_messages=2, start_first=0)
    assert _ids(a) == urgent
    assert client.mark_started(a.messages[0]) == []
    batch_id = a.messages[1].batch_id
    assert batch_id is not None
    client.report_progress(batch_id, a.messages[1].msg_id, percent=50)
    (row,) = client.lookup(Q, urgent[1])
    assert row.state == "in-flight" and row.worker == "a"
    assert a.ack()
