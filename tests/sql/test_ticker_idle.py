"""The ticker's pass over all queues costs the queues with something to do, not the idle ones.

A queue's last tick is kept in one row of pglogq.tick_head with quiet_seq, the id sequence's
value below which every event is in a tick.  pglogq.ticker() reads the event and tick tables (and
so plans and locks their partitions) only of a queue whose sequence moved past it, whose tick was
written while a send was in flight, or whose keep-alive is due.  Counted here: the partitions an
idle pass locks (none), the ticks written, and that no event is left unticked by the shortcuts
(a send in flight at the tick, a pumped retry, a replayed dead letter keep their older ids).
maint_operations lists prune and release only for queues that have something of theirs.
Nothing here is timed.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

Conn = psycopg.Connection[Any]

# relation locks of this session on any queue's tick or event partitions (or their indexes)
PARTITION_LOCKS = (
    "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
    " WHERE l.pid = pg_backend_pid() AND c.relname ~ '^(event|tick)_[0-9]' AND c.relkind <> 'S'"
)
TICKS = "SELECT count(*) FROM pglogq.tick"


def _queues(conn: Conn, n: int) -> None:
    """Queues q_0 .. q_<n-1>, each with a consumer and one ticked event."""
    for i in range(n):
        with conn.transaction():
            conn.execute("SELECT pglogq.create_queue(%s)", (f"q_{i}",))
            conn.execute("SELECT pglogq.subscribe(%s, 'c')", (f"q_{i}",))
        conn.execute("SELECT pglogq.send(%s, '{}')", (f"q_{i}",))
        conn.execute("SELECT pglogq.force_tick(%s)", (f"q_{i}",))


def _one(conn: Conn, sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def _pass(conn: Conn) -> tuple[int, int]:
    """(ticks written, partition locks held) of one ticker() call in its own transaction."""
    with conn.transaction():
        n = int(_one(conn, "SELECT pglogq.ticker()"))
        return n, int(_one(conn, PARTITION_LOCKS))


def _drain(conn: Conn, queue: str) -> list[Any]:
    """The payloads of every batch of consumer c of the queue (received and acknowledged)."""
    got = []
    while rows := conn.execute("SELECT batch_id, payload FROM pglogq.receive(%s, 'c', 100)", (queue,)).fetchall():
        got += [r[1] for r in rows]
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
    return got


def _catch_up(conn: Conn) -> None:
    while int(_one(conn, "SELECT pglogq.ticker()")):
        pass


def test_an_idle_pass_locks_no_partition_and_writes_no_tick(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 30)
        _catch_up(conn)
        ticks = _one(conn, TICKS)
        for _ in range(3):
            assert _pass(conn) == (0, 0)
        assert _one(conn, TICKS) == ticks
        # a send to one queue: that queue is ticked, and only its partitions are locked
        conn.execute("SELECT pglogq.send('q_7', '{}')")
        with conn.transaction():
            assert _one(conn, "SELECT pglogq.ticker()") == 1
            names = {r[0] for r in conn.execute(
                "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                " WHERE l.pid = pg_backend_pid() AND c.relname ~ '^(event|tick)_[0-9]' AND c.relkind <> 'S'"
            ).fetchall()}
        qid = _one(conn, "SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q_7'")
        assert names and all(n.split("_")[1] == str(qid) for n in names), names
        assert _pass(conn) == (0, 0)


def test_a_pass_looks_at_a_bounded_number_of_queues(dsn: str) -> None:
    """Keep-alives of many queues falling due together take several calls, each bounded, in
    turn: every queue is ticked once before any twice."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 50)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 microsecond'")
        before = dict(conn.execute("SELECT queue_id, tick_id FROM pglogq.tick_head").fetchall())
        assert [_pass(conn)[0] for _ in range(3)] == [20, 20, 20]
        after = dict(conn.execute("SELECT queue_id, tick_id FROM pglogq.tick_head").fetchall())
        ticked = sorted(after[q] - before[q] for q in before)
        assert ticked == [1] * 40 + [2] * 10  # the third call: the last 10, then from the first again


