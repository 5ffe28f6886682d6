"""Metadata under a held snapshot: the per-batch state (cursors, open pages,
heartbeats) and the ticks live in rotated tables emptied by TRUNCATE, so a long transaction
cannot make them pile up dead tuples; a snapshot older than a move of the state is refused."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

import pglogq

HOLDERS = (("a", None), ("b", None), ("c", "w1"), ("c", "w2"))  # c: two cooperating workers

METADATA_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c
 WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind = 'r' AND c.relname !~ '^event_'
   AND c.relname <> 'tick_head'
"""
# tick_head: one row per queue, updated by every tick: under a held snapshot each tick leaves a
# version no VACUUM can free, about 100 bytes of row (and index entries when an update cannot stay
# on its page), until maint_compact_head compacts it; measured on its own
TICK_HEAD_BYTES = "SELECT pg_total_relation_size('pglogq.tick_head')"


def setup(client: pglogq.Client, partitions: int = 1) -> None:
    client.create_queue("q", partitions=partitions)
    for consumer in ("a", "b", "c"):
        client.subscribe("q", consumer)


def traffic(client: pglogq.Client, batches: int) -> int:
    """`batches` x (send 20, tick, every holder receives and acknowledges pages of 7)."""
    got = 0
    for i in range(batches):
        client.send_batch("q", [{"i": i, "k": k} for k in range(20)])
        client.tick("q", force=True)
        for consumer, worker in HOLDERS:
            while page := client.receive("q", consumer, worker=worker, max_messages=7):
                got += len(page)
                page.ack()
    return got


def rotate_metadata(client: pglogq.Client, conn: psycopg.Connection[Any]) -> None:
    """Three switches of the metadata epoch, each after a tick everyone passed, each followed by
    the compaction of tick_head (as maint_operations lists them): every tick slot and both state
    partitions are emptied once."""
    for _ in range(3):
        traffic(client, 1)
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        assert conn.execute("SELECT pglogq.maint_compact_head()").fetchone() == (True,)


def metadata_bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(METADATA_BYTES).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("partitions", [1, 8])
def test_metadata_does_not_grow_with_traffic_under_a_held_snapshot(
        client: pglogq.Client, dsn: str, partitions: int) -> None:
    """With a REPEATABLE READ snapshot held open, 20 batches and then 10 times more leave the
    metadata tables (everything but the event tables; tick_head on its own, below) the same size once
    the metadata rotated: the dead versions of the state rows and the old ticks went with
    TRUNCATE.  Before the metadata was rotated (migrations 0017 and 0018) each receive and ack
    left a dead version of the subscription row that no VACUUM could free while the snapshot was
    held, and the second figure was hundreds of kB larger.  On a partitioned queue each receive
    also inserts and deletes stream marks: the rotation compacts them (without it the marks grew
    by about 100 kB here)."""
    setup(client, partitions)
    with psycopg.connect(dsn) as held, psycopg.connect(dsn, autocommit=True) as conn:
        held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT 1")  # the snapshot: the xmin horizon stays here until rollback
        xmin = conn.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                            (held.info.backend_pid,)).fetchone()
        assert xmin is not None and xmin[0] is not None
        assert traffic(client, 20) == 20 * 20 * 3
        rotate_metadata(client, conn)
        small = metadata_bytes(conn)
        head_before = conn.execute(TICK_HEAD_BYTES).fetchone()
        assert traffic(client, 200) == 200 * 20 * 3
        rotate_metadata(client, conn)
        large = metadata_bytes(conn)
        head_after = conn.execute(TICK_HEAD_BYTES).fetchone()
        # the state rows are back to one live version each, and only the last epochs' ticks are kept
        states = conn.execute("SELECT count(*) FROM pglogq.sub_state").fetchone()
        ticks = conn.execute("SELECT count(*) FROM pglogq.tick").fetchone()
        held.rollback()
    # a, b, c and its workers w1, w2; partitioned: a, b, c and their streams (workers take streams)
    assert states == ((5,) if partitions == 1 else (3 + 3 * partitions,))
    assert ticks is not None and ticks[0] <= 4  # two epochs' ticks and the copy of retain_tick
    assert large - small <= 8 * 8192, (small, large)
    # tick_head: a version a tick (203 ticks: 49,152 bytes more quiet, 81,920 beside two CPU
    # burners) until maint_compact_head compacted it
    assert head_before is not None and head_after is not None
    assert head_after[0] <= head_before[0], (head_before, head_after)


