"""Partitions inside a queue: keys go to one partition each, every consumer reads each
partition as a stream of its own, and its cooperating workers share the streams one worker per
stream at a time, so the events of one key come in send order and never two at once."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

import psycopg
import pytest

import pglogq

Conn = psycopg.Connection[Any]


def sql_conn(dsn: str) -> Conn:
    return psycopg.connect(dsn, autocommit=True)


def new_queue(conn: Conn, name: str = "q", partitions: int = 1, urgent_lane: bool = False) -> None:
    """create_queue, then its layout while it is new, in one transaction (as the clients do)."""
    with conn.transaction():
        assert conn.execute("SELECT pglogq.create_queue(%s)", (name,)).fetchone() == (True,)
        conn.execute("SELECT pglogq.set_queue_config(%s, 'partitions', %s)", (name, str(partitions)))
        conn.execute("SELECT pglogq.set_queue_config(%s, 'urgent_lane', %s)", (name, str(urgent_lane)))


def make_queue(conn: Conn, name: str = "q", partitions: int = 4) -> None:
    new_queue(conn, name, partitions)
    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (name,))


def send_keyed(conn: Conn, keys: list[str], queue: str = "q") -> list[int]:
    payloads = json.dumps([{"key": k, "n": i} for i, k in enumerate(keys)])
    row = conn.execute("SELECT pglogq.send_batch_keyed(%s, %s::jsonb, %s)", (queue, payloads, keys)).fetchone()
    assert row is not None
    return list(row[0])


def tick(conn: Conn, queue: str = "q") -> None:
    conn.execute("SELECT pglogq.force_tick(%s)", (queue,))


def receive(conn: Conn, worker: str | None, n: int = 100, queue: str = "q") -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT batch_id, msg_id, payload, retry_count, txid FROM pglogq.receive(%s, 'c', %s, %s)",
        (queue, n, worker)).fetchall()


def ack(conn: Conn, page: list[tuple[Any, ...]]) -> None:
    last = page[-1]
    assert conn.execute("SELECT pglogq.ack(%s, %s, %s)", (last[0], last[1], last[4])).fetchone() == (True,)


def keys_of_both_partitions(conn: Conn) -> tuple[str, str]:
    """A key of partition 0 and one of partition 1 of a 2-partition queue, by the server's hash."""
    keys = [f"a{i}" for i in range(40)]
    parts = {k: conn.execute("SELECT pglogq.key_slot(%s) %% 2", (k,)).fetchone() for k in keys}
    return next(k for k in keys if parts[k] == (0,)), next(k for k in keys if parts[k] == (1,))