def test_a_keep_alive_of_an_idle_queue_reads_no_partition(dsn: str) -> None:
    """A keep-alive of a queue whose last tick was quiet at its sequence's value takes the last
    tick from tick_head: it reads (and plans) none of the queue's tick or event partitions, and
    the tick it writes carries the same event total (it closes none).  At 1,000 idle queues a
    keep-alive falls due 16 times a second; each planned its reads afresh (1-2 ms)."""
    reads = ("SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_xact_user_tables"
             " WHERE schemaname = 'pglogq' AND relname ~ '^(event|tick)_[0-9]'")
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 5)
        _catch_up(conn)  # a quiet tick on each (its tick_head holds the event total)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 microsecond'")
        totals = dict(conn.execute("SELECT queue_id, tick_event_total FROM pglogq.tick_head").fetchall())
        assert set(totals.values()) == {1}
        for _ in range(3):
            with conn.transaction():
                before = _one(conn, reads)
                assert _one(conn, "SELECT pglogq.ticker()") == 5
                assert _one(conn, reads) - before == 0
                # the tick's insert: the queue's tick table and the slot it goes to, nothing else
                assert _one(conn, PARTITION_LOCKS) <= 2 * 5
        # what tick_head says is what the tick table holds (read here, outside the ticker)
        rows = conn.execute(
            "SELECT h.tick_id = t.tick_id AND h.tick_event_total = t.tick_event_total"
            "       AND h.tick_xmax = pg_snapshot_xmax(t.tick_snapshot) AND h.tick_time = t.tick_time"
            "  FROM pglogq.tick_head h"
            "  JOIN LATERAL (SELECT * FROM pglogq.tick x WHERE x.queue_id = h.queue_id"
            "                 ORDER BY x.tick_id DESC LIMIT 1) t ON true").fetchall()
        assert rows == [(True,)] * 5
        # a send after all that: the next keep-alive is no longer idle, and closes the event
        conn.execute("SELECT pglogq.send('q_3', '{\"after\": 1}')")
        assert _one(conn, "SELECT pglogq.ticker()") == 5
        assert _one(conn, "SELECT h.tick_event_total FROM pglogq.tick_head h JOIN pglogq.queue q USING (queue_id)"
                          " WHERE q.queue_name = 'q_3'") == 2
        assert {"after": 1} in _drain(conn, "q_3")


def test_a_tick_of_events_reads_the_event_table_only_and_tick_head_holds_its_snapshot(dsn: str) -> None:
    """A tick that closes events takes the last tick from tick_head (its xip too): it reads no
    tick partition, and the event table once (the events it closes), where it read the tick
    table and the event table twice (each read an EXECUTE planned afresh).  Then tick_head holds
    what the tick table holds, the transactions running at the tick included."""
    tick_reads = ("SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0) FROM pg_stat_xact_user_tables"
                  " WHERE schemaname = 'pglogq' AND relname ~ '^tick_[0-9]'")
    event_reads = ("SELECT coalesce(sum(coalesce(idx_scan, 0)), 0) FROM pg_stat_xact_user_tables"
                   " WHERE schemaname = 'pglogq' AND relname ~ '^event_[0-9]+_[0-9]+$'")
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as open_tx:
        _queues(conn, 2)
        _catch_up(conn)
        open_tx.execute("SELECT pg_current_xact_id()")  # running at the next tick: in its xip
        conn.execute("SELECT pglogq.send('q_1', '{\"first\": 1}')")
        assert _one(conn, "SELECT pglogq.ticker()") == 1
        open_tx.commit()
        for n in range(3):
            conn.execute("SELECT pglogq.send('q_1', %s)", (Jsonb({"n": n}),))
            with conn.transaction():
                ticks, events = _one(conn, tick_reads), _one(conn, event_reads)
                assert _one(conn, "SELECT pglogq.ticker()") == 1
                assert _one(conn, tick_reads) - ticks == 0
                # the count of the events it closes: one probe of each of the queue's event
                # partitions for each of its two parts, not a count before the snapshot too
                assert 0 < _one(conn, event_reads) - events <= 2 * _one(
                    conn, "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhparent"
                          " WHERE c.relname = 'event_' || (SELECT queue_id FROM pglogq.queue"
                          "                                WHERE queue_name = 'q_1')")
        rows = conn.execute(
            "SELECT h.tick_id = t.tick_id AND h.tick_xmax = pg_snapshot_xmax(t.tick_snapshot)"
            "       AND h.tick_xip = ARRAY(SELECT pg_snapshot_xip(t.tick_snapshot))"
            "  FROM pglogq.tick_head h"
            "  JOIN LATERAL (SELECT * FROM pglogq.tick x WHERE x.queue_id = h.queue_id"
            "                 ORDER BY x.tick_id DESC LIMIT 1) t ON true").fetchall()
        assert rows == [(True,)] * 2
        assert [p for p in _drain(conn, "q_1") if p != {}] == [{"first": 1}, {"n": 0}, {"n": 1}, {"n": 2}]


