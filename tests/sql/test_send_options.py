"""Send options: idempotency keys, delayed delivery, cancel."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.concurrent import Call, wait_blocked
from tests.support.db import event_count, state
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick, rotate_all
from tests.support.waiting import wait_for

SEND_KEY = "SELECT pglogq.send('q', %s::jsonb, idempotency_key => %s)"


def setup_queue(api: Any, consumers: tuple[str, ...] = ("a", "b")) -> None:
    api.create_queue("q")
    for c in consumers:
        api.subscribe("q", c)


def db_now(dsn: str) -> datetime:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]


def payloads(msgs: list[pglogq.Message]) -> list[Any]:
    return [m.payload for m in msgs]


# -- idempotency ------------------------------------------------------------------------------


def test_same_key_same_id_no_second_event(api: Any, dsn: str) -> None:
    setup_queue(api)
    api.create_queue("other")
    first = api.send("q", {"v": 1}, idempotency_key="order-42")
    assert api.send("q", {"v": 2}, idempotency_key="order-42") == first
    assert api.send("q", {"v": 3}) != first
    assert api.send("other", {"v": 1}, idempotency_key="order-42") > 0  # keys are per queue
    ids = api.send_batch("q", [{"v": 4}, {"v": 5}, {"v": 6}], idempotency_keys=["order-42", "x", "x"])
    assert ids[0] == first and ids[1] == ids[2] != first
    api.tick("q", force=True)
    for c in ("a", "b"):
        assert payloads(drain(api, "q", c)) == [{"v": 1}, {"v": 3}, {"v": 5}]
    assert event_count(dsn, "q") == 3


def test_concurrent_sends_with_one_key_make_one_event(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    with psycopg.connect(dsn) as first:
        row = first.execute(SEND_KEY, ('{"who": "first"}', "k")).fetchone()
        assert row is not None
        second = Call(dsn, lambda c: c.execute(SEND_KEY, ('{"who": "second"}', "k")).fetchone())
        second.start()
        wait_blocked(dsn, second.pid)  # waits for the first transaction's key
        first.commit()
    assert second.outcome() == row
    client.tick("q", force=True)
    assert payloads(drain(client, "q", "a")) == [{"who": "first"}]


def test_rolled_back_send_frees_the_key(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    with psycopg.connect(dsn) as conn:
        gone = client.send("q", {"v": "rolled back"}, idempotency_key="k", conn=conn)
        conn.rollback()
    kept = client.send("q", {"v": "kept"}, idempotency_key="k")
    assert kept != gone
    assert client.send("q", {"v": "again"}, idempotency_key="k") == kept
    # and while a first sender is still undecided, a second one waits, then takes the key
    with psycopg.connect(dsn) as first:
        undecided = first.execute(SEND_KEY, ('{"v": "undecided"}', "k2")).fetchone()
        second = Call(dsn, lambda c: c.execute(SEND_KEY, ('{"v": "second"}', "k2")).fetchone())
        second.start()
        wait_blocked(dsn, second.pid)
        first.rollback()
    assert second.outcome() != undecided
    client.tick("q", force=True)
    assert payloads(drain(client, "q", "a")) == [{"v": "kept"}, {"v": "second"}]


def test_key_expires_after_the_window_and_is_pruned(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    old = client.send("q", {"v": 1}, idempotency_key="k")
    client.send("q", {"v": 0}, idempotency_key="fresh")
    with psycopg.connect(dsn) as conn:  # the key was recorded two days ago (window: 1 day)
        conn.execute("UPDATE pglogq.idempotency_key SET created_at = now() - interval '2 days' WHERE idem_key = 'k'")
        conn.commit()
    new = client.send("q", {"v": 2}, idempotency_key="k")
    assert new != old
    assert client.send("q", {"v": 3}, idempotency_key="k") == new
    client.tick("q", force=True)
    assert payloads(drain(client, "q", "a")) == [{"v": 1}, {"v": 0}, {"v": 2}]
    # prune forgets expired keys only
    client.set_queue_config("q", "idempotency_window", "1 hour")
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.idempotency_key SET created_at = now() - interval '2 hours' WHERE idem_key = 'k'")
        conn.commit()
    client.maintain()
    with psycopg.connect(dsn) as conn:
        keys = conn.execute("SELECT idem_key FROM pglogq.idempotency_key ORDER BY 1").fetchall()
    assert keys == [("fresh",)]


def test_idempotency_survives_rotation(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    mid = client.send("q", {"v": 1}, idempotency_key="k")
    delivered = rotate_all(client, dsn, "q", ["a", "b"])
    assert sorted(m.msg_id for m in delivered) == [mid, mid]
    assert event_count(dsn, "q") == 0  # its table was truncated
    assert client.send("q", {"v": 2}, idempotency_key="k") == mid
    client.tick("q", force=True)
    assert drain(client, "q", "a") == [] and event_count(dsn, "q") == 0


# -- delayed delivery -------------------------------------------------------------------------


def test_delayed_event_is_not_seen_before_due_and_seen_after(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    sent_at = db_now(dsn)
    mid = client.send("q", {"v": "later"}, delay=timedelta(seconds=2))
    now_id = client.send("q", {"v": "now"})
    pump_and_tick(client, "q")
    early = {c: drain(client, "q", c) for c in ("a", "b")}
    if db_now(dsn) < sent_at + timedelta(seconds=2):  # the check ran before the due time
        assert {c: [m.msg_id for m in ms] for c, ms in early.items()} == {"a": [now_id], "b": [now_id]}

    def arrived(consumer: str) -> list[pglogq.Message]:
        pump_and_tick(client, "q")
        return drain(client, "q", consumer)

    for c in ("a", "b"):  # every subscriber gets it, once, no earlier than its time
        got = wait_for(lambda c=c: arrived(c))
        assert [m.msg_id for m in got] == [mid]
        assert db_now(dsn) >= sent_at + timedelta(seconds=2)
    pump_and_tick(client, "q")
    assert drain(client, "q", "a") == [] and drain(client, "q", "b") == []


def test_deliver_at_and_send_batch_delay(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    at = db_now(dsn) + timedelta(hours=1)
    one = client.send("q", {"v": 1}, deliver_at=at)
    many = client.send_batch("q", [{"v": 2}, {"v": 3}], delay=timedelta(hours=1))
    past = client.send("q", {"v": "past"}, deliver_at=db_now(dsn) - timedelta(days=1))  # means now
    pump_and_tick(client, "q")
    assert [m.msg_id for m in drain(client, "q", "a")] == [past]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT msg_id, deliver_at FROM pglogq.delayed ORDER BY msg_id").fetchall()
        assert [r[0] for r in rows] == [one, *many] and rows[0][1] == at
        conn.execute("UPDATE pglogq.delayed SET deliver_at = now()")  # an hour passes
        conn.commit()
    pump_and_tick(client, "q")
    assert payloads(drain(client, "q", "a")) == [{"v": 1}, {"v": 2}, {"v": 3}]


def test_delayed_event_survives_rotation(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    mid = client.send("q", {"v": 1}, delay=timedelta(hours=1), idempotency_key="d")
    assert client.send("q", {"v": 1}, delay=timedelta(hours=1), idempotency_key="d") == mid
    assert rotate_all(client, dsn, "q", ["a", "b"]) == []
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.delayed SET deliver_at = now()")
        conn.commit()
    pump_and_tick(client, "q")
    for c in ("a", "b"):
        assert [m.msg_id for m in drain(client, "q", c)] == [mid]
    pump_and_tick(client, "q")
    assert drain(client, "q", "a") == []


# -- cancel -----------------------------------------------------------------------------------


def test_cancel_delayed_event(api: Any, dsn: str) -> None:
    setup_queue(api)
    mid = api.send("q", {"v": 1}, delay=timedelta(hours=1))
    keep = api.send("q", {"v": 2}, delay=timedelta(hours=1))
    assert api.cancel("q", mid) is True
    assert api.cancel("q", mid) is False  # already cancelled
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT msg_id FROM pglogq.delayed").fetchall() == [(keep,)]
        conn.execute("UPDATE pglogq.delayed SET deliver_at = now()")
        conn.commit()
    pump_and_tick(api, "q")
    assert [m.msg_id for m in drain(api, "q", "a")] == [keep]
    assert api.cancel("q", keep) is False  # delivered


def test_cancel_before_delivery(api: Any, dsn: str) -> None:
    setup_queue(api)
    e1, e2, e3, e4 = api.send_batch("q", [{"n": i} for i in range(4)])
    assert api.cancel("q", e1) is True  # not even ticked
    api.tick("q", force=True)
    assert api.cancel("q", e2) is True  # ticked, no consumer has received it
    page = api.receive("q", "a", max_messages=1)
    assert [m.msg_id for m in page] == [e3]
    assert api.cancel("q", e3) is False  # handed to a (not acknowledged yet)
    assert api.cancel("q", e4) is True  # in a's open batch, but after the page it was given
    page.ack()
    assert [m.msg_id for m in drain(api, "q", "a")] == []
    assert [m.msg_id for m in drain(api, "q", "b")] == [e3]
    assert api.cancel("q", e3) is False
    assert api.cancel("q", e1) is False  # already cancelled


def test_cancel_after_delivery_to_one_consumer(client: pglogq.Client) -> None:
    setup_queue(client)
    mid = client.send("q", {})
    client.tick("q", force=True)
    assert [m.msg_id for m in drain(client, "q", "a")] == [mid]
    assert client.cancel("q", mid) is False
    assert [m.msg_id for m in drain(client, "q", "b")] == [mid]  # b still gets it


def test_cancel_of_a_retried_message_is_false(client: pglogq.Client) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {})
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    batch.nack(batch.messages[0], retry_after=timedelta(hours=1))
    batch.ack()
    assert client.cancel("q", mid) is False


def test_cancel_with_workers_open_batch(client: pglogq.Client) -> None:
    setup_queue(client, ("a",))
    e1, e2 = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    page = client.receive("q", "a", worker="w1", max_messages=1)
    assert [m.msg_id for m in page] == [e1]
    assert client.cancel("q", e1) is False
    assert client.cancel("q", e2) is True
    page.ack()
    assert client.receive("q", "a", worker="w1").messages == []


def test_cancel_after_the_pump_moved_a_delayed_event(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {}, delay=timedelta(hours=1))
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE pglogq.delayed SET deliver_at = now()")
        conn.commit()
    client.maintain()  # now in the log, not ticked
    assert client.cancel("q", mid) is True
    client.tick("q", force=True)
    assert drain(client, "q", "a") == []


def test_cancel_waits_for_a_running_receive(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client, ("a",))
    mid = client.send("q", {})
    client.tick("q", force=True)
    with psycopg.connect(dsn) as conn:
        assert [m.msg_id for m in client.receive("q", "a", conn=conn)] == [mid]
        cancel = Call(dsn, lambda c: c.execute("SELECT pglogq.cancel('q', %s)", (mid,)).fetchone())
        cancel.start()
        wait_blocked(dsn, cancel.pid)
        conn.commit()
    assert cancel.outcome() == (False,)


# test_receive_waits_for_a_running_cancel was replaced by the tests of cancel blocking no consumer in
# tests/sql/test_cancel.py: receive no longer waits for a cancelling transaction.


def test_cancel_survives_rotation_and_is_pruned(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    mid, other = client.send_batch("q", [{"n": 1}, {"n": 2}])
    assert client.cancel("q", mid) is True
    delivered = rotate_all(client, dsn, "q", ["a", "b"])
    assert [m.msg_id for m in delivered] == [other, other]
    client.tick("q", force=True)
    drain(client, "q", "a")
    drain(client, "q", "b")
    client.maintain()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.cancelled").fetchone() == (0,)
    assert client.cancel("q", mid) is False  # rotated away


# -- refused input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "code"),
    [
        (lambda c: c.send("q", {}, delay=timedelta(seconds=-1)), pglogq.InvalidDelay, "PQ011"),
        (lambda c: c.send("q", {}, delay=timedelta(days=365 * 20)), pglogq.InvalidDelay, "PQ011"),
        (lambda c: c.send("q", {}, deliver_at=datetime(2999, 1, 1, tzinfo=timezone.utc)), pglogq.InvalidDelay, "PQ011"),
        (
            lambda c: c.send("q", {}, delay=timedelta(seconds=5), deliver_at=datetime.now(timezone.utc)),
            pglogq.InvalidDelay,
            "PQ011",
        ),
        (lambda c: c.send_batch("q", [{}, {}], delay=timedelta(minutes=-1)), pglogq.InvalidDelay, "PQ011"),
        (lambda c: c.send("q", {}, idempotency_key=""), pglogq.InvalidArgument, "PQ019"),
        (lambda c: c.send("q", {}, idempotency_key="k" * 256), pglogq.InvalidArgument, "PQ019"),
        (lambda c: c.send_batch("q", [{}, {}], idempotency_keys=["a"]), pglogq.InvalidArgument, "PQ019"),
        (lambda c: c.send_batch("q", [{}, {}], idempotency_keys=["a", ""]), pglogq.InvalidArgument, "PQ019"),
        (lambda c: c.cancel("q", 10**9), pglogq.UnknownMessage, "PQ021"),
        (lambda c: c.cancel("q", 0), pglogq.UnknownMessage, "PQ021"),
        (lambda c: c.cancel("q", -5), pglogq.UnknownMessage, "PQ021"),
        (lambda c: c.cancel("nope", 1), pglogq.UnknownQueue, "PQ001"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    client: pglogq.Client, dsn: str, call: Any, error: type, code: str
) -> None:
    setup_queue(client)
    client.send("q", {"v": 1}, idempotency_key="a")
    client.send("q", {"v": 2}, delay=timedelta(hours=1))
    before = state(dsn)
    with pytest.raises(error) as e:
        call(client)
    assert e.value.sqlstate == code
    assert state(dsn) == before


@pytest.mark.parametrize("value", ["infinity", "-infinity"])
def test_infinite_deliver_at_is_refused(client: pglogq.Client, dsn: str, value: str) -> None:
    setup_queue(client)
    before = state(dsn)
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT pglogq.send('q', '{}', deliver_at => %s::timestamptz)", (value,))
    assert e.value.sqlstate == "PQ011"
    assert state(dsn) == before


def test_cancel_of_an_id_from_another_queue(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    client.create_queue("big")
    ids = client.send_batch("big", [{}] * 5)
    client.send("q", {})
    before = state(dsn)
    with pytest.raises(pglogq.UnknownMessage):
        client.cancel("q", ids[-1])
    assert state(dsn) == before


# -- the short path of send -------------------------------------------------------------------

EVENT_ROW = ("SELECT ev_type, ev_payload, ev_headers, ev_priority, ev_key, ev_partition, ev_retry, ev_owner,"
             " ev_failed_at, ev_txid = pg_current_xact_id() FROM pglogq.event WHERE ev_id = %s")


@pytest.mark.parametrize("args", [
    "",
    ", type => 'order'",
    ", headers => '{\"h\": 1}'",
    ", priority => 7",
    ", type => 'order', headers => '{}', priority => 32767",
    ", 'order', NULL, 100",
])
def test_short_and_full_path_of_send_store_the_same_event(client: pglogq.Client, dsn: str, args: str) -> None:
    """READ COMMITTED takes send's short path, REPEATABLE READ its full one: the same row either way."""
    setup_queue(client, ("a",))
    rows = []
    for level in ("READ COMMITTED", "REPEATABLE READ"):
        with psycopg.connect(dsn) as conn:
            conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
            got = conn.execute(f"SELECT pglogq.send('q', '{{\"v\": 1}}'{args})").fetchone()
            assert got is not None
            rows.append(conn.execute(EVENT_ROW, (got[0],)).fetchone())
    assert rows[0] == rows[1]
    assert rows[0] is not None and rows[0][-1] is True  # in the sender's transaction
    client.tick("q", force=True)
    assert [m.payload for m in drain(client, "q", "a")] == [{"v": 1}, {"v": 1}]