def partition_of(conn: Conn, msg_id: int) -> int:
    row = conn.execute("SELECT ev_partition FROM pglogq.event WHERE ev_id = %s AND ev_owner IS NULL",
                       (msg_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_the_key_hash_is_md5_based_and_the_same_in_python(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        for key in ("order-42", "tenant:Ünïcode", "x" * 255, "a"):
            expected = int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big") % 16384
            assert conn.execute("SELECT pglogq.key_slot(%s)", (key,)).fetchone() == (expected,)
        assert conn.execute("SELECT pglogq.key_slot(NULL)").fetchone() == (None,)


def test_every_event_of_a_key_goes_to_one_partition_and_unkeyed_ones_spread(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=8)
        keys = [f"k{i % 5}" for i in range(40)]
        ids = send_keyed(conn, keys)
        for key, msg_id in zip(keys, ids, strict=True):
            slot = conn.execute("SELECT pglogq.key_slot(%s)", (key,)).fetchone()
            assert slot is not None and partition_of(conn, msg_id) == slot[0] % 8
        one = conn.execute("SELECT pglogq.send_keyed('q', '{}', 'k1')").fetchone()
        assert one is not None and partition_of(conn, one[0]) == partition_of(conn, ids[1])
        spread = [conn.execute("SELECT pglogq.send('q', '{}')").fetchone() for _ in range(8)]
        assert {partition_of(conn, r[0]) for r in spread if r} == set(range(8))
        info = conn.execute("SELECT partitions FROM pglogq.queue_layout('q')").fetchone()
        assert info == (8,)


@pytest.mark.parametrize("bad", ["0", "-1", "1025", str(2**31), "2.5", "eight", "", None])
def test_an_invalid_partition_count_is_refused_and_changes_nothing(dsn: str, bad: str | None) -> None:
    with sql_conn(dsn) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', %s)", (bad,))
        assert info.value.sqlstate == "PQ075"
        assert conn.execute("SELECT partitions FROM pglogq.queue_layout('q')").fetchone() == (1,)


def drain(conn: Conn, queue: str = "q", worker: str | None = None) -> list[tuple[Any, ...]]:
    """Receive and acknowledge pages until receive returns nothing: every row, in order."""
    got: list[tuple[Any, ...]] = []
    while page := receive(conn, worker, queue=queue):
        got += page
        ack(conn, page)
    return got


def refused_in_flight(conn: Conn, queue: str, why: str) -> None:
    with pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pglogq.set_queue_config(%s, 'partitions', '4')", (queue,))
    assert info.value.sqlstate == "PQ077" and why in str(info.value), str(info.value)
    assert conn.execute("SELECT * FROM pglogq.queue_layout(%s)", (queue,)).fetchone() == (1, False)


def test_the_layout_changes_only_while_nothing_is_in_flight(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        new_queue(conn)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        conn.execute("SELECT pglogq.send('q', '{}')")
        refused_in_flight(conn, "q", "not ticked yet")
        tick(conn)
        refused_in_flight(conn, "q", "has not received every event")
        page = receive(conn, None)
        refused_in_flight(conn, "q", "open batch")
        ack(conn, page)
        assert receive(conn, None) == []
        conn.execute("SELECT pglogq.send('q', '{}', delay => '1 hour')")
        refused_in_flight(conn, "q", "delayed event")
        conn.execute("DELETE FROM pglogq.delayed")  # (as if it had been delivered and handled)
        conn.execute("SELECT pglogq.send('q', '{}')")
        tick(conn)
        page = receive(conn, None)
        conn.execute("SELECT pglogq.nack(%s, %s, retry_after => '1 hour')", (page[0][0], page[0][1]))
        ack(conn, page)
        refused_in_flight(conn, "q", "retry waits")
        # a queue with no consumer: events not ticked are in flight too, ticked ones are not
        new_queue(conn, "r")
        conn.execute("SELECT pglogq.send('r', '{}')")
        refused_in_flight(conn, "r", "not ticked yet")
        tick(conn, "r")
        assert conn.execute("SELECT pglogq.set_queue_config('r', 'partitions', '2')").fetchone() == ("2",)


def test_a_queue_at_rest_changes_its_layout_and_every_key_keeps_its_order(dsn: str) -> None:
    """1 -> 4 partitions -> urgent lane -> 1 again, each time with a consumer that drained the
    queue: its streams follow the layout, and a key's events come in send order across it."""
    with sql_conn(dsn) as conn:
        new_queue(conn)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        keys = [f"k{i % 5}" for i in range(20)]
        before = send_keyed(conn, keys)
        tick(conn)
        assert [r[1] for r in drain(conn)] == before
        assert conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '4')").fetchone() == ("4",)
        assert conn.execute("SELECT * FROM pglogq.queue_layout('q')").fetchone() == (4, False)
        streams = conn.execute("SELECT stream FROM pglogq.subscription WHERE queue_id = "
                               "(SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q') "
                               "AND stream IS NOT NULL ORDER BY stream").fetchall()
        assert [s[0] for s in streams] == [0, 1, 2, 3]
        after = send_keyed(conn, keys)
        tick(conn)
        got = drain(conn, worker="w1")
        assert sorted(r[1] for r in got) == sorted(after)
        by_key: dict[str, list[int]] = defaultdict(list)
        for r in got:
            by_key[r[2]["key"]].append(r[1])
        for k, ids in by_key.items():
            assert ids == [m for m, kk in zip(after, keys, strict=True) if kk == k]
        # every event of a key in one partition of the new layout
        assert {k: {partition_of(conn, m) for m in ids} for k, ids in by_key.items()} == {
            k: {conn.execute("SELECT pglogq.key_slot(%s) %% 4", (k,)).fetchone()[0]} for k in by_key}
        # 4 -> 1 with an urgent lane, then off again: the streams follow, events flow
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '1')")
        conn.execute("SELECT pglogq.set_queue_config('q', 'urgent_lane', 'true')")
        assert conn.execute("SELECT stream FROM pglogq.subscription WHERE consumer_name = 'c' "
                            "AND stream IS NOT NULL").fetchall() == [(-1,)]
        ids = [conn.execute("SELECT pglogq.send('q', '{}', priority => %s)", (p,)).fetchone()[0]
               for p in (100, 150)]
        tick(conn)
        assert [r[1] for r in drain(conn)] == [ids[1], ids[0]]  # the urgent one first
        conn.execute("SELECT pglogq.set_queue_config('q', 'urgent_lane', 'false')")
        assert conn.execute("SELECT count(*) FROM pglogq.subscription WHERE stream IS NOT NULL").fetchone() == (0,)
        last = conn.execute("SELECT pglogq.send('q', '{}')").fetchone()[0]
        tick(conn)
        assert [r[1] for r in drain(conn)] == [last]


def test_a_seek_back_across_a_layout_change_is_refused(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        new_queue(conn)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        send_keyed(conn, ["a", "b"])
        tick(conn)
        old_tick = conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone()[0]
        drain(conn)
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '2')")
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT * FROM pglogq.seek('q', 'c', %s)", (str(old_tick - 1),))
        assert info.value.sqlstate == "PQ017"
        # 'earliest' lands on the change: the events stored in the old layout are not handed again
        conn.execute("SELECT * FROM pglogq.seek('q', 'c', 'earliest')")
        assert drain(conn) == []


def test_a_repeatable_read_producer_older_than_a_layout_change_gets_40001(dsn: str) -> None:
    """Its snapshot shows the old partition count: writing with it would put a key into a
    partition no stream reads (or the wrong one), so the send fails and writes nothing."""
    with sql_conn(dsn) as conn, sql_conn(dsn) as producer:
        new_queue(conn)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        producer.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        producer.execute("SELECT 1")  # takes the snapshot
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '4')")
        with pytest.raises(psycopg.errors.SerializationFailure):
            producer.execute("SELECT pglogq.send_keyed('q', '{}', 'k')")
        producer.execute("ROLLBACK")
        producer.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        producer.execute("SELECT pglogq.send_keyed('q', '{}', 'k')")  # a new snapshot: fine
        producer.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM pglogq.event").fetchone() == (1,)
        # other updates of the queue row (a setting, a rotation) do not fail such a producer
        producer.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        producer.execute("SELECT 1")
        conn.execute("SELECT pglogq.set_queue_config('q', 'max_retries', '3')")
        producer.execute("SELECT pglogq.send_keyed('q', '{}', 'k')")
        producer.execute("COMMIT")


@pytest.mark.parametrize("keys, why", [
    (["a", None], "NULL"), (["a"], "elements"), (["a", ""], "bytes"), (["a", "x" * 256], "bytes"),
])
def test_bad_keys_refuse_the_whole_batch(dsn: str, keys: list[str | None], why: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn)
        for extra in ("", ", idempotency_keys => ARRAY['i1', 'i2']", ", delay => interval '1 hour'"):
            with pytest.raises(psycopg.Error) as info:
                conn.execute(f"SELECT pglogq.send_batch_keyed(%s, %s::jsonb, %s{extra})".encode(),
                             ("q", '[{"n": 1}, {"n": 2}]', keys))
            assert info.value.sqlstate == "PQ076" and why in str(info.value)
        for key in ("", "x" * 256, None):
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT pglogq.send_keyed('q', '{}', %s)", (key,))
            assert info.value.sqlstate == "PQ076"
        assert conn.execute("SELECT count(*) FROM pglogq.event").fetchone() == (0,)


def test_a_page_holds_one_partition_in_send_order_and_never_goes_to_two_workers(dsn: str) -> None:
    """Two workers take turns: each page is the events of one partition, in send order (txid,
    id); while a page is out, the other worker never gets that partition; all events come once."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=4)
        keys = [f"k{i % 7}" for i in range(70)]
        ids = send_keyed(conn, keys)
        send_keyed(conn, keys)  # a second transaction: after the first one in every key
        tick(conn)
        seen: dict[str, list[int]] = defaultdict(list)
        got = 0
        while True:
            p1 = receive(conn, "w1", 10)
            p2 = receive(conn, "w2", 10)
            if not p1 and not p2:
                break
            parts1 = {partition_of(conn, m[1]) for m in p1}
            parts2 = {partition_of(conn, m[1]) for m in p2}
            assert len(parts1) <= 1 and len(parts2) <= 1
            assert not (parts1 & parts2), "one partition handed to two workers at once"
            for page in (p1, p2):
                for m in page:
                    seen[m[2]["key"]].append(m[1])
                got += len(page)
            # the same page again until it is acknowledged
            assert receive(conn, "w1", 10) == p1
            for page in (p1, p2):
                if page:
                    ack(conn, page)
        assert got == 140
        for key, msgs in seen.items():
            assert msgs == sorted(msgs), f"key {key} out of order: {msgs}"
        assert sorted(m for msgs in seen.values() for m in msgs)[:70] == ids


def test_a_nacked_event_holds_its_partition_back_until_it_comes_again(dsn: str) -> None:
    """Strict order: nack then ack acknowledges the page up to the nacked event; nobody gets
    that partition before the delay has passed; then the event comes first, with its retry count,
    followed by the rest of the page; other partitions flow meanwhile."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        conn.execute("SELECT pglogq.set_queue_config('q', 'dead_interval', '1 hour')")
        k0, k1 = keys_of_both_partitions(conn)
        send_keyed(conn, [k0, k0, k0, k1, k1])
        tick(conn)
        page = receive(conn, "w1")
        first_part = partition_of(conn, page[0][1])
        assert len(page) in (2, 3)
        row = conn.execute("SELECT pglogq.nack(%s, %s, interval '0.3 s', 'boom')", (page[0][0], page[1][1])).fetchone()
        assert row == ("retry",)
        ack(conn, page)
        other = receive(conn, "w1")
        assert other and {partition_of(conn, m[1]) for m in other} == {1 - first_part}
        ack(conn, other)
        assert receive(conn, "w2") == []  # the held partition is nobody's until the delay
        conn.execute("SELECT pg_sleep(0.35)")
        again = receive(conn, "w2")
        assert [m[1] for m in again] == [m[1] for m in page[1:]]
        assert again[0][3] == 1 and all(m[3] == 0 for m in again[1:])
        # it ends where the first page ended: the ack that held the stream gave the batch a new
        # id, so a repeat of that ack (its reply lost) is not taken for this page
        assert again[0][0] != page[0][0]
        with pytest.raises(psycopg.Error) as info:
            ack(conn, page)
        assert info.value.sqlstate == "PQ009"
        ack(conn, again)
        assert receive(conn, "w2") == []


def test_the_last_allowed_failure_dead_letters_the_event_and_the_partition_goes_on(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        conn.execute("SELECT pglogq.set_queue_config('q', 'max_retries', '1')")
        send_keyed(conn, ["same", "same"])
        tick(conn)
        page = receive(conn, None, 1)
        for expected in ("retry", "dead"):
            row = conn.execute("SELECT pglogq.nack(%s, %s, interval '0')", (page[0][0], page[0][1])).fetchone()
            assert row == (expected,)
            ack(conn, page)
            page = receive(conn, None, 1)
            if expected == "retry":
                assert page[0][3] == 1 and page[0][2]["n"] == 0
        assert [m[2]["n"] for m in page] == [1]
        assert conn.execute("SELECT count(*) FROM pglogq.dead_letter").fetchone() == (1,)


def test_a_silent_workers_partition_is_taken_over_with_a_new_batch_id(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=1 + 1)
        conn.execute("SELECT pglogq.set_queue_config('q', 'dead_interval', '0.2 s')")
        send_keyed(conn, ["one"])
        tick(conn)
        page = receive(conn, "w1")
        assert receive(conn, "w2") == []
        conn.execute("SELECT pg_sleep(0.25)")
        taken = receive(conn, "w2")
        assert [m[1] for m in taken] == [page[0][1]] and taken[0][0] != page[0][0]
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pglogq.ack(%s, %s, %s)", (page[0][0], page[0][1], page[0][4]))
        assert info.value.sqlstate == "PQ009"
        ack(conn, taken)


def test_the_consumer_cursor_stays_behind_its_slowest_stream(dsn: str) -> None:
    """Rotation, retention and lag read the consumer's cursor: it never passes a stream."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        for round_ in range(3):
            send_keyed(conn, [f"r{round_}-{i}" for i in range(20)])
            tick(conn)
            page = receive(conn, None, 1000)
            ack(conn, page)  # one partition's batch only
            rows = conn.execute(
                "SELECT s.stream, s.last_tick FROM pglogq.subscription s WHERE s.consumer_name = 'c'"
                " ORDER BY s.stream NULLS FIRST").fetchall()
            consumer_tick = rows[0][1]
            assert consumer_tick <= min(r[1] for r in rows[1:])


def test_seek_moves_every_stream(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=3)
        send_keyed(conn, [f"k{i}" for i in range(30)])
        tick(conn)
        while page := receive(conn, None, 1000):
            ack(conn, page)
        conn.execute("SELECT * FROM pglogq.seek('q', 'c', 'earliest')")
        again = 0
        while page := receive(conn, None, 1000):
            again += len(page)
            ack(conn, page)
        assert again == 30


def test_unsubscribe_removes_the_streams(dsn: str, client: pglogq.Client) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=5)
        assert conn.execute("SELECT count(*) FROM pglogq.subscriber WHERE stream IS NOT NULL").fetchone() == (5,)
        conn.execute("SELECT pglogq.unsubscribe('q', 'c')")
        assert conn.execute("SELECT count(*) FROM pglogq.subscriber").fetchone() == (0,)


def states(conn: Conn, msg_id: int) -> str:
    row = conn.execute("SELECT state FROM pglogq.lookup('q', %s)", (msg_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_lookup_and_jobs_follow_the_stream_of_the_events_partition(dsn: str) -> None:
    """One partition read ahead of the other: its events are done or in flight, the other's
    waiting -- each judged by its own stream, not by the consumer's (slowest) cursor."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        k0, k1 = keys_of_both_partitions(conn)
        ids0 = send_keyed(conn, [k0, k0])
        ids1 = send_keyed(conn, [k1, k1])
        tick(conn)
        page = receive(conn, "w1", 1)
        first, other = (ids0, ids1) if page[0][1] == ids0[0] else (ids1, ids0)
        assert page[0][1] == first[0]
        assert [states(conn, m) for m in first] == ["in-flight", "waiting"]
        ack(conn, page)
        assert [states(conn, m) for m in first] == ["done", "waiting"]
        assert [states(conn, m) for m in other] == ["waiting", "waiting"]
        rows = conn.execute("SELECT state, msg_id FROM pglogq.jobs('q') ORDER BY msg_id").fetchall()
        assert sorted(rows, key=lambda r: r[1]) == sorted(
            [("waiting", first[1]), ("waiting", other[0]), ("waiting", other[1])], key=lambda r: r[1])


def test_cancel_refuses_what_a_stream_handed_and_cancels_what_it_did_not(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        k0, k1 = keys_of_both_partitions(conn)
        ids0 = send_keyed(conn, [k0, k0])
        ids1 = send_keyed(conn, [k1, k1])
        tick(conn)
        page = receive(conn, None, 1)
        handed = page[0][1]
        same_part = ids0 if handed in ids0 else ids1
        other_part = ids1 if handed in ids0 else ids0
        assert conn.execute("SELECT pglogq.cancel('q', %s)", (handed,)).fetchone() == (False,)
        assert conn.execute("SELECT pglogq.cancel('q', %s)", (same_part[1],)).fetchone() == (True,)
        assert conn.execute("SELECT pglogq.cancel('q', %s)", (other_part[0],)).fetchone() == (True,)
        ack(conn, page)
        got = []
        while more := receive(conn, None):
            got += [m[1] for m in more]
            ack(conn, more)
        assert got == [other_part[1]]


def test_an_urgent_event_jumps_a_waiting_backlog(dsn: str) -> None:
    """Urgent lane: 300 ordinary events wait in one batch; an urgent one (priority 150) sent and
    ticked after the first page is in the consumer's next page; FIFO within the backlog holds."""
    with sql_conn(dsn) as conn:
        new_queue(conn, urgent_lane=True)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        conn.execute("SELECT pglogq.send_batch('q', %s::jsonb[], priority => 30)",
                     ([json.dumps({"n": i}) for i in range(100)],))
        conn.execute("SELECT pglogq.send_batch('q', %s::jsonb[])", ([json.dumps({"n": 100 + i}) for i in range(200)],))
        tick(conn)
        first = receive(conn, None, 50)
        assert [m[2]["n"] for m in first] == list(range(100, 150))  # priority 100 before 30
        vip = conn.execute("SELECT pglogq.send('q', '{\"vip\": true}', priority => 150)").fetchone()
        assert vip is not None
        tick(conn)
        ack(conn, first)
        nxt = receive(conn, None, 50)
        assert [m[1] for m in nxt] == [vip[0]]
        assert states(conn, vip[0]) == "in-flight"
        ack(conn, nxt)
        assert states(conn, vip[0]) == "done"
        rest = []
        while page := receive(conn, None, 1000):
            rest += [m[2]["n"] for m in page]
            ack(conn, page)
        assert rest == list(range(150, 300)) + list(range(100))


def test_ordinary_events_get_a_page_after_waiting_a_second(dsn: str) -> None:
    """A steady stream of urgent events cannot starve the ordinary ones: once they have waited a
    second for a page, they get the next one."""
    with sql_conn(dsn) as conn:
        new_queue(conn, urgent_lane=True)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        conn.execute("SELECT pglogq.send('q', '{\"ordinary\": 1}')")
        tick(conn)
        # the consumer saw its ordinary events once (last_seen), then only urgent ones come
        got_ordinary = False
        deadline = 30
        for i in range(deadline):
            conn.execute("SELECT pglogq.send('q', %s, priority => 200)", (json.dumps({"u": i}),))
            tick(conn)
            page = receive(conn, None, 1)
            assert page
            if "ordinary" in page[0][2]:
                got_ordinary = True
                break
            ack(conn, page)
            conn.execute("SELECT pg_sleep(0.1)")
        assert got_ordinary


def test_an_urgent_lane_needs_one_partition(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        new_queue(conn, "p", partitions=4)
        new_queue(conn, "u", urgent_lane=True)
        for queue, param, value in (("p", "urgent_lane", "true"), ("u", "partitions", "4"),
                                    ("u", "urgent_lane", "maybe"), ("u", "urgent_lane", None)):
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT pglogq.set_queue_config(%s, %s, %s)", (queue, param, value))
            assert info.value.sqlstate == "PQ077"
        assert conn.execute("SELECT * FROM pglogq.queue_layout('p')").fetchone() == (4, False)
        assert conn.execute("SELECT * FROM pglogq.queue_layout('u')").fetchone() == (1, True)


def test_rotation_waits_for_the_slowest_partition(dsn: str, client: pglogq.Client) -> None:
    """A worker holds one partition's page (unacknowledged) while the other partition is drained
    and the queue rotated again and again: the held partition's events, and everything after
    them, all come; nothing is truncated under a partition that has not passed it."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        k0, k1 = keys_of_both_partitions(conn)
        first = send_keyed(conn, [k0, k1])
        tick(conn)
        held = receive(conn, "slow", 10)  # one partition, held without ack
        held_part = partition_of(conn, held[0][1])
        fast_key = k1 if held_part == 0 else k0
        slow_key = k0 if held_part == 0 else k1
        sent_slow = [m for m in first if partition_of(conn, m) == held_part]
        rotations = 0
        for _ in range(6):
            sent_slow += send_keyed(conn, [slow_key, fast_key])[:1]
            tick(conn)
            while page := receive(conn, "fast", 100):
                assert {partition_of(conn, m[1]) for m in page} == {1 - held_part}
                ack(conn, page)
            rotations += client.rotate("q")
        assert rotations <= 1  # the held partition keeps the tables it needs
        ack(conn, held)
        got = [m[1] for m in held]
        while page := receive(conn, "slow", 100):
            got += [m[1] for m in page]
            ack(conn, page)
        assert got == sent_slow


def test_delayed_and_idempotent_keyed_sends_keep_their_partition(dsn: str) -> None:
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=4)
        a = conn.execute("SELECT pglogq.send_keyed('q', '{}', 'order-1', idempotency_key => 'i1')").fetchone()
        b = conn.execute("SELECT pglogq.send_keyed('q', '{}', 'order-1', idempotency_key => 'i1')").fetchone()
        assert a == b and a is not None
        d = conn.execute("SELECT pglogq.send_keyed('q', '{}', 'order-1', delay => interval '0')").fetchone()
        assert d is not None
        conn.execute("SELECT pglogq.maint_pump()")
        tick(conn)
        assert partition_of(conn, d[0]) == partition_of(conn, a[0])
        row = conn.execute("SELECT ev_key FROM pglogq.event WHERE ev_id = %s", (d[0],)).fetchone()
        assert row == ("order-1",)
        got = []
        while page := receive(conn, None):
            got += [m[1] for m in page]
            ack(conn, page)
        assert got == [a[0], d[0]]


def test_every_consumer_reads_every_partition(dsn: str) -> None:
    """Fan-out: two consumers of a partitioned queue each get every event once, in key order."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=3)
        conn.execute("SELECT pglogq.subscribe('q', 'other')")
        ids = send_keyed(conn, [f"k{i % 4}" for i in range(30)])
        tick(conn)
        for consumer in ("c", "other"):
            got = []
            while rows := conn.execute("SELECT batch_id, msg_id, txid FROM pglogq.receive('q', %s, 7)",
                                       (consumer,)).fetchall():
                got += [r[1] for r in rows]
                conn.execute("SELECT pglogq.ack(%s, %s, %s)", rows[-1])
            assert sorted(got) == ids


def test_a_page_received_again_after_a_nack_is_a_new_delivery(dsn: str) -> None:
    """A receive of the same page between a nack and its ack (the worker crashed and asks again)
    hands the page out again: the nacked event comes with its failure counted, the earlier nack's
    hold is void, and an ack then acknowledges the whole page; a nack in the new delivery counts
    a new failure.  (Found by the docs review and the partition model: the hold used to survive
    the new delivery, which then lost its retry delay, or cut the page short.)"""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        conn.execute("SELECT pglogq.set_queue_config('q', 'dead_interval', '1 hour')")
        conn.execute("SELECT pglogq.set_queue_config('q', 'max_retries', '1')")
        send_keyed(conn, ["only", "only", "only"])
        tick(conn)
        page = receive(conn, "w1")
        conn.execute("SELECT pglogq.nack(%s, %s, interval '1 hour')", (page[0][0], page[2][1]))
        again = receive(conn, "w1", 1)  # a smaller page this time
        assert [(m[1], m[3]) for m in again] == [(page[0][1], 0)]
        ack(conn, again)  # acknowledges just that event
        rest = receive(conn, "w2")
        assert [(m[1], m[3]) for m in rest] == [(page[1][1], 0), (page[2][1], 1)]
        assert conn.execute("SELECT pglogq.nack(%s, %s, interval '0')", (rest[1][0], rest[1][1])).fetchone() \
            == ("dead",)  # its second failure, with max_retries 1
        ack(conn, rest)
        assert receive(conn, "w2") == []


def test_only_the_partitions_with_something_new_are_visited(dsn: str) -> None:
    """After a tick, only the streams of the partitions that got events are marked (the streams
    receive looks at); the others are not touched, and the consumer's cursor
    still reaches the newest tick once everything is read: on the first receive of a consumer
    and on the first receive after a later tick alike."""
    due = "SELECT DISTINCT m.stream FROM pglogq.stream_mark m"
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=64)
        for keys in (["a", "b", "c"], ["d", "e"]):
            ids = send_keyed(conn, keys)
            tick(conn)
            parts = {partition_of(conn, m) for m in ids}
            page = receive(conn, None)
            assert {r[0] for r in conn.execute(due).fetchall()} <= parts
            got = [m[1] for m in page]
            ack(conn, page)
            while more := receive(conn, None):
                got += [m[1] for m in more]
                ack(conn, more)
            assert sorted(got) == ids
            assert conn.execute(due).fetchall() == []
            rows = conn.execute("SELECT last_tick, lag_events FROM pglogq.consumer_info('q', 'c')").fetchall()
            newest = conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone()
            assert newest is not None and rows == [(newest[0], 0)]


def test_the_consumer_cursor_catches_up_after_concurrent_takes(dsn: str) -> None:
    """Found by the keyed chaos run: two workers taking the last batches of two partitions in
    concurrent transactions each saw the other's partition at its old tick, and the consumer's
    cursor stayed a tick behind both for good (lag misreported on an idle queue).  The next
    receive puts it back on the slowest stream."""
    with sql_conn(dsn) as conn, psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        make_queue(conn, partitions=2)
        k0, k1 = keys_of_both_partitions(conn)
        send_keyed(conn, [k0, k1])
        tick(conn)
        take = "SELECT batch_id, msg_id, payload, retry_count, txid FROM pglogq.receive('q', 'c', 10, %s)"
        pa = a.execute(take, ("wa",)).fetchall()
        pb = b.execute(take, ("wb",)).fetchall()
        a.commit()
        b.commit()
        ack(conn, pa)
        ack(conn, pb)
        assert receive(conn, "wa") == []
        rows = conn.execute("SELECT last_tick, lag_events FROM pglogq.consumer_info('q', 'c')").fetchall()
        newest = conn.execute("SELECT max(tick_id) FROM pglogq.tick").fetchone()
        assert newest is not None and rows == [(newest[0], 0)]


def test_progress_of_an_event_of_a_partition_shows_in_lookup_and_in_flight(dsn: str) -> None:
    """report_progress works on a partition's page (its holder is the stream); the event shows
    in flight with its percent and stage, and the progress goes with the ack."""
    with sql_conn(dsn) as conn:
        make_queue(conn, partitions=2)
        ids = send_keyed(conn, ["job-1"])
        tick(conn)
        page = receive(conn, "w1")
        assert conn.execute("SELECT pglogq.report_progress(%s, %s, 40, 'rendering')",
                            (page[0][0], ids[0])).fetchone() == (True,)
        row = conn.execute("SELECT state, percent, stage FROM pglogq.lookup('q', %s)", (ids[0],)).fetchone()
        assert row == ("in-flight", 40, "rendering")
        flying = conn.execute("SELECT msg_id, percent FROM pglogq.in_flight").fetchall()
        assert flying == [(ids[0], 40)]
        ack(conn, page)
        assert conn.execute("SELECT count(*) FROM pglogq.in_flight").fetchone() == (0,)
        assert states(conn, ids[0]) == "done"


def test_a_silent_workers_urgent_page_is_never_taken_over_as_an_ordinary_batch(dsn: str) -> None:
    """Cooperating workers on a queue with an urgent lane: worker x holds a page of the lane and
    falls silent; worker y, whose ordinary events have waited over a second (so it reads them
    first), must not take the lane's batch over as an ordinary batch of its own (its urgent
    events would be read as ordinary ones, that is not at all, and lost): the lane's page comes
    again through the lane."""
    with sql_conn(dsn) as conn:
        new_queue(conn, urgent_lane=True)
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        vip = conn.execute("SELECT pglogq.send('q', '{\"vip\": 1}', priority => 200)").fetchone()
        assert vip is not None
        tick(conn)
        held = receive(conn, "x", 10)
        assert [m[1] for m in held] == [vip[0]]
        assert receive(conn, "y", 10) == []  # y's row: nothing for it yet
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = heartbeat_at - interval '1 hour'"
                     " WHERE lease_worker = 'x' OR worker_name = 'x'")
        conn.execute("UPDATE pglogq.subscription SET last_seen = last_seen - interval '1 hour'"
                     " WHERE worker_name = 'y'")
        plain = conn.execute("SELECT pglogq.send('q', '{\"plain\": 1}')").fetchone()
        assert plain is not None
        tick(conn)
        got = []
        for _ in range(10):
            page = receive(conn, "y", 10)
            if not page:
                break
            got += [m[1] for m in page]
            ack(conn, page)
        assert sorted(got) == sorted([vip[0], plain[0]])