def test_a_send_committed_after_the_ticking_transaction_read_tick_head_is_ticked(dsn: str) -> None:
    """The ticking transaction read the queue's tick_head while it was idle; a send commits
    before _tick runs: the sequence moved, so the tick is not a keep-alive and closes the event
    (and the event total counts it).  (The narrower window, an id drawn inside _tick between its
    read of the sequence and its snapshot, is closed by _tick's second read of the sequence
    after the snapshot; no call from outside can stop _tick in between.)"""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as other:
        _queues(conn, 1)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 microsecond'")
        with conn.transaction():
            # the ticking transaction reads tick_head (idle) ...
            qid = _one(conn, "SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q_0'")
            assert _one(conn, "SELECT quiet_seq FROM pglogq.tick_head WHERE queue_id = %s", (qid,)) is not None
            # ... a send commits before its tick is taken (READ COMMITTED: the tick sees it)
            other.execute("SELECT pglogq.send('q_0', '{\"between\": 1}')")
            assert _one(conn, "SELECT pglogq._tick(%s, false)", (qid,)) is not None
        assert _one(conn, "SELECT tick_event_total FROM pglogq.tick_head WHERE queue_id = %s", (qid,)) == 2
        assert {"between": 1} in _drain(conn, "q_0")


def test_a_pass_says_how_many_of_its_ticks_closed_events(dsn: str) -> None:
    """pglogq.ticker_flow: the ticks of the last call that closed events, keep-alives not counted
    (the daemon keeps its busy pace only while events flow)."""
    flow = "SELECT current_setting('pglogq.ticker_flow')"
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 3)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 microsecond'")
        assert _one(conn, "SELECT pglogq.ticker()") == 3  # three keep-alives
        assert _one(conn, flow) == "0"
        conn.execute("SELECT pglogq.send('q_1', '{}')")
        conn.execute("SELECT pglogq.send_batch('q_2', ARRAY['{}', '{}']::jsonb[])")
        assert _one(conn, "SELECT pglogq.ticker()") == 3
        assert _one(conn, flow) == "2"
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 hour'")
        assert _one(conn, "SELECT pglogq.ticker()") == 0
        assert _one(conn, flow) == "0"


def test_the_first_pass_of_a_new_session_ticks_what_waits(dsn: str) -> None:
    # the shortcut keeps the last pass's snapshot in a session setting: a session that has none
    # yet (the daemon's first pass, `pglogq-ticker --once`, pg_cron's call) must look at every
    # queue with something new, not read the missing setting as "nothing ended since"
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 2)
        conn.execute("SELECT pglogq.send('q_1', '{\"n\": 2}')")
    with psycopg.connect(dsn, autocommit=True) as fresh:
        assert _one(fresh, "SELECT current_setting('pglogq.ticker_seen', true)") is None
        assert _one(fresh, "SELECT pglogq.ticker()") == 1
        assert {"n": 2} in _drain(fresh, "q_1")


