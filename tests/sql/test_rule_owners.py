"""The read rules of the engine that are written more than once: each copy returns what its owner
returns, over a range of states.

Some rules have one owner function but an inline copy where a call would cost the hot path
(every SQL function pins its search_path, and a call per row or per page costs microseconds);
others are one rule kept by several writers, each at its own moment.  A copy that drifts from
its owner is how data was lost before, so each is pinned here against the owner:

- the page of a batch: ``_batch_page`` owns it; ``receive`` reads the transaction-order case
  itself (one copy of each row fewer), bounded by a share consumer's lease end;
- "is this event in the page a holder was returned" (``_page_position`` on ``_batch_page``'s
  rows): copied as a look-up by ``report_progress``, ``nack``, ``_running`` and, as a scan of
  every open batch, ``_open_batch_events`` (``jobs``' in-flight and waiting) and ``lookup``;
- the job state of an event: ``lookup`` answers for one event, ``jobs`` lists them by state;
- the consumer's cursor of a partitioned queue: five writers keep it at its slowest partition
  stream's;
- takeover: ``_take_batch`` (a cooperating or share worker's batch) and ``_stream_pick`` (a
  partition's stream) take a holder's batch when it is silent for dead_interval or released;
- the heartbeat touch: every call of a holder says it is alive the way ``heartbeat`` does;
- the page and batch reset: every place that ends a page or a batch clears the columns
  ``_close_batch`` clears.

The states: one ordered log, a big batch, priorities, cancelled events, other consumers'
retries in the log, a producer transaction open across a tick, cooperating workers, share
consumer leases (and a ceded tail, and on lanes), the urgent lane, partitioned streams."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest

import pglogq
from pglogq.errors import CedeRefused, MessageNotInBatch
from tests.support.paths import REPO

Q = "rules"

# the page of every holder of the queue (or of one consumer) by the owners: _batch_page's rows
# of the holder's open batch, at position `want` against its page (_page_position)
_OWNER_EVENTS = """
SELECT h.sub_id, m.msg_id
  FROM pglogq.subscription h
  JOIN pglogq.queue q ON q.queue_id = h.queue_id
  JOIN pglogq.tick p ON p.queue_id = h.queue_id AND p.tick_id = h.batch_prev_tick
  JOIN pglogq.tick t ON t.queue_id = h.queue_id AND t.tick_id = h.batch_cur_tick,
       LATERAL pglogq._batch_page(h.queue_id, coalesce(h.parent_id, h.sub_id), p.tick_snapshot, t.tick_snapshot,
                                  h.batch_big, h.page_prio, h.page_txid, h.page_id, 100001,
                                  coalesce(h.stream, h.lease_stream),
                                  q.urgent_lane AND coalesce(h.stream, h.lease_stream, -2) <= -2,
                                  h.batch_started_at) m
 WHERE q.queue_name = %(q)s AND h.batch_id IS NOT NULL
   AND (%(c)s::integer IS NULL OR h.sub_id = %(c)s OR h.parent_id = %(c)s)
   AND pglogq._page_position(h, m.priority, m.txid, m.msg_id, %(started)s) = %(want)s