def _outcome(dsn: str, level: str, sql: str, params: Any = ()) -> tuple[str, Any]:
    """("ok", the stored row) or ("error", its SQLSTATE, with nothing stored) of one send."""
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        before = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        try:
            got = conn.execute(sql, params).fetchone()
        except psycopg.Error as exc:
            conn.rollback()
            assert conn.execute("SELECT count(*) FROM pglogq.event").fetchone() == before
            return "error", exc.sqlstate
        assert got is not None
        return "ok", conn.execute(EVENT_ROW, (got[0],)).fetchone()


def test_the_short_path_of_send_at_its_boundaries_behaves_as_the_full_path(client: pglogq.Client, dsn: str) -> None:
    """Every edge of the short path's conditions (type length, priority range, headers type,
    payload size at the limit and one byte over, NULLs, an unknown or partitioned queue): READ
    COMMITTED (short path) and REPEATABLE READ (full path) store the same row or refuse with the
    same SQLSTATE and store nothing."""
    setup_queue(client, ("a",))
    client.create_queue("parts")
    client.set_queue_config("parts", "partitions", 4)
    client.set_queue_config("q", "max_payload_bytes", 1000)
    with psycopg.connect(dsn) as conn:
        sizes = {n: conn.execute("SELECT pg_column_size(to_jsonb(repeat('x', %s)))", (n,)).fetchone()
                 for n in range(960, 1010)}
    at_limit = next(n for n, row in sizes.items() if row == (1000,))
    cases: list[tuple[str, Any]] = [
        ("SELECT pglogq.send('q', '1', type => %s)", ("t" * 255,)),
        ("SELECT pglogq.send('q', '1', type => %s)", ("t" * 256,)),
        ("SELECT pglogq.send('q', '1', type => %s)", ("é" * 128,)),  # 256 bytes in 128 characters
        ("SELECT pglogq.send('q', '1', type => '')", ()),
        ("SELECT pglogq.send('q', '1', priority => 0)", ()),
        ("SELECT pglogq.send('q', '1', priority => 32767)", ()),
        ("SELECT pglogq.send('q', '1', priority => 32768)", ()),
        ("SELECT pglogq.send('q', '1', priority => -1)", ()),
        ("SELECT pglogq.send('q', '1', priority => NULL)", ()),
        ("SELECT pglogq.send('q', '1', headers => '{}')", ()),
        ("SELECT pglogq.send('q', '1', headers => '[]')", ()),
        ("SELECT pglogq.send('q', '1', headers => 'null')", ()),
        ("SELECT pglogq.send('q', NULL)", ()),
        ("SELECT pglogq.send('q', 'null')", ()),
        ("SELECT pglogq.send('q', to_jsonb(repeat('x', %s)))", (at_limit,)),
        ("SELECT pglogq.send('q', to_jsonb(repeat('x', %s)))", (at_limit + 1,)),
        ("SELECT pglogq.send('q', to_jsonb(repeat('x', %s)), headers => '{}')", (at_limit,)),
        ("SELECT pglogq.send('nope', '1')", ()),
        ("SELECT pglogq.send(NULL, '1')", ()),
        ("SELECT pglogq.send('parts', '1')", ()),
        ("SELECT pglogq.send('parts', '1', type => 't', priority => 5)", ()),
    ]
    seen = set()
    for sql, params in cases:
        short = _outcome(dsn, "READ COMMITTED", sql, params)
        full = _outcome(dsn, "REPEATABLE READ", sql, params)
        assert short[0] == full[0], (sql, short, full)
        if short[0] == "ok":
            # the same row but for the partition (msg_id % partitions) and the transaction's own test
            assert short[1][:5] + short[1][6:] == full[1][:5] + full[1][6:], (sql, short, full)
        else:
            assert short[1] == full[1] and short[1].startswith("PQ"), (sql, short, full)
        seen.add(short[0])
    assert seen == {"ok", "error"}



