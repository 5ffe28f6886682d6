"""Queue and subscription lifecycle under concurrency: drop_queue, create_queue, unsubscribe racing
the other calls; what drop_queue refuses; the size cap; idempotent batches in opposite orders.

Regression tests of the defects two outside reviews found there (docs/reliability/attacks-cancel.md).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.concurrent import Call, wait_blocked
from tests.support.db import state

# -- drop_queue without force refuses a queue that still stores events -----------


def test_drop_queue_refuses_a_queue_with_delayed_events(client: pglogq.Client, dsn: str) -> None:
    """Regression: the pending delayed event was lost by a drop without force."""
    client.create_queue("q")
    client.send("q", {"v": 1}, delay=timedelta(hours=1))
    before = state(dsn)
    with pytest.raises(pglogq.QueueInUse) as e:
        client.drop_queue("q")
    assert "delayed" in str(e.value)
    assert state(dsn) == before
    assert client.drop_queue("q", force=True) is True


def test_drop_queue_refuses_a_queue_with_unticked_events(client: pglogq.Client, dsn: str) -> None:
    """Events committed after the last tick would go to a consumer subscribing now."""
    client.create_queue("q")
    mid = client.send("q", {"v": 1})
    with pytest.raises(pglogq.QueueInUse):
        client.drop_queue("q")
    assert client.cancel("q", mid) is True  # a cancelled event does not count
    assert client.drop_queue("q") is True


def test_drop_queue_of_a_ticked_queue_without_consumers(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.send("q", {"v": 1})
    client.tick("q", force=True)
    assert client.drop_queue("q") is True
    assert client.drop_queue("q") is False


def test_drop_queue_refuses_consumers_first(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "a")
    with pytest.raises(pglogq.QueueInUse) as e:
        client.drop_queue("q")
    assert "consumer" in str(e.value)


# -- the size cap covers payload and headers -------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda c, h: c.send("q", {"v": 1}, headers=h),
        lambda c, h: c.send("q", {"v": 1}, headers=h, delay=timedelta(hours=1)),
        lambda c, h: c.send("q", {"v": 1}, headers=h, idempotency_key="k"),
        lambda c, h: c.send_batch("q", [{"v": 1}, {"v": 2}], headers=h),
        lambda c, h: c.send_batch("q", [{"v": 1}], headers=h, idempotency_keys=["k"]),
        lambda c, h: c.send_batch("q", [{"v": 1}], headers=h, delay=timedelta(hours=1)),
    ],
    ids=["send", "send-delayed", "send-keyed", "send_batch", "send_batch-keyed", "send_batch-delayed"],
)
def test_headers_count_toward_max_payload_bytes(client: pglogq.Client, dsn: str, call: Any) -> None:
    """Regression: 5 MB of headers were accepted under a 1,000-byte cap."""
    client.create_queue("q")
    client.set_queue_config("q", "max_payload_bytes", 1000)
    before = state(dsn)
    with pytest.raises(pglogq.PayloadTooLarge):
        call(client, {"h": "x" * 5_000_000})
    with pytest.raises(pglogq.PayloadTooLarge):
        call(client, {"h": "x" * 990})  # either part alone fits, together they do not
    assert state(dsn) == before
    call(client, {"h": "x" * 100})


def test_the_cap_counts_stored_jsonb_and_the_refusal_says_so(client: pglogq.Client, dsn: str) -> None:
    """max_payload_bytes counts the stored jsonb form, not the JSON text: a document whose text is
    well under the cap can be over it (small numbers take ~5x their text in jsonb).  The refusal
    names what is counted and gives both sizes, and the hint says how they compare; exactly the cap
    in stored bytes is accepted."""
    client.create_queue("q")
    client.set_queue_config("q", "max_payload_bytes", 10_000)
    doc = list(range(1500))
    text = json.dumps(doc, separators=(",", ":"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_column_size(%s::jsonb), octet_length(%s::jsonb::text)", (text, text)).fetchone()
        assert row is not None
        stored, as_text = int(row[0]), int(row[1])
        assert len(text) < 10_000 < stored
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT pglogq.send('q', %s::jsonb)", (text,))
        assert e.value.sqlstate == "PQ006"
        assert (f"payload too large: {stored} bytes stored as jsonb (payload {stored}, headers 0; "
                f"as JSON text {as_text} bytes), the queue accepts at most 10000 bytes stored as jsonb"
                ) == e.value.diag.message_primary
        assert "stored jsonb form" in (e.value.diag.message_hint or "")
        conn.execute("SELECT pglogq.set_queue_config('q', 'max_payload_bytes', %s)", (str(stored),))
        conn.execute("SELECT pglogq.send('q', %s::jsonb)", (text,))  # exactly the cap: accepted
    with pytest.raises(pglogq.PayloadTooLarge, match="stored as jsonb"):
        client.send("q", [*doc, 1])


def test_headers_cap_in_send_batch_json(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.set_queue_config("q", "max_payload_bytes", 1000)
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as e:
        conn.execute(
            "SELECT pglogq.send_batch_json('q', '[1, 2]'::jsonb, headers => jsonb_build_object('h', repeat('x', 5000)))"
        )
    assert e.value.sqlstate == "PQ006"


# -- idempotent send_batch in opposite key orders ---------------------------------

BATCH = "SELECT pglogq.send_batch('q', %s::jsonb[], idempotency_keys => %s)"


def test_send_batch_claims_keys_in_a_fixed_order(client: pglogq.Client, dsn: str) -> None:
    """Regression: two batches whose keys overlap in opposite orders deadlocked (40P01).
    Session 1 holds key a; session 2 sends [b, a] (it used to claim b, then wait for a); session 1
    then claims b: a deadlock before, now session 2 waits for a holding nothing."""
    client.create_queue("q")
    client.subscribe("q", "c")
    with psycopg.connect(dsn) as one:
        one.execute(BATCH, (["{}"], ["k-a"]))
        two = Call(dsn, lambda c: c.execute(BATCH, (["{}", "{}"], ["k-b", "k-a"])).fetchone())
        two.start()
        wait_blocked(dsn, two.pid)
        one.execute(BATCH, (["{}"], ["k-b"]))
        one.commit()
    (got,) = two.outcome()
    assert len(got) == 2 and len(set(got)) == 2


def test_send_batch_keys_in_opposite_orders_concurrently(client: pglogq.Client, dsn: str) -> None:
    """Many tries of two concurrent batches with the same 40 keys in opposite orders."""
    client.create_queue("q")
    keys = [f"k{i:03d}" for i in range(40)]
    errors: list[BaseException] = []
    results: list[dict[str, int]] = []

    def run(order: list[str], tag: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for t in range(8):
                    ks = [f"{k}-{t}" for k in order]
                    row = conn.execute(BATCH, ([f'{{"t": {tag}}}'] * len(ks), ks)).fetchone()
                    assert row is not None
                    results.append(dict(zip(ks, row[0], strict=True)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(keys, 1)), threading.Thread(target=run, args=(keys[::-1], 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    merged: dict[str, set[int]] = {}
    for r in results:
        for k, v in r.items():
            merged.setdefault(k, set()).add(v)
    assert all(len(v) == 1 for v in merged.values())  # one id per key, whoever won


def test_send_batch_keyed_ids_follow_the_payload_order(client: pglogq.Client) -> None:
    from tests.support.draining import drain

    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}], idempotency_keys=["z", None, "a", "z"])
    assert ids[0] < ids[1] < ids[2] and ids[3] == ids[0]
    client.tick("q", force=True)
    assert [m.payload for m in drain(client, "q", "c")] == [{"n": 1}, {"n": 2}, {"n": 3}]


# -- a REPEATABLE READ producer racing drop_queue --------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pglogq.send('q', '{}')",
        "SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb])",
        "SELECT pglogq.send_batch_json('q', '[1]')",
        "SELECT pglogq.send('q', '{}', delay => '1 hour')",
        "SELECT pglogq.cancel('q', 1)",
        "SELECT pglogq.subscribe('q', 'b')",
        # its copies dropped with the queue, receive made them again from the older snapshot's
        # catalog rows: a syntax error (42601) from a DROP of a function no longer there
        "SELECT * FROM pglogq.receive('q', 'a')",
        "SELECT * FROM pglogq.receive('q', 'a', 10, 'w1')",
        "SELECT * FROM pglogq.lookup('q', 1)",
        "SELECT * FROM pglogq.queue_info('q')",
    ],
)
def test_repeatable_read_producer_after_drop_queue(client: pglogq.Client, dsn: str, sql: str) -> None:
    """Regression: XX000 "could not open relation with OID" instead of PQ001 or 40001."""
    client.create_queue("q")
    client.subscribe("q", "a")
    client.send("q", {})
    with psycopg.connect(dsn) as rr:
        rr.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        rr.execute("SELECT count(*) FROM pglogq.queue")  # the snapshot is taken here
        assert client.drop_queue("q", force=True) is True
        with pytest.raises(psycopg.Error) as e:
            rr.execute(sql)
        assert e.value.sqlstate in ("PQ001", "40001"), e.value


# -- calls racing unsubscribe or drop_queue(force) --------------------------------

CALLS: dict[str, tuple[str, str]] = {
    # name: (SQL, expected SQLSTATE after a drop_queue)
    "receive": ("SELECT * FROM pglogq.receive('q', 'a')", "PQ001"),
    "receive-worker": ("SELECT * FROM pglogq.receive('q', 'a', 10, 'w1')", "PQ001"),
    "subscribe": ("SELECT pglogq.subscribe('q', 'b')", "PQ001"),
    "send": ("SELECT pglogq.send('q', '{}')", "PQ001"),
    "send_batch": ("SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb, '{}'])", "PQ001"),
    "send_batch-keyed": ("SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb], idempotency_keys => '{k}')", "PQ001"),
    "force_tick": ("SELECT pglogq.force_tick('q')", "PQ001"),
    "ticker": ("SELECT pglogq.ticker('q')", "PQ001"),
    "queue_info": ("SELECT * FROM pglogq.queue_info('q')", "PQ001"),
    "cancel": ("SELECT pglogq.cancel('q', 1)", "PQ001"),
    "seek": ("SELECT * FROM pglogq.seek('q', 'a', 'latest')", "PQ001"),
}


def _prepare(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.create_queue("other")
    client.subscribe("q", "a")
    client.send("q", {})
    client.tick("q", force=True)


def _race(dsn: str, first: str, second: str) -> Call:
    with psycopg.connect(dsn) as s1:
        s1.execute(first)
        call = Call(dsn, lambda c: c.execute(second).fetchall())
        call.start()
        wait_blocked(dsn, call.pid)
        s1.commit()
    return call


@pytest.mark.parametrize("name", list(CALLS))
def test_call_racing_drop_queue_gets_unknown_queue(client: pglogq.Client, dsn: str, name: str) -> None:
    """Regression: a call waiting for drop_queue(force) failed with XX000 / 23503 / PQ017."""
    _prepare(client)
    sql, code = CALLS[name]
    call = _race(dsn, "SELECT pglogq.drop_queue('q', true)", sql)
    with pytest.raises(psycopg.Error) as e:
        call.outcome()
    assert e.value.sqlstate == code, e.value


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM pglogq.receive('q', 'a')",
        "SELECT * FROM pglogq.receive('q', 'a', 10, 'w1')",
        "SELECT * FROM pglogq.seek('q', 'a', 'latest')",
        "SELECT * FROM pglogq.seek_plan('q', 'a', 'latest')",
    ],
)
def test_call_racing_unsubscribe_gets_unknown_consumer(client: pglogq.Client, dsn: str, sql: str) -> None:
    """Regression: receive failed with PQ017 "tick <NULL> of consumer "<NULL>" is gone", or 23503."""
    _prepare(client)
    call = _race(dsn, "SELECT pglogq.unsubscribe('q', 'a')", sql)
    with pytest.raises(psycopg.Error) as e:
        call.outcome()
    assert e.value.sqlstate == "PQ002", e.value


def test_queue_info_of_all_queues_racing_drop_queue(client: pglogq.Client, dsn: str) -> None:
    _prepare(client)
    call = _race(dsn, "SELECT pglogq.drop_queue('q', true)", "SELECT queue_name FROM pglogq.queue_info()")
    assert call.outcome() == [("other",)]


# -- drop and create queues while the ticker runs --------------------------------


def _loop(dsn: str, stop: threading.Event, errors: list[BaseException], body: Callable[[Any], None]) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                body(conn)
    except BaseException as exc:
        errors.append(exc)


def test_drop_and_create_while_the_ticker_runs(client: pglogq.Client, dsn: str) -> None:
    """Regression: DeadlockDetected after ~15 drop/create cycles with the daemon ticking."""
    for name in ("keep1", "keep2"):
        client.create_queue(name)
        client.subscribe(name, "c")
    stop = threading.Event()
    errors: list[BaseException] = []

    def ticker(conn: Any) -> None:
        conn.execute("SELECT pglogq.send('keep1', '{}'), pglogq.send('keep2', '{}')")
        conn.execute("SELECT pglogq.ticker()")

    threads = [threading.Thread(target=_loop, args=(dsn, stop, errors, ticker)) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(40):
                for name in (f"tmp{i % 3}", "zz"):
                    conn.execute("SELECT pglogq.create_queue(%s)", (name,))
                    conn.execute("SELECT pglogq.subscribe(%s, 'c')", (name,))
                    conn.execute("SELECT pglogq.send(%s, '{}')", (name,))
                    conn.execute("SELECT pglogq.ticker()")
                    conn.execute("SELECT pglogq.drop_queue(%s, true)", (name,))
                assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors


def test_a_ticker_pass_never_waits_for_a_waiting_drop_queue(client: pglogq.Client, dsn: str) -> None:
    """A tick names the queue's own tables, so it holds the queue name's lock (shared) against a
    drop committing under it; a pass of the ticker only tries it: behind a drop_queue that waits
    for the queue's open transactions, the pass skips the queue and ticks the others."""
    _prepare(client)
    client.send("q", {})
    client.send("other", {})
    with psycopg.connect(dsn) as producer:
        producer.execute("SELECT pglogq.send('q', '{}')")  # open: holds q's name lock, shared
        drop = Call(dsn, lambda c: c.execute("SELECT pglogq.drop_queue('q', true)").fetchall())
        drop.start()
        wait_blocked(dsn, drop.pid)
        with psycopg.connect(dsn, autocommit=True) as ticker:
            ticker.execute("SET lock_timeout = '1s'")  # a wait for any lock fails the pass
            ticker.execute("SELECT pglogq.ticker()")
            ticked = ticker.execute("SELECT q.queue_name, h.tick_id FROM pglogq.tick_head h"
                                    "  JOIN pglogq.queue q USING (queue_id) ORDER BY 1").fetchall()
        assert ticked == [("other", 2), ("q", 2)]  # other ticked; q left to the drop
        producer.commit()
    assert drop.outcome() == [(True,)]
    assert client.queue_info("other")[0].pending_estimate == 0


