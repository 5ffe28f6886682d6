"""An idle ticker sleeps until events come (pglogq.ticker_sleep), and every call that gives it
work wakes it (pglogq._wake_ticker).

The sleeping session holds an exclusive advisory lock whose shared side every id-drawing call
tries in its own transaction: the lock is taken only while no such transaction is in flight,
and one that begins while it is held sends NOTIFY "pglogq:ticker" at its commit.  Checked here
without timing: notifications are read after two round trips of the sleeping session (the
server sends a pending notification before it reads the next statement), so "none came" is an
answer, not a timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]
CHANNEL = "pglogq:ticker"


@pytest.fixture
def conns(dsn: str) -> Iterator[tuple[Conn, Conn]]:
    """(ticker, producer): two autocommit sessions; queues q (one partition) and k (two)."""
    with psycopg.connect(dsn, autocommit=True) as ticker, psycopg.connect(dsn, autocommit=True) as producer:
        producer.execute("SELECT pglogq.create_queue('q')")
        producer.execute("SELECT pglogq.subscribe('q', 'c')")
        producer.execute("SELECT pglogq.create_queue('k')")
        producer.execute("SELECT pglogq.set_queue_config('k', 'partitions', '2')")
        yield ticker, producer


def _sleep(conn: Conn, asleep: bool = True) -> bool:
    row = conn.execute("SELECT pglogq.ticker_sleep(%s)", (asleep,)).fetchone()
    assert row is not None
    return bool(row[0])


def _asleep(conn: Conn) -> None:
    """The session sleeps (its first call LISTENs, the second takes the lock)."""
    _sleep(conn)
    assert _sleep(conn)


def _notes(conn: Conn) -> list[str]:
    """The channels of the notifications that reached ``conn`` by now."""
    conn.execute("SELECT 1")
    conn.execute("SELECT 1")
    return [n.channel for n in conn.notifies(timeout=0)]


def test_the_first_call_listens_and_the_next_one_sleeps(conns: tuple[Conn, Conn], dsn: str) -> None:
    ticker, _ = conns
    assert not _sleep(ticker)  # LISTENs: its effect starts at this call's commit
    assert CHANNEL in [r[0] for r in ticker.execute("SELECT pg_listening_channels()").fetchall()]
    assert _sleep(ticker)
    with psycopg.connect(dsn, autocommit=True) as other:
        _sleep(other)
        assert not _sleep(other), "one sleeping ticker holds the lock"
        assert _sleep(ticker), "asleep already: still asleep"
        assert not _sleep(ticker, False)
        assert _sleep(other), "a wake-up lets go of every hold, the second one too"


def test_a_transaction_drawing_ids_keeps_the_ticker_awake_until_it_ends(conns: tuple[Conn, Conn]) -> None:
    ticker, producer = conns
    _sleep(ticker)
    with producer.transaction():
        producer.execute("SELECT pglogq.send('q', '{}')")
        assert not _sleep(ticker), "a send is in flight"
    assert _sleep(ticker)


def _pump(conn: Conn) -> None:
    conn.execute("SELECT pglogq.send('q', '{}', delay => interval '1 hour')")
    conn.execute("UPDATE pglogq.delayed SET deliver_at = now() - interval '1 second'")


def _dead_letter(conn: Conn) -> int:
    conn.execute("SELECT pglogq.send('q', '{}')")
    conn.execute("SELECT pglogq.force_tick('q')")
    row = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c', 10)").fetchone()
    assert row is not None
    conn.execute("SELECT pglogq.nack(%s, %s, dead => true)", row)
    conn.execute("SELECT pglogq.ack(%s)", (row[0],))
    dead = conn.execute("SELECT dead_id FROM pglogq.dlq_inspect('q')").fetchone()
    assert dead is not None
    return int(dead[0])


# each call that gives the ticker work: (its set-up, run before each call; the call)
WAKERS: dict[str, tuple[Callable[[Conn], Any], str]] = {
    "send": (lambda c: None, "SELECT pglogq.send('q', '{}')"),
    "send with headers": (lambda c: None, "SELECT pglogq.send('q', '{}', headers => '{\"h\": 1}')"),
    "send with a key": (lambda c: None, "SELECT pglogq.send('q', '{}', idempotency_key => 'x')"),
    "send_batch": (lambda c: None, "SELECT pglogq.send_batch('q', ARRAY['{}'::jsonb, '{}'])"),
    "send_batch_json": (lambda c: None, "SELECT pglogq.send_batch_json('q', '[{}, {}]')"),
    "send_keyed": (lambda c: None, "SELECT pglogq.send_keyed('k', '{}', 'a')"),
    "send_batch_keyed": (lambda c: None,
                         "SELECT pglogq.send_batch_keyed('k', '[{}, {}]', ARRAY['a', 'b'])"),
    "maint_pump": (_pump, "SELECT pglogq.maint_pump()"),
    "dlq_replay": (_dead_letter, "SELECT pglogq.dlq_replay(max(dead_id)) FROM pglogq.dead_letter"),
    "resume": (lambda c: c.execute("SELECT pglogq.set_queue_config('q', 'paused', 'true')"),
               "SELECT pglogq.set_queue_config('q', 'paused', 'false')"),
    "create_queue": (lambda c: None, "SELECT pglogq.create_queue('new' || count(*)) FROM pglogq.queue"),
}


@pytest.mark.parametrize("call", list(WAKERS))
def test_every_call_that_gives_the_ticker_work_wakes_it_at_commit(conns: tuple[Conn, Conn], call: str) -> None:
    ticker, producer = conns
    setup, sql = WAKERS[call]
    _sleep(ticker)
    setup(producer)
    with producer.transaction():
        producer.execute(sql)
    assert _notes(ticker) == [], "awake: the call pays no NOTIFY"
    setup(producer)
    _asleep(ticker)
    with producer.transaction():
        producer.execute(sql)
        assert _notes(ticker) == [], "a notification comes at commit, not before"
    assert _notes(ticker) == [CHANNEL]


def test_a_rolled_back_send_wakes_no_one(conns: tuple[Conn, Conn]) -> None:
    ticker, producer = conns
    _asleep(ticker)
    with pytest.raises(psycopg.errors.RaiseException), producer.transaction():
        producer.execute("SELECT pglogq.send('q', '{}')")
        producer.execute("DO $$ BEGIN RAISE EXCEPTION 'no'; END $$")
    assert _notes(ticker) == []


def test_a_pass_after_falling_asleep_sees_what_committed_before(conns: tuple[Conn, Conn]) -> None:
    ticker, producer = conns
    producer.execute("SELECT pglogq.send('q', '{}')")  # committed, not ticked yet
    _asleep(ticker)
    assert ticker.execute("SELECT pglogq.ticker()").fetchone() == (1,)
    assert _notes(ticker) == [], "the send committed before the sleep: it did not notify"


def test_asleep_null_wakes_and_a_transaction_block_never_sleeps_before_its_commit(conns: tuple[Conn, Conn]) -> None:
    ticker, _ = conns
    with ticker.transaction():
        assert not _sleep(ticker)
        assert not _sleep(ticker), "the LISTEN of this transaction takes effect at its commit"
    assert _sleep(ticker)
    assert ticker.execute("SELECT pglogq.ticker_sleep(NULL)").fetchone() == (False,)
    with ticker.transaction():
        assert _sleep(ticker), "listening (committed before): the lock is a session's"
    assert _sleep(ticker, False) is False


def test_maint_next_due_is_the_soonest_rotation_retry_delayed_send_or_schedule(conns: tuple[Conn, Conn]) -> None:
    _, producer = conns

    def next_due() -> Any:
        row = producer.execute("SELECT pglogq.maint_next_due()").fetchone()
        assert row is not None
        return row[0]

    producer.execute("SELECT pglogq.set_queue_config('k', 'rotation_period', '30 days')")
    producer.execute("SELECT pglogq.set_queue_config('q', 'rotation_period', '20 days')")
    rotation = producer.execute("SELECT switch_time + rotation_period FROM pglogq.queue"
                                " WHERE queue_name = 'q'").fetchone()
    assert rotation is not None and next_due() == rotation[0]
    producer.execute("SELECT pglogq.send('q', '{}', delay => interval '2 hours')")
    delayed = producer.execute("SELECT deliver_at FROM pglogq.delayed").fetchone()
    assert delayed is not None and next_due() == delayed[0]
    producer.execute("SELECT pglogq.schedule_add('q', 'nightly', '0 3 * * *', '{}')")
    producer.execute("UPDATE pglogq.schedule SET next_due = now() + interval '1 hour'")
    planned = producer.execute("SELECT next_due FROM pglogq.schedule").fetchone()
    assert planned is not None and next_due() == planned[0]