"""


def _all_ids(conn: psycopg.Connection) -> list[int]:
    row = conn.execute("SELECT pg_sequence_last_value(q.event_seq) FROM pglogq.queue q WHERE q.queue_name = %s",
                       (Q,)).fetchone()
    assert row is not None
    return list(range(1, int(row[0] or 0) + 1))


def _consumer_id(conn: psycopg.Connection, consumer: str) -> int:
    row = conn.execute("SELECT s.sub_id FROM pglogq.subscription s JOIN pglogq.queue q USING (queue_id)"
                       " WHERE q.queue_name = %s AND s.consumer_name = %s AND s.parent_id IS NULL",
                       (Q, consumer)).fetchone()
    assert row is not None
    return int(row[0])


def _owner(conn: psycopg.Connection, consumer_id: int | None, want: int, started: bool = False) -> set[int]:
    return {r[1] for r in conn.execute(_OWNER_EVENTS, {"q": Q, "c": consumer_id, "want": want,
                                                       "started": started})}


def _holder_id(conn: psycopg.Connection, batch: int) -> int:
    row = conn.execute("SELECT sub_id FROM pglogq.subscription WHERE batch_id = %s", (batch,)).fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class Page:
    batch_id: int | None
    ids: list[int]


def _receive_and_check(conn: psycopg.Connection, consumer: str, size: int, worker: str | None) -> Page:
    """One receive, with every copy of the page rule checked against its owner in the same
    transaction (so that every reader sees the state receive left); then commit."""
    rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive(%s, %s, %s, %s)",
                        (Q, consumer, size, worker)).fetchall()
    if not rows:
        conn.commit()
        return Page(None, [])
    batch = int(rows[0][0])
    got = [int(r[1]) for r in rows]
    # receive's page is _batch_page's from the page's start, bounded by the lease's end
    expected = [int(r[0]) for r in conn.execute(
        """SELECT m.msg_id
             FROM pglogq.subscription h
             JOIN pglogq.queue q ON q.queue_id = h.queue_id
             JOIN pglogq.tick p ON p.queue_id = h.queue_id AND p.tick_id = h.batch_prev_tick
             JOIN pglogq.tick t ON t.queue_id = h.queue_id AND t.tick_id = h.batch_cur_tick,
                  LATERAL pglogq._batch_page(h.queue_id, coalesce(h.parent_id, h.sub_id), p.tick_snapshot,
                                             t.tick_snapshot, h.batch_big, h.page_prio, h.page_txid, h.page_id,
                                             %s + 1, coalesce(h.stream, h.lease_stream),
                                             q.urgent_lane AND coalesce(h.stream, h.lease_stream, -2) <= -2,
                                             h.batch_started_at) WITH ORDINALITY m
            WHERE h.batch_id = %s
              AND (h.lease_end_txid IS NULL OR pglogq._page_position(h, m.priority, m.txid, m.msg_id) < 2)
            ORDER BY m.ordinality""", (size, batch))]
    assert got == expected[:size], f"receive's page {got} is not _batch_page's {expected[:size]}"
    more = conn.execute("SELECT page_more FROM pglogq.subscription WHERE batch_id = %s", (batch,)).fetchone()
    assert more is not None and more[0] == (len(expected) > size)
    cid = _consumer_id(conn, consumer)
    in_page = _owner(conn, cid, 0)
    assert set(got) <= in_page
    # the scan of every open batch (jobs' in-flight and waiting lists)
    for want in (0, 1):
        scanned = {int(r[0]) for r in conn.execute(
            "SELECT ev_id FROM pglogq._open_batch_events((SELECT queue_id FROM pglogq.queue WHERE queue_name = %s),"
            " %s, %s)", (Q, cid, want))}
        assert scanned == _owner(conn, cid, want), f"_open_batch_events want {want}"
    # the look-ups of one event: report_progress and nack accept exactly the holder's page,
    # _running sees exactly the started events of every holder's page (start_first NULL: all).
    # They look at the page's range: an event cancelled inside it is in it for them (the
    # owners' rows with the markers set aside)
    conn.execute("SAVEPOINT uncancelled")
    conn.execute("DELETE FROM pglogq.cancelled")
    page_range = {r[1] for r in conn.execute(_OWNER_EVENTS, {"q": Q, "c": cid, "want": 0, "started": False})
                  if r[0] == _holder_id(conn, batch)}
    running = _owner(conn, None, 0, started=True)
    conn.execute("ROLLBACK TO SAVEPOINT uncancelled")
    lease = conn.execute("SELECT lease_end_txid IS NOT NULL FROM pglogq.subscription WHERE batch_id = %s",
                         (batch,)).fetchone() == (True,)
    assert set(got) <= page_range
    for msg_id in _all_ids(conn):
        for call in ("SELECT pglogq.report_progress(%s, %s)", "SELECT pglogq.nack(%s, %s, interval '0')"):
            conn.execute("SAVEPOINT probe")
            try:
                conn.execute(call, (batch, msg_id))
                accepted = True
            except psycopg.Error as e:
                assert e.sqlstate == MessageNotInBatch.sqlstate, e
                accepted = False
            conn.execute("ROLLBACK TO SAVEPOINT probe")
            assert accepted == (msg_id in page_range), f"{call.split('(')[0]} of {msg_id}: page {got}"
        # mark_started looks only at a page received with start_first (page_marks): as if it was
        conn.execute("SAVEPOINT probe")
        conn.execute("UPDATE pglogq.sub_state SET page_marks = true WHERE sub_id = %s", (_holder_id(conn, batch),))
        try:
            conn.execute("SELECT pglogq.mark_started(%s, %s)", (batch, msg_id))
            accepted = True
        except psycopg.Error as e:
            assert e.sqlstate == MessageNotInBatch.sqlstate, e
            accepted = False
        conn.execute("ROLLBACK TO SAVEPOINT probe")
        assert accepted == (msg_id in page_range), f"mark_started of {msg_id}: page {got}"
        if lease:
            # cede checks its kept event: in the page (refused otherwise for what was started)
            conn.execute("SAVEPOINT probe")
            try:
                conn.execute("SELECT pglogq.cede(%s, e.ev_id, e.ev_txid) FROM pglogq.event e"
                             " WHERE e.ev_id = %s AND e.ev_owner IS NULL", (batch, msg_id))
                accepted = True
            except psycopg.Error as e:
                assert e.sqlstate in (MessageNotInBatch.sqlstate, CedeRefused.sqlstate), e
                accepted = e.sqlstate != MessageNotInBatch.sqlstate
            conn.execute("ROLLBACK TO SAVEPOINT probe")
            assert accepted == (msg_id in page_range), f"cede keeping {msg_id}: page {got}"
        on = conn.execute("SELECT pglogq._running(q.queue_id, %s) FROM pglogq.queue q WHERE q.queue_name = %s",
                          (msg_id, Q)).fetchone()
        assert on is not None and on[0] == (msg_id in running), f"_running of {msg_id}"
    conn.commit()
    return Page(batch, got)


def _states_agree(conn: psycopg.Connection) -> None:
    """lookup's state of every event for every consumer is the state jobs lists it in (and an
    event jobs does not list is one lookup calls done, cancelled, skipped or gone)."""
    listed: dict[tuple[str, int], str] = {}
    after = None
    while True:
        rows = conn.execute("SELECT consumer, state, msg_id, cursor FROM pglogq.jobs(%s, after => %s, max_rows => 7)",
                            (Q, after)).fetchall()
        for consumer, state, msg_id, _ in rows:
            assert (consumer, msg_id) not in listed, f"jobs lists {msg_id} twice for {consumer}"
            listed[(consumer, int(msg_id))] = state
        if len(rows) < 7:
            break
        after = rows[-1][3]
    for msg_id in _all_ids(conn):
        for consumer, state in conn.execute("SELECT consumer, state FROM pglogq.lookup(%s, %s)", (Q, msg_id)):
            if state in ("in-flight", "retry", "dead", "waiting"):
                assert listed.get((consumer, msg_id)) == state, f"{msg_id} for {consumer}: lookup says {state}"
            else:
                assert (consumer, msg_id) not in listed, f"{msg_id} for {consumer}: lookup {state}, jobs lists it"
    conn.commit()


def _cursor_follows_slowest_stream(conn: psycopg.Connection) -> None:
    """Every consumer of a partitioned queue stands at or behind the cursor of its slowest
    partition stream with something to read (marked, or with a batch open), and at most at the
    newest tick it marked the streams for (due_tick): a stream with nothing to read keeps its
    cursor where it last read and is not visited (see _stream_skip)."""
    rows = conn.execute(
        """SELECT c.consumer_name, c.last_tick,
                  least(cs.due_tick, min(s.last_tick) FILTER (
                      WHERE s.batch_id IS NOT NULL OR EXISTS (
                          SELECT 1 FROM pglogq.stream_mark m
                           WHERE m.consumer_id = c.sub_id AND m.stream = s.stream AND m.epoch = cs.mark_epoch)))
             FROM pglogq.subscription c
             JOIN pglogq.sub_state cs ON cs.sub_id = c.sub_id
             JOIN pglogq.queue q ON q.queue_id = c.queue_id
             JOIN pglogq.subscription s ON s.parent_id = c.sub_id AND s.stream >= 0
            WHERE q.queue_name = %s AND c.parent_id IS NULL
            GROUP BY c.consumer_name, c.sub_id, c.last_tick, cs.due_tick, cs.mark_epoch""", (Q,)).fetchall()
    for consumer, cursor, slowest in rows:
        assert slowest is None or cursor <= slowest, \
            f"consumer {consumer} at tick {cursor}, its slowest stream at {slowest}"
    conn.commit()


def _drain_checked(conn: psycopg.Connection, consumer: str, size: int, workers: list[str | None],
                   hold: int = 0) -> list[int]:
    """Receive and acknowledge everything, the workers in turn, each page checked; the first
    `hold` pages are left unacknowledged for a while (another worker's page or lease beside)."""
    seen: list[int] = []
    held: set[int] = set()  # batches whose page is left unacknowledged for now
    idle = 0
    turn = 0
    while idle < len(workers) + 1:
        worker = workers[turn % len(workers)]
        turn += 1
        page = _receive_and_check(conn, consumer, size, worker)
        _states_agree(conn)
        _cursor_follows_slowest_stream(conn)
        if page.batch_id is None:
            idle += 1
            for batch in held:
                conn.execute("SELECT pglogq.ack(%s)", (batch,))
            conn.commit()
            held.clear()
            continue
        idle = 0
        if page.batch_id in held:  # the same page again (not acknowledged yet): now it is
            held.discard(page.batch_id)
        elif len(held) < hold:
            held.add(page.batch_id)
            seen.extend(page.ids)
            continue
        else:
            seen.extend(page.ids)
        conn.execute("SELECT pglogq.ack(%s)", (page.batch_id,))
        conn.commit()
        _states_agree(conn)
    return seen


def _send(client: pglogq.Client, n: int, *, priority: int = 100, key: str | None = None) -> list[int]:
    return [client.send(Q, {"n": i}, priority=priority, key=key if key is None else f"{key}{i % 5}")
            for i in range(n)]


Scenario = Callable[[pglogq.Client, str], None]


def _plain(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    for _ in range(3):
        _send(client, 9)
        client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 4, [None])) == 27


