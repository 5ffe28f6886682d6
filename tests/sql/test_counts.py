"""Event counts: every count pglogq reports or decides on is the number of events, not of ids.

Message ids come from a sequence, and ids are burnt without an event (a rolled-back send, a
repeated idempotency key, a delayed send not yet due) while retried and replayed events take
none.  So each tick records how many events it closes (``tick_event_total``, cumulative per
queue), and batch merging, big-batch detection, seek by_events and its deltas, lag_events,
pending_estimate and ticker_max_count all use it.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.cli.errors import Exit
from tests.support import draining
from tests.support.cli import fails
from tests.support.paths import UPGRADE_DATA


def drain(client: pglogq.Client, consumer: str = "c", page: int = 1000) -> list[tuple[int, int]]:
    """(priority, msg_id) in delivery order, paging through every batch."""
    return [(m.priority, m.msg_id) for m in draining.drain(client, "q", consumer, page=page)]


def burn_by_rollback(client: pglogq.Client, dsn: str, n: int) -> None:
    with psycopg.connect(dsn) as conn:
        client.send_batch("q", [{"burnt": i} for i in range(n)], conn=conn)
        conn.rollback()


def burn_by_delay(client: pglogq.Client, dsn: str, n: int) -> None:
    for i in range(n):
        client.send("q", {"later": i}, delay=timedelta(hours=1))


def burn_by_idempotency(client: pglogq.Client, dsn: str, n: int) -> None:
    client.send("q", {"once": True}, idempotency_key="k")
    client.tick("q", force=True)
    drain(client)
    for _ in range(n):
        client.send("q", {"once": True}, idempotency_key="k")


@pytest.mark.parametrize("burn", [burn_by_rollback, burn_by_delay, burn_by_idempotency])
def test_burnt_ids_do_not_make_a_small_tick_big(client: pglogq.Client, dsn: str, burn: Any) -> None:
    """Regression: a tick of 3 events keeps priority order whatever ids were burnt before it."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "big_batch_events", 5)
    burn(client, dsn, 10)
    ids = [client.send("q", {"p": p}, priority=p) for p in (1, 100, 200)]
    client.tick("q", force=True)
    assert drain(client) == [(200, ids[2]), (100, ids[1]), (1, ids[0])]


def test_a_rolled_back_send_of_more_than_big_batch_events_keeps_priority(client: pglogq.Client, dsn: str) -> None:
    """Regression, the default setting: 50,001 burnt ids before a tick of 3 events."""
    client.create_queue("q")
    client.subscribe("q", "c")
    burn_by_rollback(client, dsn, 50_001)
    ids = [client.send("q", {"p": p}, priority=p) for p in (1, 100, 200)]
    client.tick("q", force=True)
    assert drain(client) == [(200, ids[2]), (100, ids[1]), (1, ids[0])]


def test_a_tick_of_many_retried_events_is_streamed(client: pglogq.Client) -> None:
    """Regression: retried events take no new id, yet they count toward big_batch_events."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = [client.send("q", {"p": p}, priority=p) for p in (1, 100, 200)]
    client.tick("q", force=True)
    batch = client.receive("q", "c")
    for m in batch:
        assert client.nack(m, retry_after=timedelta(0)) == "retry"
    batch.ack()
    client.set_queue_config("q", "big_batch_events", 2)
    client.maintain()  # the pump re-inserts the three due retries
    client.tick("q", force=True)
    # three retried events in one tick > big_batch_events: streamed in commit (txid, id) order
    assert drain(client) == [(1, ids[0]), (100, ids[1]), (200, ids[2])]


def test_batch_merging_counts_events_not_ids(client: pglogq.Client, dsn: str) -> None:
    """Regression: burnt ids do not stop ticks from merging into one batch (batch_max_events)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", 4)
    low = client.send("q", {}, priority=1)
    client.tick("q", force=True)
    burn_by_rollback(client, dsn, 10)
    high = client.send("q", {}, priority=200)
    client.tick("q", force=True)
    # two ticks of one event each: one batch, highest priority first
    assert drain(client) == [(200, high), (1, low)]


def idempotent_retry(client: pglogq.Client) -> list[int]:
    """5 keyed sends, tick; the same 5 again (deduplicated: no event), tick."""
    keys = [f"k{i}" for i in range(5)]
    ids = [client.send("q", {"i": i}, idempotency_key=k) for i, k in enumerate(keys)]
    client.tick("q", force=True)
    again = [client.send("q", {"i": i}, idempotency_key=k) for i, k in enumerate(keys)]
    assert again == ids
    client.tick("q", force=True)
    return ids