def test_state_and_tick_tables_shrink_when_the_metadata_rotates(client: pglogq.Client, dsn: str) -> None:
    """Under a held snapshot the current state partition grows with traffic (dead versions) and
    the ticks pile up; rotating the metadata empties them with TRUNCATE."""
    setup(client)
    state = ("SELECT coalesce(sum(pg_relation_size(c.oid)), 0) FROM pg_class c"
             " WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relname ~ '^sub_state_[01]$'")
    tick = "SELECT count(*) FROM pglogq.tick"
    with psycopg.connect(dsn) as held, psycopg.connect(dsn, autocommit=True) as conn:
        held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        held.execute("SELECT 1")
        traffic(client, 150)
        grown = (conn.execute(state).fetchone(), conn.execute(tick).fetchone())
        rotate_metadata(client, conn)
        shrunk = (conn.execute(state).fetchone(), conn.execute(tick).fetchone())
        held.rollback()
    assert grown[0] is not None and shrunk[0] is not None and shrunk[0][0] < grown[0][0], (grown, shrunk)
    assert grown[1] is not None and shrunk[1] is not None and shrunk[1][0] < grown[1][0], (grown, shrunk)


def test_a_snapshot_older_than_the_state_move_is_refused_with_40001(client: pglogq.Client, dsn: str) -> None:
    """TRUNCATE is not MVCC-safe.  A REPEATABLE READ transaction whose snapshot predates one move
    of the state rows still reads them as they were (the moved-from versions stay until the next
    switch), and a receive there fails with serialization_failure (the row it would update was
    moved); once a second switch has emptied that partition, every call fails with 40001 and our
    message -- never "no batch" or "unknown consumer".  A READ COMMITTED transaction open across
    the moves, and a new REPEATABLE READ one, find the moved row."""
    client.create_queue("q")
    client.subscribe("q", "c")
    sent = client.send("q", {"n": 1})
    client.tick("q", force=True)
    receive = "SELECT msg_id FROM pglogq.receive('q', 'c')"
    info_sql = "SELECT consumer_name, pending_events FROM pglogq.consumer_info('q', 'c')"

    def rotate(m: psycopg.Connection[Any]) -> None:
        assert m.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)

    def fresh_rr(rr: psycopg.Connection[Any]) -> None:
        rr.rollback()
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT 1")  # the snapshot predates the next move

    with psycopg.connect(dsn) as rr, psycopg.connect(dsn) as rc, psycopg.connect(dsn, autocommit=True) as m:
        fresh_rr(rr)
        rc.execute("SELECT 1")  # a READ COMMITTED transaction open across the moves
        rotate(m)
        assert rr.execute(info_sql).fetchall() == [("c", 1)]  # as of its snapshot
        with pytest.raises(psycopg.errors.SerializationFailure):
            rr.execute(receive)
        for call in (receive, info_sql):
            fresh_rr(rr)
            rotate(m)
            rotate(m)
            with pytest.raises(psycopg.errors.SerializationFailure) as info:
                rr.execute(call.encode())
            assert "moved by maintenance" in str(info.value)
            assert info.value.diag.message_hint is not None and "retry" in info.value.diag.message_hint
        rows = rc.execute(receive).fetchall()
        assert rows == [(sent,)]
        rc.rollback()
        rr.rollback()
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert rr.execute(receive).fetchall() == [(sent,)]
        rr.rollback()


def test_a_transaction_that_read_the_state_holds_the_move_off(client: pglogq.Client, dsn: str) -> None:
    """The move waits (within lock_timeout) for every transaction that has read the state: it
    gives up and leaves the rows where they are, nothing is lost, and the next switch moves them."""
    client.create_queue("q")
    client.subscribe("q", "c")
    sent = client.send("q", {"n": 1})
    client.tick("q", force=True)
    part = "SELECT state_part FROM pglogq.sub_state"
    with psycopg.connect(dsn) as rr, psycopg.connect(dsn, autocommit=True) as m:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        rr.execute("SELECT * FROM pglogq.consumer_info('q', 'c')")
        before = m.execute(part).fetchall()
        m.execute("SET lock_timeout = '50ms'")
        assert m.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        assert m.execute(part).fetchall() == before  # not moved
        assert rr.execute("SELECT msg_id FROM pglogq.receive('q', 'c')").fetchall() == [(sent,)]
        rr.rollback()
        # the rows are in the partition of the epoch after next: that switch moves nothing, the
        # one after moves them
        for _ in range(2):
            assert m.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        assert m.execute(part).fetchall() != before
    assert [msg.msg_id for msg in client.receive("q", "c")] == [sent]