@pytest.mark.parametrize("then", ["nack", "mark_started", "send"])
def test_a_holder_s_transaction_and_a_waiting_drop_queue_do_not_deadlock(
    client: pglogq.Client, dsn: str, then: str,
) -> None:
    """A transaction that locked a batch's holder (a heartbeat) and then reads the queue's tables
    (a nack, a mark_started, a send) deadlocked with a drop_queue(force) started in between,
    which held those tables while it waited for the holder's row: the holder's lock now comes
    after the queue name's, so the drop waits for the transaction, then goes on."""
    _prepare(client)
    with psycopg.connect(dsn, autocommit=True) as conn:
        batch, msg = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 10, NULL, 0)").fetchone()
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pglogq.heartbeat(%s)", (batch,))
        drop = Call(dsn, lambda c: c.execute("SELECT pglogq.drop_queue('q', true)").fetchall())
        drop.start()
        wait_blocked(dsn, drop.pid)
        sql = {"nack": "SELECT pglogq.nack(%s, %s)", "mark_started": "SELECT pglogq.mark_started(%s, %s)",
               "send": "SELECT pglogq.send('q', '{}') WHERE %s::bigint + %s::bigint > 0"}[then]
        holder.execute(sql, (batch, msg))
        holder.commit()
    assert drop.outcome() == [(True,)]
