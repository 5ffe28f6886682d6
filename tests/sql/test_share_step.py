"""ack_receive's short way for a share worker's lease cut from a lane (``_share_step``): the
lease acknowledged and the next one cut in one write of the worker's row.

It must leave exactly what the general way leaves (``ack``, then ``receive``): the same page,
the same holder, lane and consumer state.  Each case runs both ways in one transaction from the
same state (the first rolled back to a savepoint), and checks which way served the first."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.inflight import silence
from tests.support.maintenance import pump_and_tick

Q = "jobs"
EVENTS = 80  # ten a lane

# the state both ways must leave: every holder row of the consumer (worker and lane rows, the
# consumer's own) without what differs by nature (batch ids drawn, times), and the side rows
_STATE = """
SELECT coalesce(s.worker_name, s.stream::text, 'consumer') AS holder,
       to_jsonb(st) - ARRAY['batch_id', 'batch_started_at', 'heartbeat_at', 'last_seen', 'state_part']
       || jsonb_build_object('open', st.batch_id IS NOT NULL)
  FROM pglogq.subscriber s JOIN pglogq.sub_state st ON st.sub_id = s.sub_id
 WHERE s.sub_id = %(c)s OR s.parent_id = %(c)s
 UNION ALL
SELECT 'progress', to_jsonb(count(*)) FROM pglogq.progress p
 WHERE p.sub_id IN (SELECT x.sub_id FROM pglogq.subscriber x WHERE x.parent_id = %(c)s)
 UNION ALL
SELECT 'attempts', to_jsonb(count(*)) FROM pglogq.attempt a
 WHERE a.sub_id IN (SELECT x.sub_id FROM pglogq.subscriber x WHERE x.parent_id = %(c)s)
 ORDER BY 1, 2
"""
_ROWS = "SELECT msg_id, type, payload, retry_count, priority, txid FROM {call}"
_STEP = "pglogq.ack_receive(%(b)s, %(m)s, %(t)s::xid8, %(q)s, 'c', %(size)s, 'a', %(sf)s)"
_ACK = "SELECT pglogq.ack(%(b)s, %(m)s, %(t)s::xid8)"
_RECEIVE = "pglogq.receive(%(q)s, 'c', %(size)s, 'a', %(sf)s)"


@pytest.fixture
def lanes(client: pglogq.Client) -> pglogq.Client:
    client.create_queue(Q)
    assert client.subscribe(Q, "c", share=True, lanes=True)
    client.send_batch(Q, [{"n": i} for i in range(EVENTS)])
    client.tick(Q, force=True)
    return client


def _both_ways(dsn: str, page: pglogq.Batch, size: int, start_first: int | None) -> bool:
    """Run the fused call and the general way from the same state; assert they agree; return
    whether the fused call took the short way.  The general way's result is committed."""
    last = page.messages[-1]
    args: dict[str, Any] = {"b": page.id, "m": last.msg_id, "t": str(last.txid), "q": Q, "size": size,
                            "sf": start_first}
    with psycopg.connect(dsn) as conn:
        conn.execute("SET track_functions = 'all'")
        (c,) = conn.execute("SELECT s.sub_id FROM pglogq.subscriber s JOIN pglogq.queue q USING (queue_id)"
                            " WHERE q.queue_name = %s AND s.consumer_name = 'c' AND s.parent_id IS NULL",
                            (Q,)).fetchone() or (None,)
        conn.execute("SAVEPOINT before")
        fused = conn.execute(_ROWS.format(call=_STEP), args).fetchall()
        fused_state = conn.execute(_STATE, {"c": c}).fetchall()
        calls = dict(conn.execute("SELECT funcname, calls FROM pg_stat_xact_user_functions"
                                  " WHERE funcname IN ('ack', '_share_step') OR funcname LIKE '%%\\_share\\_step'"
                                  ).fetchall())
        conn.execute("ROLLBACK TO SAVEPOINT before")
        conn.execute(_ACK, args)
        general = conn.execute(_ROWS.format(call=_RECEIVE), args).fetchall()
        general_state = conn.execute(_STATE, {"c": c}).fetchall()
        conn.commit()
    assert fused == general
    assert fused_state == general_state
    # the short way serves the call without ack; when it cannot, it hands it to ack and receive
    assert any(name.endswith("_share_step") for name in calls), calls
    return "ack" not in calls


def _warm(client: pglogq.Client, size: int = 1) -> pglogq.Batch:
    """Worker a's second lease: the first opens its lane's batch (the general way), the second
    is cut from it; a's acknowledgment of it is the case under test."""
    assert client.receive(Q, "c", worker="a", max_messages=1).ack()
    return client.receive(Q, "c", worker="a", max_messages=size)


@pytest.mark.parametrize(("lease", "size", "start_first"),
                         [(1, 1, None), (1, 3, None), (3, 1, None), (1, 1, 0), (2, 4, 2), (1, 5, 9),
                          (1, 20, None)])  # 20: the next lease takes the rest of the lane's batch