def test_the_tick_tables_of_a_dropped_queue_go_at_the_next_switch(client: pglogq.Client, dsn: str) -> None:
    """drop_queue deletes the queue's ticks (cascade) and leaves its empty tick partitions; the
    next metadata switch drops them (a DROP in drop_queue would lock the parent tick table)."""
    client.create_queue("q")
    client.create_queue("keep")
    client.tick("q", force=True)
    tables = ("SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'pglogq'::regnamespace"
              " AND c.relkind IN ('r', 'p') AND c.relname ~ '^tick_[0-9]+'")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(tables).fetchone() == (8,)  # two queues: a partition and 3 slots each
        assert client.drop_queue("q", force=True)
        assert conn.execute("SELECT count(*) FROM pglogq.tick t JOIN pglogq.queue q USING (queue_id)"
                            " WHERE q.queue_name = 'q'").fetchone() == (0,)
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        assert conn.execute(tables).fetchone() == (4,)
    client.tick("keep", force=True)


STALE_READS = {
    "lookup": ("SELECT consumer, state FROM pglogq.lookup('q', %s)", [("c", "waiting")]),
    "consumer_info": ("SELECT consumer_name, pending_events FROM pglogq.consumer_info('q', 'c') WHERE %s > 0",
                      [("c", 1)]),
    "jobs": ("SELECT consumer, state, msg_id = %s FROM pglogq.jobs('q')", [("c", "waiting", True)]),
}


@pytest.mark.parametrize("call", sorted(STALE_READS))
def test_a_read_committed_statement_waiting_for_the_move_finds_the_state(
        client: pglogq.Client, dsn: str, call: str) -> None:
    """A READ COMMITTED statement takes its snapshot before the functions it calls lock the
    state: one that calls a read-only function while the move is in progress waits for the move's
    lock with a snapshot that does not see the moved rows.  It must still find the state as it
    was (the moved-from rows stay until the next switch), never an empty answer: CI once saw
    lookup() return no row at all while the ticker rotated the metadata."""
    client.create_queue("q")
    client.subscribe("q", "c")
    sent = client.send("q", {"n": 1})
    client.tick("q", force=True)
    sql, expected = STALE_READS[call]
    got: dict[str, Any] = {}
    with psycopg.connect(dsn) as m, psycopg.connect(dsn, autocommit=True) as r, \
            psycopg.connect(dsn, autocommit=True) as watch:
        assert m.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)  # locks held

        def read() -> None:
            try:
                got["rows"] = r.execute(sql.encode(), (sent,)).fetchall()
            except psycopg.Error as exc:  # reported below, not lost in the thread
                got["error"] = exc

        reader = threading.Thread(target=read)
        reader.start()
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'")
        deadline = time.monotonic() + 10
        while watch.execute(waiting, (r.info.backend_pid,)).fetchone() != (1,):
            assert time.monotonic() < deadline, "the reader never waited for the move's lock"
            time.sleep(0.01)
        m.commit()
        reader.join(10)
    assert "error" not in got, got
    assert got["rows"] == expected


def test_the_state_moves_both_ways_while_consumers_work(client: pglogq.Client, dsn: str) -> None:
    """Found by the 30-minute held-snapshot run: the switch locked the new partition first, the
    reverse of the order in which every query locks the two, so with receives running it gave up
    at every switch into partition 1 and the state stayed (and bloated) in partition 0.  With
    three consumers receiving and acknowledging all the time, the state moves into each partition
    again and again."""
    setup(client)
    stop = threading.Event()

    def produce() -> None:
        with pglogq.Client(dsn) as own:
            while not stop.is_set():
                own.send_batch("q", [{"k": k} for k in range(20)])
                own.tick("q", force=True)

    def consume(consumer: str, worker: str | None) -> None:
        with pglogq.Client(dsn) as own:
            while not stop.is_set():
                page = own.receive("q", consumer, worker=worker, max_messages=1)
                if page:
                    page.ack()

    workers = [threading.Thread(target=produce) for _ in range(2)]
    workers += [threading.Thread(target=consume, args=holder) for holder in HOLDERS]
    for w in workers:
        w.start()
    seen: set[int] = set()
    try:
        with psycopg.connect(dsn, autocommit=True) as m:
            for _ in range(20):
                time.sleep(0.02)
                assert m.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
                parts = m.execute("SELECT DISTINCT state_part FROM pglogq.sub_state").fetchall()
                if len(parts) == 1:
                    seen.add(parts[0][0])
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert seen == {0, 1}, seen