def _big_batch_with_priorities(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.set_queue_config(Q, "big_batch_events", 5)
    client.subscribe(Q, "c")
    _send(client, 6)
    _send(client, 6, priority=150)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 5, [None])) == 12


def _priorities(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    _send(client, 5, priority=50)
    _send(client, 5)
    _send(client, 5, priority=200)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 4, [None, "w1"])) == 15


def _cancelled_and_others_retries(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    client.subscribe(Q, "other")
    ids = _send(client, 12)
    for msg_id in ids[2::3]:
        assert client.cancel(Q, msg_id)
    client.tick(Q, force=True)
    # the other consumer fails two events: their retries come back into the log, its own
    batch = client.receive(Q, "other", max_messages=100)
    for m in batch.messages[:2]:
        batch.nack(m, retry_after=timedelta(0))
    batch.ack()
    _send(client, 4)
    client.maintain()
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 3, [None])) == 12
        assert len(_drain_checked(conn, "other", 3, [None])) > 0


def _open_across_a_tick(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    with psycopg.connect(dsn) as late:
        late.execute("SELECT pglogq.send(%s, '{\"late\": 1}')", (Q,))  # open across the ticks below
        _send(client, 4)
        client.tick(Q, force=True)
        _send(client, 4)
        client.tick(Q, force=True)
        late.commit()
    _send(client, 3)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 3, [None])) == 12


