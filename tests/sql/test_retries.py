"""nack: delayed redelivery to the nacking consumer only, max_retries, then the dead-letter queue."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq import RetryPolicy
from tests.support.db import TableReads, state
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick, rotate_all
from tests.support.waiting import wait_for

NOW = timedelta(0)


def setup_queue(api: Any, consumers: tuple[str, ...] = ("a", "b")) -> None:
    api.create_queue("q")
    for c in consumers:
        api.subscribe("q", c)


def test_nack_redelivers_to_the_nacking_consumer_only(api: Any) -> None:
    setup_queue(api)
    ids = api.send_batch("q", [{"n": 1}, {"n": 2}, {"n": 3}], type="job", headers={"h": "v"}, priority=7)
    api.tick("q", force=True)
    batch = api.receive("q", "a")
    failed = batch.messages[1]
    assert batch.nack(failed, retry_after=NOW, reason="smtp timeout") == "retry"
    assert batch.ack() is True
    assert [m.msg_id for m in drain(api, "q", "b")] == ids  # b is unaffected
    pump_and_tick(api, "q")
    again = drain(api, "q", "a")
    assert len(again) == 1
    m = again[0]
    assert (m.msg_id, m.payload, m.type, m.headers, m.priority) == (ids[1], {"n": 2}, "job", {"h": "v"}, 7)
    assert m.retry_count == 1
    assert m.created_at == failed.created_at
    assert drain(api, "q", "b") == []  # the retry is not a new event for anybody else
    pump_and_tick(api, "q")
    assert drain(api, "q", "a") == [] and drain(api, "q", "b") == []


def test_retry_waits_for_retry_after(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {"x": 1})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    with psycopg.connect(dsn) as conn:
        t0 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        assert batch.nack(batch.messages[0], retry_after=timedelta(hours=1)) == "retry"
        t1 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        batch.ack()
        due = conn.execute("SELECT due_at FROM pglogq.retry WHERE msg_id = %s", (mid,)).fetchone()[0]  # type: ignore[index]
    assert t0 + timedelta(hours=1) <= due <= t1 + timedelta(hours=1)
    pump_and_tick(client, "q")
    assert drain(client, "q", "a") == []  # not due: still waiting in pglogq.retry


def test_default_retry_delay_is_the_queue_setting(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    with psycopg.connect(dsn) as conn:
        t0 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        batch.nack(batch.messages[0])
        t1 = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        due = conn.execute("SELECT due_at FROM pglogq.retry WHERE msg_id = %s", (mid,)).fetchone()[0]  # type: ignore[index]
    assert t0 + timedelta(seconds=10) <= due <= t1 + timedelta(seconds=10)


def fail_until_dead(api: Any, msg_id: int, reasons: list[str]) -> list[tuple[int, str]]:
    """nack msg_id each time it comes back to consumer a; (retry_count, nack result) per try."""
    out: list[tuple[int, str]] = []
    for reason in reasons:
        pump_and_tick(api, "q")
        batch = api.receive("q", "a")
        msgs = [m for m in batch if m.msg_id == msg_id]
        assert len(msgs) == 1
        out.append((msgs[0].retry_count, batch.nack(msgs[0], retry_after=NOW, reason=reason)))
        batch.ack()
    return out


def test_default_max_retries_is_five_then_dead_letter(api: Any) -> None:
    setup_queue(api)
    mid = api.send("q", {"to": "x@example.org"}, type="mail")
    other = api.send("q", {"fine": True})
    got = fail_until_dead(api, mid, [f"try {i}" for i in range(6)])
    assert got == [(0, "retry"), (1, "retry"), (2, "retry"), (3, "retry"), (4, "retry"), (5, "dead")]
    pump_and_tick(api, "q")
    assert drain(api, "q", "a") == []  # dead: never redelivered
    dead = api.dlq_inspect("q")
    assert len(dead) == 1
    d = dead[0]
    assert (d.queue_name, d.consumer_name, d.msg_id, d.type) == ("q", "a", mid, "mail")
    assert d.payload == {"to": "x@example.org"}
    assert d.retry_count == 5 and d.reason == "try 5"
    assert d.created_at <= d.first_failed_at <= d.failed_at
    # b got each event once, untouched by a's failures
    assert sorted(m.msg_id for m in drain(api, "q", "b")) == [mid, other]


@pytest.mark.parametrize("max_retries", [1, 3])
def test_max_retries_n_means_n_redeliveries(client: pglogq.Client, max_retries: int) -> None:
    setup_queue(client, ("a",))
    assert client.set_queue_config("q", "max_retries", max_retries) == str(max_retries)
    mid = client.send("q", {})
    got = fail_until_dead(client, mid, ["r"] * (max_retries + 1))
    assert [r for _, r in got] == ["retry"] * max_retries + ["dead"]
    assert [c for c, _ in got] == list(range(max_retries + 1))


def test_nack_twice_in_one_page_is_one_retry(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    assert batch.nack(batch.messages[0], retry_after=NOW) == "retry"
    assert batch.nack(batch.messages[0], retry_after=NOW) == "retry"
    batch.ack()
    pump_and_tick(client, "q")
    assert [m.msg_id for m in drain(client, "q", "a")] == [mid]


def test_worker_nack_comes_back_to_the_consumer(client: pglogq.Client) -> None:
    setup_queue(client)
    mid = client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a", worker="w1")
    assert batch.nack(batch.messages[0], retry_after=NOW) == "retry"
    batch.ack()
    pump_and_tick(client, "q")
    got = drain(client, "q", "a", worker="w2")
    assert [(m.msg_id, m.retry_count) for m in got] == [(mid, 1)]
    assert [m.msg_id for m in drain(client, "q", "b")] == [mid]


def test_retry_and_dead_letter_survive_rotation(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.set_queue_config("q", "max_retries", 1)
    slow, dead = client.send_batch("q", [{"k": "slow"}, {"k": "dead"}])
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    by_id = {m.msg_id: m for m in batch}
    assert batch.nack(by_id[slow], retry_after=timedelta(hours=1)) == "retry"
    assert batch.nack(by_id[dead], retry_after=NOW) == "retry"
    batch.ack()
    # the retried copy of "dead" is pumped now; the original table is then truncated
    pump_and_tick(client, "q")
    batch = client.receive("q", "a")
    assert [(m.msg_id, m.retry_count) for m in batch] == [(dead, 1)]
    assert batch.nack(batch.messages[0], reason="bad record") == "dead"
    batch.ack()
    delivered = rotate_all(client, dsn, "q", ["a", "b"])
    assert sorted(m.msg_id for m in delivered) == [slow, dead]  # b's first and only delivery
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.retry SET due_at = now() WHERE msg_id = %s", (slow,))
        conn.commit()
        assert conn.execute("SELECT count(*) FROM pglogq.event").fetchone()[0] == 0  # type: ignore[index]
    pump_and_tick(client, "q")
    assert [(m.msg_id, m.payload, m.retry_count) for m in drain(client, "q", "a")] == [(slow, {"k": "slow"}, 1)]
    assert drain(client, "q", "b") == []
    assert [d.msg_id for d in client.dlq_inspect("q")] == [dead]
    assert client.dlq_replay(client.dlq_inspect("q")[0].dead_id) == dead
    client.tick("q", force=True)
    assert [(m.msg_id, m.payload) for m in drain(client, "q", "a")] == [(dead, {"k": "dead"})]
    assert drain(client, "q", "b") == []


def test_redelivery_arrives_with_the_pump_loop(client: pglogq.Client) -> None:
    """retry_after = 1 s with a running maintenance loop: the event comes back, after its due time."""
    setup_queue(client, ("a",))
    mid = client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    batch.nack(batch.messages[0], retry_after=timedelta(seconds=1))
    batch.ack()

    def back() -> list[pglogq.Message]:
        pump_and_tick(client, "q")
        return drain(client, "q", "a")

    assert [m.msg_id for m in wait_for(back)] == [mid]


# -- refused input: its own SQLSTATE, nothing changed ---------------------------------------


@pytest.fixture
def open_page(client: pglogq.Client, dsn: str) -> tuple[pglogq.Client, Any, list[int]]:
    setup_queue(client)
    ids = client.send_batch("q", [{"n": i} for i in range(4)])
    client.tick("q", force=True)
    page = client.receive("q", "a", max_messages=2)
    assert [m.msg_id for m in page] == ids[:2]
    return client, page, ids


@pytest.mark.parametrize("retry_after", [timedelta(seconds=-1), timedelta(days=400), timedelta(days=-30)])
def test_nack_refuses_bad_retry_after(open_page: Any, dsn: str, retry_after: timedelta) -> None:
    _client, page, _ = open_page
    before = state(dsn)
    with pytest.raises(pglogq.InvalidDelay) as e:
        page.nack(page.messages[0], retry_after=retry_after)
    assert e.value.sqlstate == "PQ011"
    assert state(dsn) == before


def test_nack_of_a_message_outside_the_page(open_page: Any, dsn: str) -> None:
    client, page, ids = open_page
    before = state(dsn)
    beyond = pglogq.Message(page.id, ids[2], None, {}, None, 0, page.messages[0].created_at, 100, page.messages[0].txid)
    unknown = pglogq.Message(page.id, 10**9, None, {}, None, 0, page.messages[0].created_at, 100, page.messages[0].txid)
    for msg in (beyond, unknown):
        with pytest.raises(pglogq.MessageNotInBatch):
            client.nack(msg)
    # without the txid hint too
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT pglogq.nack(%s, %s)", (page.id, ids[3]))
    assert e.value.sqlstate == "PQ010"
    assert state(dsn) == before
    # after the ack of the first page, its messages are no longer nackable
    page.ack()
    page2 = client.receive("q", "a", max_messages=2)
    old = pglogq.Message(page2.id, ids[0], None, {}, None, 0, page.messages[0].created_at, 100, page.messages[0].txid)
    before = state(dsn)
    with pytest.raises(pglogq.MessageNotInBatch):
        client.nack(old)
    assert state(dsn) == before


def test_nack_with_a_stale_unknown_or_foreign_batch(open_page: Any, dsn: str) -> None:
    client, page, ids = open_page
    msg = page.messages[0]
    # an id issued once but nobody's batch now: b's batch, acknowledged
    b_page = client.receive("q", "b", max_messages=100)
    assert b_page.ack() is True
    before = state(dsn)
    with pytest.raises(pglogq.UnknownBatch):
        client.nack(pglogq.Message(12345, msg.msg_id, None, {}, None, 0, msg.created_at, 100, msg.txid))
    with pytest.raises(pglogq.UnknownBatch):
        client.nack(pglogq.Message(2**63 - 1, msg.msg_id, None, {}, None, 0, msg.created_at, 100, msg.txid))
    with pytest.raises(pglogq.StaleBatch):
        client.nack(pglogq.Message(b_page.id, msg.msg_id, None, {}, None, 0, msg.created_at, 100, msg.txid))  # type: ignore[arg-type]
    assert state(dsn) == before
    page.ack()
    rest = client.receive("q", "a", max_messages=10)
    assert rest.id == page.id and [m.msg_id for m in rest] == ids[2:]
    rest.ack()  # the batch is done: its id is nobody's current batch any more
    before = state(dsn)
    with pytest.raises(pglogq.StaleBatch):
        page.nack(msg)
    assert state(dsn) == before


def test_nack_after_takeover_is_stale(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    client.send("q", {})
    client.tick("q", force=True)
    mine = client.receive("q", "a", worker="w1")
    with psycopg.connect(dsn) as conn:  # w1 falls silent for longer than dead_interval
        conn.execute("UPDATE pglogq.subscription SET heartbeat_at = now() - interval '1 hour' WHERE worker_name = 'w1'")
        conn.commit()
    theirs = client.receive("q", "a", worker="w2")
    assert [m.msg_id for m in theirs] == [m.msg_id for m in mine]
    before = state(dsn)
    with pytest.raises(pglogq.StaleBatch):
        mine.nack(mine.messages[0])
    assert state(dsn) == before
    assert theirs.nack(theirs.messages[0], retry_after=NOW) == "retry"


@pytest.mark.parametrize("value", ["-1", None, "many", "2147483648"])
def test_max_retries_must_not_be_negative(client: pglogq.Client, dsn: str, value: str | None) -> None:
    client.create_queue("q")
    before = state(dsn)
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT pglogq.set_queue_config('q', 'max_retries', %s)", (value,))
    assert e.value.sqlstate == "PQ005"
    if value is not None:
        with pytest.raises(pglogq.InvalidConfig):
            client.set_queue_config("q", "max_retries", value)
    assert state(dsn) == before


# -- RetryPolicy ------------------------------------------------------------------------------


def test_fixed_policy() -> None:
    p = RetryPolicy.fixed(timedelta(seconds=3))
    assert [p.delay(n) for n in (0, 1, 50, 10**6)] == [timedelta(seconds=3)] * 4


def test_exponential_policy_without_jitter() -> None:
    p = RetryPolicy.exponential(timedelta(milliseconds=500), factor=3.0, cap=timedelta(seconds=10), jitter=False)
    assert [p.delay(n).total_seconds() for n in range(5)] == [0.5, 1.5, 4.5, 10.0, 10.0]
    assert p.delay(10**9) == timedelta(seconds=10)  # no overflow for absurd counts


def test_exponential_policy_jitter_stays_in_half_to_full() -> None:
    p = RetryPolicy.exponential(timedelta(seconds=1), cap=timedelta(seconds=30))
    assert p.jitter
    for n in range(8):
        full = min(2.0**n, 30.0)
        seen = {p.delay(n).total_seconds() for _ in range(50)}
        assert all(full / 2 <= s <= full for s in seen)
        assert len(seen) > 1  # it is random


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy.fixed(timedelta(seconds=-1)),
        lambda: RetryPolicy.exponential(timedelta(seconds=1), factor=0.5),
        lambda: RetryPolicy.exponential(timedelta(seconds=1), factor=float("nan")),
        lambda: RetryPolicy.exponential(timedelta(seconds=10), cap=timedelta(seconds=1)),
        lambda: RetryPolicy.exponential(timedelta(seconds=1), cap=timedelta(days=400)),
        lambda: RetryPolicy.fixed(timedelta(seconds=1)).delay(-1),
    ],
)
def test_policy_refuses_bad_values(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


def test_policy_delay_is_accepted_by_nack(client: pglogq.Client) -> None:
    setup_queue(client, ("a",))
    client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    policy = RetryPolicy.exponential(timedelta(seconds=1), cap=timedelta(days=365), jitter=False)
    assert batch.nack(batch.messages[0], retry_after=policy.delay(10**6)) == "retry"


def test_concurrent_pumps_move_each_retry_once(client: Any, dsn: str) -> None:
    """Checklist 3: racing retry pumps re-enqueue every nacked event exactly once."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(300)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=1000)
    for m in page:
        assert client.nack(m, retry_after=timedelta(0)) == "retry"
    page.ack()
    barrier = threading.Barrier(4)
    moved: list[int] = []

    def pump() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            barrier.wait()
            row = conn.execute("SELECT pglogq.maint_pump()").fetchone()
            moved.append(row[0] if row else -1)

    threads = [threading.Thread(target=pump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(moved) == len(ids)
    client.tick("q", force=True)
    again = client.receive("q", "c", max_messages=1000)
    assert sorted(m.msg_id for m in again) == ids
    assert {m.retry_count for m in again} == {1}


# -- the retry and delayed tables: the per-pass cost is what is due ----------------------------


def waiting_rows(dsn: str, queue: str, consumer: str, rows: int, due: str, first: int = 1) -> None:
    """``rows`` retries of ``consumer`` and ``rows`` delayed sends of ``queue``, due at ``due``
    (an SQL expression of g, first..first + rows - 1), written directly (a nack each would only make the test
    slow); the statistics are then fresh."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time, ev_payload, ev_priority)"
            f" SELECT s.queue_id, s.sub_id, 1000000 + g, {due}, 1, now(), jsonb_build_object('n', g), 100"
            "  FROM pglogq.subscription s JOIN pglogq.queue q ON q.queue_id = s.queue_id,"
            "       generate_series(%s::integer, %s::integer) g"
            " WHERE q.queue_name = %s AND s.consumer_name = %s AND s.parent_id IS NULL",
            (first, first + rows - 1, queue, consumer),
        )
        conn.execute(
            "INSERT INTO pglogq.delayed (queue_id, msg_id, deliver_at, ev_payload, ev_priority)"
            f" SELECT q.queue_id, 2000000 + g, {due}, jsonb_build_object('n', g), 100"
            "  FROM pglogq.queue q, generate_series(%s::integer, %s::integer) g WHERE q.queue_name = %s",
            (first, first + rows - 1, queue),
        )
        conn.execute("ANALYZE pglogq.retry")
        conn.execute("ANALYZE pglogq.delayed")


def test_maint_operations_reads_no_waiting_retry(client: Any, dsn: str) -> None:
    """The daemon asks maint_operations every 500 ms whether anything is due: its test of the
    retry and delayed tables was estimated as a third of each table and ran as a seq scan of
    every waiting row (8 to 18 ms at 100,000 retries due tomorrow).  It now reads the earliest
    due time from each index, whatever the statistics."""
    setup_queue(client, ("a",))
    waiting_rows(dsn, "q", "a", 5000, "now() + interval '1 day'")
    with psycopg.connect(dsn) as conn:
        for _ in range(3):
            before_r, before_d = TableReads(conn, "retry"), TableReads(conn, "delayed")
            ops = {op for op, _q in conn.execute("SELECT * FROM pglogq.maint_operations()").fetchall()}
            spent_r, spent_d = TableReads(conn, "retry") - before_r, TableReads(conn, "delayed") - before_d
            assert "pump" not in ops
            assert spent_r.seq_scan == 0 and spent_r.rows_read() <= 1, spent_r
            assert spent_d.seq_scan == 0 and spent_d.rows_read() <= 1, spent_d
    waiting_rows(dsn, "q", "a", 1, "now() - interval '1 s'", first=5001)
    with psycopg.connect(dsn) as conn:
        ops = {op for op, _q in conn.execute("SELECT * FROM pglogq.maint_operations()").fetchall()}
        assert "pump" in ops


def test_pump_moves_at_most_its_cap_per_call_and_loses_nothing(client: Any, dsn: str) -> None:
    """Pumping 100,000 due retries was one statement of 0.6 s (and one batch of 100,000).  A call
    now moves at most 10,000 retries and 10,000 delayed events, the earliest due first; the rest
    waits for the next calls, and every row arrives once."""
    setup_queue(client, ("a",))
    total = 10_050
    # due a millisecond apart, the lowest g first
    waiting_rows(dsn, "q", "a", total, f"now() - interval '1 hour' - ({total} - g) * interval '1 ms'")
    with psycopg.connect(dsn) as conn:
        before_r, before_d = TableReads(conn, "retry"), TableReads(conn, "delayed")
        assert conn.execute("SELECT pglogq.maint_pump()").fetchone() == (20_000,)
        spent_r, spent_d = TableReads(conn, "retry") - before_r, TableReads(conn, "delayed") - before_d
        conn.commit()
        assert spent_r.deleted == 10_000 and spent_d.deleted == 10_000
        # the latest due are left
        assert conn.execute("SELECT min(msg_id) - 1000000, count(*) FROM pglogq.retry").fetchone() == (10_001, 50)
        assert conn.execute("SELECT min(msg_id) - 2000000, count(*) FROM pglogq.delayed").fetchone() == (10_001, 50)
        assert {op for op, _q in conn.execute("SELECT * FROM pglogq.maint_operations()").fetchall()} >= {"pump"}
        assert conn.execute("SELECT pglogq.maint_pump()").fetchone() == (100,)
        assert conn.execute("SELECT pglogq.maint_pump()").fetchone() == (0,)
        conn.commit()
    client.tick("q", force=True)
    got = [m.msg_id for m in drain(client, "q", "a", page=5000)]
    assert sorted(got) == [1_000_000 + g for g in range(1, total + 1)] + [2_000_000 + g for g in range(1, total + 1)]