def test_the_short_way_leaves_what_ack_then_receive_leaves(lanes: pglogq.Client, dsn: str, lease: int,
                                                           size: int, start_first: int | None) -> None:
    page = _warm(lanes, lease)
    assert page.id is not None
    lanes.report_progress(page.id, page.messages[0].msg_id, percent=50)  # ends with the lease
    assert _both_ways(dsn, page, size, start_first)


def test_a_whole_drain_agrees_step_by_step(lanes: pglogq.Client, dsn: str) -> None:
    """Lease after lease until nothing is left: lanes' batches end, new ones are taken (the
    general way), the last call finds nothing; every event handed out once."""
    page = _warm(lanes)
    seen = [m.msg_id for m in page]
    while page.messages:
        _both_ways(dsn, page, 1, None)
        page = lanes.receive(Q, "c", worker="a", max_messages=1)  # the page the general way left
        seen += [m.msg_id for m in page]
    assert len(seen) == len(set(seen)) == EVENTS - 1  # the first lease was acknowledged by _warm


def test_a_cancelled_event_next_in_the_lane_is_passed(lanes: pglogq.Client, dsn: str) -> None:
    page = _warm(lanes)
    (event,) = [m.msg_id for m in page]
    assert lanes.cancel(Q, event + 8)  # the next event of the same lane (ids spread by id % 8)
    assert _both_ways(dsn, page, 1, None)
    nxt = lanes.receive(Q, "c", worker="a", max_messages=1)
    assert [m.msg_id for m in nxt] == [event + 16]


def test_retries_and_other_consumers_events_agree(lanes: pglogq.Client, dsn: str) -> None:
    """A nacked event comes back as this consumer's retry; another consumer's retries are
    passed over: both ways hand out the same events, lease after lease."""
    lanes.subscribe(Q, "other", share=True, lanes=True)
    lanes.send_batch(Q, [{"n": i} for i in range(EVENTS)])
    lanes.tick(Q, force=True)
    mine = lanes.receive(Q, "c", worker="b", max_messages=2)
    assert lanes.nack(mine.messages[0], retry_after=timedelta(0))
    theirs = lanes.receive(Q, "other", worker="b", max_messages=3)
    assert lanes.nack(theirs.messages[1], retry_after=timedelta(0))
    pump_and_tick(lanes, Q)
    page = _warm(lanes)
    seen = [m.msg_id for m in page]
    while page.messages:
        _both_ways(dsn, page, 2, None)
        page = lanes.receive(Q, "c", worker="a", max_messages=2)
        seen += [m.msg_id for m in page]
    assert mine.messages[0].msg_id in seen  # its retry
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("case", ["silent worker", "window", "page of a longer lease"])
def test_the_general_way_serves_what_the_short_way_does_not(lanes: pglogq.Client, dsn: str, case: str) -> None:
    page = _warm(lanes, 3 if case == "page of a longer lease" else 1)
    if case == "silent worker":
        lanes.receive(Q, "c", worker="z", max_messages=1)
        silence(dsn, "z")
    elif case == "window":
        lanes.set_share_window(Q, "c", 1000)
    else:
        # a lease of three acknowledged in pages: its first page has more to come
        page = lanes.receive(Q, "c", worker="a", max_messages=1)
    assert not _both_ways(dsn, page, 1, None)


def test_racing_workers_with_fused_acks_get_every_event_exactly_once(lanes: pglogq.Client, dsn: str) -> None:
    """Six workers, each acknowledging its lease with its next receive (leases of one to three
    events), while a producer sends and ticks more: every event handed out once, none lost."""
    with psycopg.connect(dsn) as conn:
        ids = [int(r[0]) for r in conn.execute("SELECT e.ev_id FROM pglogq.event e JOIN pglogq.queue q"
                                               " ON q.queue_id = e.ev_queue WHERE q.queue_name = %s", (Q,))]
    assert len(ids) == EVENTS
    seen: list[int] = []
    lock = threading.Lock()
    sending = threading.Event()
    sending.set()

    def produce() -> None:
        with pglogq.Client(dsn) as c:
            for _ in range(4):
                got = c.send_batch(Q, [{"n": i} for i in range(50)])
                with lock:
                    ids.extend(got)
                c.tick(Q, force=True)
        sending.clear()

    def work(name: str, size: int) -> None:
        with pglogq.Client(dsn) as c:
            page: pglogq.Batch | None = None
            idle = 0
            while idle < 3 or sending.is_set():
                page = c.receive(Q, "c", worker=name, max_messages=size, ack=page)
                if not page.messages:
                    page = None
                    idle += 1
                    time.sleep(0.01)
                    continue
                idle = 0
                with lock:
                    seen.extend(m.msg_id for m in page)
            assert page is None

    with ThreadPoolExecutor(7) as pool:
        futures = [pool.submit(work, f"w{i}", 1 + i % 3) for i in range(6)] + [pool.submit(produce)]
        for f in futures:
            f.result(timeout=300)
    assert sorted(seen) == sorted(ids)