def test_seek_counts_are_exact_when_ids_were_burnt(client: pglogq.Client) -> None:
    """Regression: seek by_events and its deltas count events, not ids."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = idempotent_retry(client)
    assert [i for _, i in drain(client)] == ids
    plan = client.seek_plan("q", "c", to="earliest")
    assert plan.delta_events == -5
    plan = client.seek_plan("q", "c", by_events=-5)
    assert plan.delta_events == -5 and plan.target_tick == 1
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=-6)
    applied = client.seek("q", "c", by_events=-5)
    assert [i for _, i in drain(client)] == ids and applied.delta_events == -5
    assert client.seek("q", "c", to="earliest").delta_events == -5
    assert client.seek("q", "c", to="latest").delta_events == 5


def test_lag_and_pending_count_events(client: pglogq.Client) -> None:
    """Regression: lag_events, pending_events and pending_estimate count events, not ids."""
    client.create_queue("q")
    client.subscribe("q", "c")
    idempotent_retry(client)
    (info,) = client.consumer_info("q", "c")
    assert (info.lag_events, info.pending_events) == (5, 5)
    for i in range(5):
        client.send("q", {"i": i}, idempotency_key=f"k{i}")  # deduplicated again
    (qi,) = client.queue_info("q")
    assert qi.pending_estimate == 0
    client.send("q", {"new": True})
    (qi,) = client.queue_info("q")
    assert qi.pending_estimate == 1


def test_ticker_max_count_counts_events(client: pglogq.Client, dsn: str) -> None:
    """Regression: ticker_max_count = 3 does not tick with one event (and burnt ids) waiting."""
    client.create_queue("q")
    client.set_queue_config("q", "ticker_max_lag", "1 hour")
    client.set_queue_config("q", "ticker_max_count", 3)
    client.send("q", {"k": 1}, idempotency_key="k")
    client.tick("q", force=True)
    for _ in range(5):
        client.send("q", {"k": 1}, idempotency_key="k")
    burn_by_rollback(client, dsn, 5)
    client.send("q", {"one": True})
    assert client.tick("q") == 0
    client.send("q", {"two": True})
    assert client.tick("q") == 0
    client.send("q", {"three": True})
    assert client.tick("q") == 1


def test_ticker_max_count_counts_retried_events(client: pglogq.Client, dsn: str) -> None:
    """Retried events take no id, but they are events waiting for a tick."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{"i": i} for i in range(3)])
    client.tick("q", force=True)
    batch = client.receive("q", "c")
    for m in batch:
        client.nack(m, retry_after=timedelta(0))
    batch.ack()
    client.set_queue_config("q", "ticker_max_lag", "1 hour")
    client.set_queue_config("q", "ticker_max_count", 3)
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.maint_pump()")
    assert client.tick("q") == 1


def test_ticker_lag_sees_an_event_whose_transaction_spanned_the_last_tick(
    client: pglogq.Client, dsn: str
) -> None:
    """Regression: a committed, un-ticked event of a transaction open across the last tick."""
    client.create_queue("q")
    with psycopg.connect(dsn) as slow:
        client.send("q", {"slow": True}, conn=slow)
        client.tick("q", force=True)  # the sending transaction is open across this tick
        slow.commit()
    (qi,) = client.queue_info("q")
    assert qi.pending_estimate == 1
    assert qi.ticker_lag > timedelta(0)
    client.tick("q", force=True)
    (qi,) = client.queue_info("q")
    assert (qi.pending_estimate, qi.ticker_lag) == (0, timedelta(0))


@pytest.mark.parametrize("by", [2**63 - 1, -(2**63), 2**62, -(2**62), 2**31, -(2**31)])
def test_huge_by_events_is_out_of_range_not_an_overflow(client: pglogq.Client, by: int) -> None:
    """Regression: a huge by_events raises SeekOutOfRange (PQ017), never 22003."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{}, {}])
    client.tick("q", force=True)
    client.send("q", {})
    client.tick("q", force=True)
    drain(client)  # the consumer is at the newest tick, 3 events after the first one
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek_plan("q", "c", by_events=by)
    with pytest.raises(pglogq.SeekOutOfRange):
        client.seek("q", "c", by_events=by)


@pytest.mark.parametrize("by", ["9223372036854775807", "-9223372036854775808", "+4294967296"])
def test_cli_huge_by_is_an_invalid_input_exit(client: pglogq.Client, dsn: str, by: str) -> None:
    """Regression: `pglogq consumer seek --by <huge>` exits 4 (out of range), not 1."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{}, {}])
    client.tick("q", force=True)
    drain(client)
    r = fails(dsn, Exit.INVALID, "consumer", "seek", "q", "c", "--by", by)
    assert "Traceback" not in r.stderr
    fails(dsn, Exit.INVALID, "consumer", "seek", "q", "c", "--by", by, "--execute")



# -- further attacks (docs/reliability/attacks-counts.md) ------------------------------------