def _cooperating_workers(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    for _ in range(4):
        _send(client, 5)
        client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert sorted(_drain_checked(conn, "c", 2, ["a", "b", "c"], hold=2)) == list(range(1, 21))


def _share_leases(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c", share=True)
    _send(client, 7)
    client.tick(Q, force=True)
    _send(client, 7)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert sorted(_drain_checked(conn, "c", 3, ["a", "b", "c"], hold=2)) == list(range(1, 15))


def _share_ceded_tail(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c", share=True)
    _send(client, 9)
    client.tick(Q, force=True)
    lease = client.receive(Q, "c", worker="a", max_messages=6, start_first=0)
    assert lease.id is not None
    client.mark_started(lease.messages[1], batch_id=lease.id)
    assert client.cede(lease.id, keep=lease.messages[1])
    assert lease.ack()  # its page, as it was returned: up to its cut lease's end
    with psycopg.connect(dsn) as conn:
        _states_agree(conn)
        # b takes the ceded tail over, then the rest; a pages on inside its cut lease
        got = _drain_checked(conn, "c", 2, ["b", "a"])
    assert sorted(got + [m.msg_id for m in lease.messages[:2]]) == list(range(1, 10))


def _share_lanes(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q)
    client.subscribe(Q, "c", share=True, lanes=True)
    _send(client, 11)
    _send(client, 2, priority=50)
    client.tick(Q, force=True)
    _send(client, 9)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert sorted(_drain_checked(conn, "c", 2, ["a", "b", "c"], hold=2)) == list(range(1, 23))


def _share_lanes_urgent(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q, urgent_lane=True)
    client.subscribe(Q, "c", share=True, lanes=True)
    _send(client, 6)
    _send(client, 3, priority=180)
    _send(client, 6)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert sorted(_drain_checked(conn, "c", 2, ["a", "b"], hold=1)) == list(range(1, 16))


def _urgent_lane(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q, urgent_lane=True)
    client.subscribe(Q, "c")
    _send(client, 5)
    _send(client, 3, priority=180)
    _send(client, 5)
    client.tick(Q, force=True)
    _send(client, 4)  # a batch with default priorities only: read in transaction order
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 3, [None, "w"])) == 17


def _urgent_lane_big_batch(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q, urgent_lane=True)
    client.set_queue_config(Q, "big_batch_events", 4)
    client.subscribe(Q, "c")
    _send(client, 4)
    _send(client, 3, priority=120)
    _send(client, 4)
    client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        assert len(_drain_checked(conn, "c", 3, [None])) == 11


def _partitioned(client: pglogq.Client, dsn: str) -> None:
    client.create_queue(Q, partitions=3)
    client.subscribe(Q, "c")
    client.subscribe(Q, "d")
    for _ in range(3):
        _send(client, 8, key="k")
        client.tick(Q, force=True)
    with psycopg.connect(dsn) as conn:
        _cursor_follows_slowest_stream(conn)
        assert sorted(_drain_checked(conn, "c", 2, ["a", "b"], hold=1)) == list(range(1, 25))
        # a jump moves every stream with the consumer
        conn.execute("SELECT * FROM pglogq.seek(%s, 'c', 'earliest', force => true)", (Q,))
        conn.commit()
        _cursor_follows_slowest_stream(conn)
        assert len(_drain_checked(conn, "c", 5, ["a"])) > 0
        _send(client, 4, key="j")
        client.tick(Q, force=True)
        conn.execute("SELECT pglogq.maint_retention(%s)", (Q,))
        conn.commit()
        _cursor_follows_slowest_stream(conn)
        assert len(_drain_checked(conn, "d", 4, [None, "x"])) == 28


SCENARIOS: dict[str, Scenario] = {
    "plain": _plain,
    "big batch with priorities": _big_batch_with_priorities,
    "priorities": _priorities,
    "cancelled and others' retries": _cancelled_and_others_retries,
    "open across a tick": _open_across_a_tick,
    "cooperating workers": _cooperating_workers,
    "share leases": _share_leases,
    "share ceded tail": _share_ceded_tail,
    "share leases on lanes": _share_lanes,
    "share lanes, urgent lane": _share_lanes_urgent,
    "urgent lane": _urgent_lane,
    "urgent lane, big batch": _urgent_lane_big_batch,
    "partitioned": _partitioned,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_copy_of_the_page_rule_returns_its_owners_rows(client: pglogq.Client, dsn: str,
                                                             scenario: str) -> None:
    SCENARIOS[scenario](client, dsn)


# --- the heartbeat touch ----------------------------------------------------------------------

# each call of a holder that says "alive", as SQL run with the holder's batch id (%(b)s), the
# id and txid of its page's first event (%(m)s, %(t)s) and of its last (%(lm)s, %(lt)s)
TOUCHES = {
    "heartbeat": "SELECT pglogq.heartbeat(%(b)s)",
    "report_progress": "SELECT pglogq.report_progress(%(b)s, %(m)s)",
    "mark_started": "SELECT pglogq.mark_started(%(b)s, %(m)s)",
    "mark_started back to none": "SELECT pglogq.mark_started(%(b)s, NULL, back => true)",
    "ack of a page with more to come": "SELECT pglogq.ack(%(b)s)",
    "ack of the last page (_close_batch)": "SELECT pglogq.ack(%(b)s)",
    "cede of a lease's tail": "SELECT pglogq.cede(%(b)s, %(m)s, %(t)s)",
    "receive of the same page again": "SELECT count(*) FROM pglogq.receive('rules', 'c', 2, 'a', 2)",
}


@pytest.mark.parametrize("call", list(TOUCHES))
def test_every_call_of_a_holder_touches_it_as_heartbeat_does(client: pglogq.Client, dsn: str, call: str) -> None:
    """heartbeat owns the touch: heartbeat_at and last_seen now, and a release by maintenance
    withdrawn (the holder is alive: nobody may take its batch over).  Every other call of a
    holder writes the same three columns in its own statement (one UPDATE instead of two on the
    hot path); each is checked here against the owner."""
    client.create_queue(Q)
    client.subscribe(Q, "c", share=call.startswith("cede"))
    _send(client, 6)
    client.tick(Q, force=True)
    size = 6 if "last page" in call else 2
    page = client.receive(Q, "c", worker="a", max_messages=size, start_first=0)
    first, last = page.messages[0], page.messages[-1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        # silent for an hour, and released by maintenance
        conn.execute("UPDATE pglogq.sub_state SET heartbeat_at = now() - interval '1 hour',"
                     " last_seen = now() - interval '1 hour', released_at = now() - interval '1 minute'"
                     " WHERE sub_id = (SELECT sub_id FROM pglogq.subscription WHERE worker_name = 'a')")
        conn.execute(TOUCHES[call], {"b": page.id, "m": first.msg_id, "t": str(first.txid),
                                     "lm": last.msg_id, "lt": str(last.txid)})
        row = conn.execute("SELECT heartbeat_at > now() - interval '1 minute', last_seen > now() - interval '1 minute',"
                           " released_at FROM pglogq.subscription WHERE worker_name = 'a'").fetchone()
    assert row == (True, True, None), f"{call}: (heartbeat_at now, last_seen now, released_at) = {row}"


# --- takeover -------------------------------------------------------------------------------

def _takeover_setup(client: pglogq.Client, kind: str) -> list[int]:
    """Worker a holds a page of 2 of 4 events; nothing else is left to hand out but, for a
    share consumer, the next lease."""
    if kind == "partition stream":
        client.create_queue(Q, partitions=2)
    else:
        client.create_queue(Q)
    client.subscribe(Q, "c", share=kind == "share worker")
    for i in range(4):
        client.send(Q, {"n": i}, key="one key" if kind == "partition stream" else None)
    client.tick(Q, force=True)
    return [m.msg_id for m in client.receive(Q, "c", worker="a", max_messages=2)]


@pytest.mark.parametrize("kind", ["cooperating worker", "share worker", "partition stream"])
@pytest.mark.parametrize("state", ["alive", "silent", "released"])
def test_takeover_follows_one_rule_for_every_kind_of_holder(client: pglogq.Client, dsn: str, kind: str,
                                                           state: str) -> None:
    """A holder's batch is taken over when it is silent for the queue's dead_interval or was
    released by maintenance (maint_release: silent ones only), never while it is alive: the
    same rule in _take_batch (workers, share leases) and _stream_pick (a partition's stream)."""
    held = _takeover_setup(client, kind)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if state == "silent":
            conn.execute("UPDATE pglogq.sub_state SET heartbeat_at = now() - interval '1 hour'"
                         " WHERE sub_id IN (SELECT sub_id FROM pglogq.subscription WHERE page_end_txid IS NOT NULL)")
        released = conn.execute("SELECT pglogq.maint_release(%s)", (Q,)).fetchone()
        assert released == ((1,) if state == "silent" else (0,))
        if state == "released":
            conn.execute("UPDATE pglogq.sub_state SET released_at = now()"
                         " WHERE sub_id IN (SELECT sub_id FROM pglogq.subscription WHERE page_end_txid IS NOT NULL)")
        got = [int(r[0]) for r in conn.execute("SELECT msg_id FROM pglogq.receive(%s, 'c', 2, 'b')", (Q,))]
    taken = state != "alive"
    if taken:
        assert got == held, f"{kind}, {state}: b got {got}, not a's page {held}"
    else:
        assert not set(got) & set(held), f"{kind}, {state}: b got a's events {got}"


# --- the page and batch reset -----------------------------------------------------------------

# columns of a holder's state that outlive its batches (the cursor, liveness, skips, the stream's
# worker); every other column of sub_state belongs to the open batch
_NOT_OF_THE_BATCH = {"sub_id", "state_part", "last_tick", "last_seen", "heartbeat_at", "skipped_events",
                     "skipped_at", "handed_from", "lease_worker", "share_handed", "share_window",
                     # a partitioned consumer's marks (due_tick, mark_epoch) and a stream's hint of
                     # the worker given it (out_of, out_worker, wiped lazily by _stream_pick)
                     "due_tick", "mark_epoch", "out_of", "out_worker"}
# the page handed out: what ends with each page (acknowledged, or taken back after a crash)
_PAGE = {"page_end_prio", "page_end_txid", "page_end_id", "page_more", "started_prio", "started_txid",
         "started_id"}
# written by receive's own UPDATE whatever h holds (a page handed out withdraws a release and a
# stream's hold): the in-memory resets need not clear them
_WRITTEN_BY_RECEIVE = {"released_at", "hold_txid", "hold_id", "hold_until"}


def _source(name: str) -> str:
    text = (REPO / "sql" / "functions" / f"{name}.sql").read_text()
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _set_to_null(sql: str) -> set[str]:
    return set(re.findall(r"\b(\w+)\s*=\s*NULL\b", sql))


def _fields_assigned(sql: str, var: str = "h") -> set[str]:
    return set(re.findall(rf"\b{var}\.(\w+)\s*:=", sql))


def _segment(sql: str, start: str, end: str) -> str:
    i = sql.index(start)
    return sql[i:sql.index(end, i)]


def test_every_reset_clears_what_close_batch_clears(dsn: str) -> None:
    """_close_batch owns the end of a batch: every column of the batch cleared.  The other
    places that end a page or a batch, or start one, in a holder row kept in memory (a
    statement each instead of a call on the hot path), set every one of those columns too; a
    column added to the batch state and forgotten in one of them fails here."""
    with psycopg.connect(dsn) as conn:
        columns = {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'pglogq' AND table_name = 'sub_state'")}
    batch = columns - _NOT_OF_THE_BATCH
    assert batch > _PAGE and "lease_end_id" in batch  # the sets mean what they say
    close = _source("_close_batch")
    assert _set_to_null(close) == batch
    # receive, after a batch found empty: the holder in memory is cleared for the next one
    receive = _source("receive")
    empty = _segment(receive, "EXIT WHEN n > 0;", "END LOOP;")
    final = receive[receive.rindex("UPDATE pglogq.sub_state"):]
    assert _set_to_null(final) >= _WRITTEN_BY_RECEIVE
    assert batch - _WRITTEN_BY_RECEIVE - _fields_assigned(empty) == set(), "receive's reset after an empty batch"
    # _take_batch: a batch taken over, a new batch (the holder had none: no lease end to clear)
    take = _source("_take_batch")
    over = _segment(take, "UPDATE pglogq.attempt a SET sub_id = h.sub_id", "RETURN h;")
    assert batch - _WRITTEN_BY_RECEIVE - _fields_assigned(over) == set(), "_take_batch's takeover"
    new = take[take.rindex("h.batch_id := nextval"):]
    lease_end = {"lease_end_prio", "lease_end_txid", "lease_end_id", "lease_stream", "lease_seq"}
    assert batch - _WRITTEN_BY_RECEIVE - lease_end - _fields_assigned(new) == set(), "_take_batch's new batch"
    # receive's short way to a lease (cut from a lane's batch): the same, with its end to come
    short = _segment(receive, "h.batch_id := nextval('pglogq.batch_seq');", "END IF;")
    assert batch - _WRITTEN_BY_RECEIVE - _fields_assigned(short) == set(), "receive's short way to a lease"
    # ack_receive's short way (_share_step): one update acknowledges the lease and writes the
    # next, so it sets every column of the batch
    step = _source("_share_step")
    write = _segment(step, "UPDATE pglogq.sub_state", "WHERE")
    assert batch - set(re.findall(r"\b(\w+)\s*=", write)) == set(), "_share_step's write"
    # _share_lease: a lease
    lease = _source("_share_lease")
    cut = lease[lease.rindex("h.batch_id := nextval"):]
    assert batch - _WRITTEN_BY_RECEIVE - _fields_assigned(cut) == set(), "_share_lease's lease"
    # the end of a page: a crash takes it back, an ack passes it (with more to come, or held)
    assert _PAGE - _fields_assigned(_source("_crashed_page")) == set(), "_crashed_page"
    ack = _source("ack")
    updates = re.findall(r"UPDATE pglogq\.sub_state.*?;", ack, re.S)
    assert len(updates) == 2
    for update in updates:
        assert _PAGE - _set_to_null(update) == set(), "ack's end of a page"