def test_arrays_starting_at_another_subscript_are_read_in_order(client: pglogq.Client, dsn: str) -> None:
    """send_batch's arrays as SQL can write them, '[0:1]={...}': payloads and idempotency keys
    are taken in their order (the keys of '[0:1]={a,b}' were read from subscript 1: NULL and b,
    a not-null violation), on a queue of one partition and a partitioned one."""
    payloads = r'[0:1]={"{\"n\": 1}","{\"n\": 2}"}'
    for queue, partitions in (("q", 1), ("p", 4)):
        client.create_queue(queue, partitions=partitions)
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = conn.execute("SELECT pglogq.send_batch(%s, %s::jsonb[], idempotency_keys => '[0:1]={a,b}')",
                               (queue, payloads)).fetchone()
            assert ids is not None and len(ids[0]) == 2
            again = conn.execute("SELECT pglogq.send_batch(%s, ARRAY['{}'::jsonb, '{}'],"
                                 " idempotency_keys => ARRAY['a', 'b'])", (queue,)).fetchone()
            assert again == ids  # the same keys in the same order: the same ids
            stored = conn.execute("SELECT ev_payload FROM pglogq.event WHERE ev_id = ANY (%s) AND ev_queue ="
                                  " (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s) ORDER BY ev_id",
                                  (ids[0], queue)).fetchall()
            assert [r[0] for r in stored] == [{"n": 1}, {"n": 2}]