def test_ticker_lag_of_a_pumped_retry_is_not_its_age(client: pglogq.Client, dsn: str) -> None:
    """A retried (or delayed) event keeps its first send time; moved into the queue by the pump
    just now, it has not waited an hour for the ticker (ticker_lag was its age)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time,
                                                  ev_payload, ev_priority)
                        SELECT 1, s.sub_id, 1, now(), 1, now() - interval '1 hour', '{}', 100
                          FROM pglogq.subscription s""")
        conn.execute("SELECT pglogq.maint_pump()")
    (qi,) = client.queue_info("q")
    assert qi.pending_estimate == 1
    assert timedelta(0) < qi.ticker_lag <= qi.last_tick_age < timedelta(minutes=59)


def test_the_ticker_does_not_tick_for_its_own_uncommitted_events(client: pglogq.Client, dsn: str) -> None:
    """ticker() in the transaction that sent: its events are not committed, so nothing waits
    (before: an empty tick was written)."""
    client.create_queue("q")
    with psycopg.connect(dsn) as conn:
        client.send("q", {}, conn=conn)
        assert client.tick("q", conn=conn) == 0
        (qi,) = client.queue_info("q", conn=conn)
        assert qi.pending_estimate == 0 and qi.ticker_lag == timedelta(0)
        conn.commit()
    assert client.tick("q") == 1


def totals(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [int(r[0]) for r in conn.execute("SELECT tick_event_total FROM pglogq.tick ORDER BY tick_id")]


def test_concurrent_ticks_count_each_event_once(client: pglogq.Client, dsn: str) -> None:
    """Two force_ticks racing (one waits for the other's transaction): each event is counted by
    exactly one tick."""
    client.create_queue("q")
    client.send_batch("q", [{}, {}, {}])
    done: list[int] = []
    with psycopg.connect(dsn) as first:
        first.execute("SELECT pglogq.force_tick('q')")

        def second() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                client.send_batch("q", [{}, {}], conn=None)
                row = conn.execute("SELECT pglogq.force_tick('q')").fetchone()
                done.append(int(row[0]) if row else -1)

        t = threading.Thread(target=second)
        t.start()
        t.join(timeout=1)
        assert t.is_alive()  # waits for the first tick's transaction
        first.commit()
        t.join()
    assert done == [3]
    assert totals(dsn) == [0, 3, 5]


def test_counts_survive_the_upgrade_from_the_first_schema(server_dsn: str) -> None:
    """Migration 0013 gives old ticks their sequence value; ticks after it count events."""
    from psycopg.conninfo import make_conninfo

    release = sorted(UPGRADE_DATA.glob("v1-*.sql"))[0]
    name = f"pglogq_counts_up_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = make_conninfo(server_dsn, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(release.read_text().encode())
            conn.execute("SELECT pglogq.create_queue('q')")
            conn.execute("SELECT pglogq.subscribe('q', 'c')")
            conn.execute("SELECT pglogq.send_batch('q', ARRAY['{}', '{}', '{}']::jsonb[])")
            conn.execute("SELECT pglogq.force_tick('q')")
        with pglogq.Client(dsn) as c:
            c.install_schema()
            assert totals(dsn) == [0, 3]
            burn_by_rollback(c, dsn, 5)
            c.send_batch("q", [{}, {}])
            c.tick("q", force=True)
            assert totals(dsn) == [0, 3, 5]
            (info,) = c.consumer_info("q", "c")
            assert info.lag_events == 5
            assert c.seek_plan("q", "c", to="latest").delta_events == 5
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def test_a_tick_written_by_the_previous_code_is_refused_not_counted_as_zero(client: pglogq.Client, dsn: str) -> None:
    """Re-install while a ticker call of the previous version runs: its INSERT (without
    tick_event_total) must fail and be retried by the new code, never record a total of 0."""
    client.create_queue("q")
    client.send("q", {})
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.errors.NotNullViolation):
        conn.execute("""INSERT INTO pglogq.tick (queue_id, tick_id, tick_time, tick_snapshot, tick_event_seq)
                            SELECT 1, 2, now(), pg_current_snapshot(), 1""")
    client.tick("q", force=True)
    assert totals(dsn) == [0, 1]


@pytest.mark.parametrize(("sql", "code"), [
    ("SELECT pglogq.force_tick(NULL)", "PQ001"), ("SELECT pglogq.ticker('')", "PQ001"),
    ("SELECT * FROM pglogq.queue_info('')", "PQ001"), ("SELECT * FROM pglogq.ticker_check(NULL)", "PQ019"),
])
def test_null_and_empty_names_of_the_tick_functions(dsn: str, sql: str, code: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute(sql.encode())
        assert info.value.sqlstate == code