def _switch_age(conn: psycopg.Connection[Any], seconds: int) -> None:
    """Make the last metadata switch look ``seconds`` old."""
    conn.execute("SELECT setval('pglogq.meta_epoch_time', extract(epoch FROM clock_timestamp())::bigint - %s)",
                 (seconds,))


def test_the_metadata_switches_every_10_s_only_while_the_horizon_is_held(client: pglogq.Client, dsn: str) -> None:
    # a switch stalls every reader of the holder state while its TRUNCATEs run: it is made every
    # 10 s while a long transaction keeps the dead versions (only the switch frees them), else
    # every 5 minutes (vacuum frees them)
    setup(client)
    traffic(client, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.maint_rotate_meta(true)")
        _switch_age(conn, 5)
        assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (False,)
        _switch_age(conn, 60)
        assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (False,)  # nothing holds it
        with psycopg.connect(dsn) as held:
            held.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT count(*) FROM pglogq.queue")  # a snapshot: the horizon stays
            time.sleep(5.5)  # held for more than 5 s: a long transaction, not a short one
            _switch_age(conn, 5)
            assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (False,)  # 10 s apart at least
            _switch_age(conn, 11)
            assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (True,)
            held.rollback()
        _switch_age(conn, 299)
        assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (False,)
        _switch_age(conn, 301)
        assert conn.execute("SELECT pglogq.maint_rotate_meta()").fetchone() == (True,)


def test_listings_in_a_snapshot_older_than_the_tick_head_compaction_read_the_ticks(
        client: pglogq.Client, dsn: str) -> None:
    """maint_compact_head compacts tick_head with TRUNCATE, which is not MVCC-safe: a REPEATABLE READ
    transaction whose snapshot predates it finds no tick_head rows, and its listings then read the
    queues' ticks: the same figures as a new transaction's (a rate, unread and pending events)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    listing = ("SELECT q.events_per_second, c.lag_events, c.pending_events, c.last_tick"
               "  FROM pglogq.queue_info() q JOIN pglogq.consumer_info() c USING (queue_name)")
    with psycopg.connect(dsn) as old, psycopg.connect(dsn, autocommit=True) as conn:
        fresh = conn.execute(listing).fetchall()
        old.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        old.execute("SELECT 1")  # the snapshot, no lock on tick_head
        assert conn.execute("SELECT pglogq.maint_compact_head()").fetchone() == (True,)
        assert conn.execute("SELECT count(*) FROM pglogq.tick_head").fetchone() == (1,)
        assert old.execute("SELECT count(*) FROM pglogq.tick_head").fetchone() == (0,)  # compacted
        assert old.execute(listing).fetchall() == fresh
        old.rollback()
    assert fresh == [(3 / 60, 3, 3, 1)]


def test_the_compaction_of_tick_head_waits_for_no_tick_and_keeps_every_row(dsn: str) -> None:
    """maint_compact_head in a transaction of its own: listed right after the metadata switch,
    it writes every row back as it was; refused (false) when a transaction holds tick_head past
    its 100 ms, and outside READ COMMITTED (an older snapshot would write old rows back)."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as other:
        for name in ("a", "b"):
            conn.execute("SELECT pglogq.create_queue(%s)", (name,))
            conn.execute("SELECT pglogq.send(%s, '{}')", (name,))
            conn.execute("SELECT pglogq.force_tick(%s)", (name,))
        heads = "SELECT * FROM pglogq.tick_head ORDER BY queue_id"
        before = conn.execute(heads).fetchall()
        ops = [r[0] for r in conn.execute("SELECT op FROM pglogq.maint_operations()")
               if r[0] in ("meta", "head")]
        assert ops in ([], ["meta", "head"])  # together, meta first
        other.execute("SELECT count(*) FROM pglogq.tick_head")  # its lock held to the end
        assert conn.execute("SELECT pglogq.maint_run('head')").fetchone() == (0,)
        other.rollback()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            assert conn.execute("SELECT pglogq.maint_compact_head()").fetchone() == (False,)
        assert conn.execute("SELECT pglogq.maint_run('head')").fetchone() == (1,)
        assert conn.execute(heads).fetchall() == before
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pglogq.maint_run('head', 'a')")
        assert info.value.sqlstate == "PQ019"