def test_a_send_in_flight_at_the_tick_is_ticked_after_its_commit(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as sender:
        _queues(conn, 3)
        _catch_up(conn)
        sender.execute("SELECT pglogq.send('q_1', '{\"late\": 1}')")  # its id drawn, not committed
        conn.execute("SELECT pglogq.send('q_1', '{}')")
        assert _one(conn, "SELECT pglogq.ticker()") == 1  # written while the first send is in flight
        assert _one(conn, "SELECT quiet_seq FROM pglogq.tick_head h JOIN pglogq.queue q USING (queue_id)"
                          " WHERE q.queue_name = 'q_1'") is None
        sender.commit()
        assert _one(conn, "SELECT pglogq.ticker()") == 1
        assert _pass(conn) == (0, 0)
        assert {"late": 1} in _drain(conn, "q_1")


def test_a_poll_while_only_an_uncommitted_send_waits_writes_no_tick_and_draws_no_xid(dsn: str) -> None:
    # the queue stays due poll after poll while a producer's transaction holds a drawn id: such
    # a poll counts what it could close (nothing committed), writes nothing and, in a
    # transaction that had no xid, draws none (it would burn one per poll)
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as sender:
        _queues(conn, 2)
        _catch_up(conn)
        sender.execute("SELECT pglogq.send('q_0', '{\"open\": 1}')")
        ticks = int(_one(conn, TICKS))
        for _ in range(3):
            _one(conn, "SELECT pg_current_xact_id()")  # a commit: the pass looks at the queues again
            with conn.transaction():
                assert _one(conn, "SELECT pglogq.ticker()") == 0
                assert _one(conn, "SELECT pg_current_xact_id_if_assigned()") is None
        assert int(_one(conn, TICKS)) == ticks
        sender.commit()
        assert _one(conn, "SELECT pglogq.ticker()") == 1
        assert {"open": 1} in _drain(conn, "q_0")


def test_pumped_events_are_ticked(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 3)
        _catch_up(conn)
        # a due delayed send keeps its older id: the pump draws one to say the queue has work
        conn.execute("SELECT pglogq.send('q_2', '{\"d\": 1}', delay => interval '1 second')")
        _catch_up(conn)
        conn.execute("UPDATE pglogq.delayed SET deliver_at = now() - interval '1 second'")
        assert _one(conn, "SELECT pglogq.maint_pump()") == 1
        assert _one(conn, "SELECT pglogq.ticker()") == 1
        assert {"d": 1} in _drain(conn, "q_2")
        assert _pass(conn) == (0, 0)


def test_maintenance_lists_no_prune_or_release_for_idle_queues(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 20)
        ops = {r[0] for r in conn.execute("SELECT op FROM pglogq.maint_operations()").fetchall()}
        assert not ops & {"prune", "release"}, ops
        conn.execute("SELECT pglogq.cancel('q_3', pglogq.send('q_3', '{}'))")
        rows = conn.execute("SELECT op, queue_name FROM pglogq.maint_operations() WHERE op = 'prune'").fetchall()
        assert rows == [("prune", "q_3")]


# one implicit transaction: the pass, then whether it locked the event table (every pass that
# reads the queues takes that lock first)
PASS_LOCKING = ("SELECT pglogq.ticker();"
                " SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation'"
                "    AND relation = 'pglogq.event'::regclass")


def _pass_locking(conn: Conn) -> tuple[int, bool]:
    """(ticks written, whether the pass read the queues) of one ticker() call in autocommit."""
    cur = conn.execute(PASS_LOCKING)
    row = cur.fetchone()
    assert row is not None and cur.nextset()
    locked = cur.fetchone()
    assert locked is not None
    return int(row[0]), bool(locked[0])


def _age(conn: Conn, *queues: str) -> None:
    """Make the keep-alives of these queues due (their last tick two hours old)."""
    conn.execute("UPDATE pglogq.tick_head SET tick_time = tick_time - interval '2 hours'"
                 " WHERE queue_id IN (SELECT queue_id FROM pglogq.queue WHERE queue_name = ANY (%s))",
                 (list(queues),))


AUTOCOMMIT = "SELECT set_config('pglogq.ticker_autocommit', 'on', false)"


def test_a_pass_after_the_ticker_s_own_keep_alives_reads_no_queue(dsn: str) -> None:
    """The daemon's pass commits its keep-alives; the next pass, with nothing else ended on the
    server and no keep-alive due, reads no table.  (Its own commit made every next pass read every
    queue's row and sequence: 2 ms, 5 times a second at 1,000 idle queues.)  A commit anywhere on
    the server makes a pass read the queues: tried until one pair of passes has none between.
    Only a session that says it runs each call in a transaction of its own (the daemon's setting)
    takes its commit for the pass's own: another one reads the queues after it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 5)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 hour'")
        _age(conn, "q_0")
        assert _pass_locking(conn) == (1, True)
        assert _pass_locking(conn) == (0, True)  # its own commit, not said to be alone: read
        conn.execute(AUTOCOMMIT)
        seen = []
        for _ in range(20):
            _age(conn, "q_1", "q_3")
            assert _pass_locking(conn) == (2, True)  # the two keep-alives, this call's own commit
            seen.append(_pass_locking(conn))
            if seen[-1] == (0, False):
                break
        assert seen[-1] == (0, False), seen
        # and a keep-alive that falls due is written: the pass reads the queues again
        _age(conn, "q_4")
        assert _pass_locking(conn) == (1, True)


def test_a_commit_the_shortcut_did_not_see_is_ticked(dsn: str) -> None:
    """Attack (ticker shortcut): a send running at a pass, committed after passes that read
    nothing, is ticked by the next pass; so is a send of this same session after its pass, in its
    own transaction or in the ticking transaction itself."""
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as sender:
        _queues(conn, 3)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 hour'")
        sender.execute("SELECT pglogq.send('q_2', '{\"running\": 1}')")  # its xid running from here
        _pass_locking(conn)
        _pass_locking(conn)
        sender.commit()
        assert _pass_locking(conn) == (1, True)
        assert {"running": 1} in _drain(conn, "q_2")
        _catch_up(conn)
        # this session, after its pass, in a transaction of its own
        _pass_locking(conn)
        conn.execute("SELECT pglogq.send('q_0', '{\"mine\": 1}')")
        assert _pass_locking(conn)[0] == 1
        assert {"mine": 1} in _drain(conn, "q_0")
        _catch_up(conn)
        # ... and in the transaction that ran the pass, in a session that does not say it runs
        # each call alone
        with conn.transaction():
            _one(conn, "SELECT pglogq.ticker()")
            conn.execute("SELECT pglogq.send('q_1', '{\"same\": 1}')")
        assert _pass_locking(conn)[0] == 1
        assert {"same": 1} in _drain(conn, "q_1")
        _catch_up(conn)
        # a session that says so, whose transaction wrote before the call: not taken for its own
        conn.execute(AUTOCOMMIT)
        _age(conn, "q_0")
        with conn.transaction():
            conn.execute("SELECT pglogq.send('q_2', '{\"before\": 1}')")
            _one(conn, "SELECT pglogq.ticker()")
        assert _pass_locking(conn)[0] >= 1
        assert {"before": 1} in _drain(conn, "q_2")


def test_a_whole_pass_keeps_when_the_next_keep_alive_falls_due(dsn: str) -> None:
    """The shortcut's due time is the soonest keep-alive plus its grace (a tenth of the idle
    period, at most a second): what tick_head says, not a guess."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 4)
        _catch_up(conn)
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '5 seconds' WHERE queue_name = 'q_2'")
        conn.execute("UPDATE pglogq.queue SET ticker_idle_period = interval '1 hour' WHERE queue_name <> 'q_2'")
        _one(conn, "SELECT pglogq.ticker()")
        due = _one(conn, "SELECT to_timestamp(split_part(current_setting('pglogq.ticker_seen'), '/', 3)::float8)")
        want = _one(conn, "SELECT min(h.tick_time + x.ticker_idle_period"
                          "           + least(interval '1 second', x.ticker_idle_period / 10))"
                          "  FROM pglogq.tick_head h JOIN pglogq.queue x USING (queue_id)")
        assert abs((due - want).total_seconds()) < 1e-5
        # q_2's: 5 s and half a second of grace after its last tick
        assert want == _one(conn, "SELECT h.tick_time + interval '5.5 seconds' FROM pglogq.tick_head h"
                                  " JOIN pglogq.queue x USING (queue_id) WHERE x.queue_name = 'q_2'")


def test_maintenance_lists_the_metadata_switch_only_when_it_is_due(dsn: str) -> None:
    """10 s after a switch with nothing holding the xmin horizon back, the switch is not due (5
    minutes): maint_operations no longer lists it, where it listed it on every pass and the
    daemon ran maint_run('meta') twice a second for nothing.  Listed after 5 minutes.  (The 10 s
    of a held horizon: tests/sql/test_held_snapshot.py, through the same rule, pglogq._meta_due.)"""
    ops = "SELECT count(*) FROM pglogq.maint_operations() WHERE op = 'meta'"
    ago = "SELECT setval('pglogq.meta_epoch_time', extract(epoch FROM clock_timestamp())::bigint - %s)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        _queues(conn, 2)
        conn.execute(ago, (20,))
        assert _one(conn, ops) == 0
        assert _one(conn, "SELECT pglogq.maint_rotate_meta()") is False
        conn.execute(ago, (400,))
        assert _one(conn, ops) == 1
        assert _one(conn, "SELECT pglogq.maint_rotate_meta()") is True
        assert _one(conn, ops) == 0
