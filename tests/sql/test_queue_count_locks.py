"""A call on one queue locks the same relations whatever the number of other queues.

Each call runs in its own transaction; before the commit the locks its backend holds are counted
(pg_locks), after the deferred triggers the call left have run.  A plan over the partitioned
event or tick table that does not prune to the queue's own partitions locks every queue's
partitions (and their indexes): the count then grows with the queues, by about 25 a queue, and
a receive in a database of 150 queues ran out of the lock table.  The counts at 2 and at 50
queues must be equal.  Nothing here is timed.

receive reads the tick and event tables through copies of its functions made for each queue,
whose statements name the queue's own tables (generic plans that lock only those): at 2 and at
50 queues its count must be equal too, on a queue of one partition and on one of four.

The listings of every queue (queue_info(NULL), consumer_info(NULL, NULL)) read each queue's own
tables in a subtransaction that lets go of their locks: the locks their call holds at its end
must not grow with the queues either (they held about 20 a queue, and at 1,000 queues ran out of
the lock table).  Every queue of the test has a consumer behind its last tick and events ticked in
the last minute, so that the listings read every queue's ticks and event tables."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.db import QUEUE_COPIES

Conn = psycopg.Connection[Any]
LOCKS = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid()"


def _send(conn: Conn) -> int:
    row = conn.execute("SELECT pglogq.send('q', '{\"n\": 1}')").fetchone()
    assert row is not None
    return int(row[0])


def _page(conn: Conn) -> tuple[int, int]:
    """(batch_id, msg_id) of a page of the consumer of q."""
    _send(conn)
    conn.execute("SELECT pglogq.force_tick('q')")
    rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c', 100)").fetchall()
    assert rows
    return int(rows[-1][0]), int(rows[-1][1])


def _drain(conn: Conn) -> None:
    while rows := conn.execute("SELECT batch_id FROM pglogq.receive('q', 'c', 1000)").fetchall():
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))


def _ticked(conn: Conn) -> tuple[Any, ...]:
    _send(conn)
    conn.execute("SELECT pglogq.force_tick('q')")
    return ()


def _rotatable(conn: Conn) -> tuple[Any, ...]:
    """The queue's previous rotation finished and its consumer past a tick of events."""
    conn.execute("SELECT pglogq.maint_rotate_step2('q')")
    _ticked(conn)
    _drain(conn)
    return ()


_made = itertools.count()


def _new_queue(conn: Conn) -> tuple[Any, ...]:
    name = f"gone_{next(_made)}"
    conn.execute("SELECT pglogq.create_queue(%s)", (name,))
    return (name,)


def _lane_lease(conn: Conn) -> tuple[int, int, str]:
    """(batch_id, msg_id, txid) of a lease of one event that worker w of the share consumer sl
    (lanes) holds, cut from its lane's batch: what ack_receive's short way acknowledges."""
    conn.execute("SELECT pglogq.send_batch('q', array_fill('{}'::jsonb, ARRAY[40]))")
    conn.execute("SELECT pglogq.force_tick('q')")
    row = conn.execute("SELECT batch_id FROM pglogq.receive('q', 'sl', 1, 'w')").fetchone()
    assert row is not None
    conn.execute("SELECT pglogq.ack(%s)", (row[0],))
    rows = conn.execute("SELECT batch_id, msg_id, txid::text FROM pglogq.receive('q', 'sl', 1, 'w')").fetchall()
    assert rows
    return int(rows[0][0]), int(rows[0][1]), str(rows[0][2])


def _drain_lanes(conn: Conn) -> None:
    while rows := conn.execute("SELECT batch_id FROM pglogq.receive('q', 'sl', 1000, 'w')").fetchall():
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))


# name, statement, its arguments (made before the call's transaction), clean-up after it
CALLS: list[tuple[str, str, Callable[[Conn], tuple[Any, ...]], Callable[[Conn], None]]] = [
    ("send", "SELECT pglogq.send('q', '{}')", lambda c: (), lambda c: None),
    ("force_tick", "SELECT pglogq.force_tick('q')", lambda c: (_send(c),)[:0], _drain),
    ("receive", "SELECT * FROM pglogq.receive('q', 'c', 100)", _ticked, _drain),
    ("ack", "SELECT pglogq.ack(%s)", lambda c: _page(c)[:1], _drain),
    ("nack", "SELECT pglogq.nack(%s, %s, interval '1 hour')", _page, _drain),
    ("mark_started", "SELECT pglogq.mark_started(%s, %s)", _page, _drain),
    ("cancel", "SELECT pglogq.cancel('q', %s)", lambda c: (_send(c),), lambda c: None),
    ("lookup", "SELECT * FROM pglogq.lookup('q', %s)", lambda c: (_send(c),), lambda c: None),
    ("consumer_info(q)", "SELECT * FROM pglogq.consumer_info('q')", lambda c: (), lambda c: None),
    ("queue_info(q)", "SELECT * FROM pglogq.queue_info('q')", lambda c: (), lambda c: None),
    ("jobs(q)", "SELECT * FROM pglogq.jobs('q')", _ticked, _drain),
    ("seek", "SELECT pglogq.seek('q', 'c', 'latest')", _ticked, _drain),
    ("report_progress", "SELECT pglogq.report_progress(%s, %s, 50)", _page, _drain),
    ("request_stop", "SELECT pglogq.request_stop('q', %s)", lambda c: _page(c)[1:], _drain),
    ("maint_rotate_step1", "SELECT pglogq.maint_rotate_step1('q', true)", _rotatable, lambda c: None),
    ("drop_queue", "SELECT pglogq.drop_queue(%s)", _new_queue, lambda c: None),
    ("queue_info()", "SELECT * FROM pglogq.queue_info(NULL)", lambda c: (), lambda c: None),
    ("consumer_info()", "SELECT * FROM pglogq.consumer_info(NULL, NULL)", lambda c: (), lambda c: None),
    ("ack_receive (share, lanes)", "SELECT * FROM pglogq.ack_receive(%s, %s, %s::xid8, 'q', 'sl', 1, 'w')",
     _lane_lease, _drain_lanes),
]
# measured by a test of their own (each is called only where its test asks)
ALONE = {"receive", "queue_info()", "consumer_info()", "ack_receive (share, lanes)"}


def _counts(dsn: str, only: set[str] | None = None) -> dict[str, int]:
    out = {}
    for name, sql, prepare, after in CALLS:
        if (name not in only) if only is not None else (name in ALONE):
            continue
        # a new session per call, the call made 7 times: the first is in the count (what it
        # plans), and so are the later ones (after 5 custom plans a statement may switch to a
        # generic plan, which does not prune the partitions at plan time)
        most = 0
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(7):
                args = prepare(conn)
                with conn.transaction():
                    conn.execute(sql, args).fetchall()
                    # the deferred triggers (cancel's re-check) run now, not at COMMIT, so that
                    # the count holds their locks too
                    conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
                    row = conn.execute(LOCKS).fetchone()
                    assert row is not None
                    most = max(most, int(row[0]))
                after(conn)
        out[name] = most
    return out


def _grow(dsn: str, start: int, stop: int) -> None:
    """Queues other_<i>, each with a consumer and one ticked event."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(start, stop):
            with conn.transaction():
                conn.execute("SELECT pglogq.create_queue(%s)", (f"other_{i}",))
                conn.execute("SELECT pglogq.subscribe(%s, 'c')", (f"other_{i}",))
            conn.execute("SELECT pglogq.send(%s, '{}')", (f"other_{i}",))
            conn.execute("SELECT pglogq.force_tick(%s)", (f"other_{i}",))


def _grown(dsn: str, partitions: int, only: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """The calls whose lock count grew from 2 to 50 queues: name -> (at 2, at 50)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        if partitions > 1:
            conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', %s)", (str(partitions),))
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        if only is not None and "ack_receive (share, lanes)" in only:
            conn.execute("SELECT pglogq.subscribe('q', 'sl', share => true, lanes => true)")
    _grow(dsn, 1, 2)
    few = _counts(dsn, only)
    _grow(dsn, 2, 50)
    many = _counts(dsn, only)
    return {name: (few[name], many[name]) for name in few if many[name] > few[name]}


@pytest.mark.parametrize("partitions", [1, 4])
def test_locks_of_a_call_do_not_grow_with_the_queues(dsn: str, partitions: int) -> None:
    grew = _grown(dsn, partitions)
    assert not grew, f"locks at 2 queues -> at 50 queues: {grew}"


@pytest.mark.parametrize("partitions", [1, 4])
def test_locks_of_receive_do_not_grow_with_the_queues(dsn: str, partitions: int) -> None:
    grew = _grown(dsn, partitions, {"receive"})
    assert not grew, f"locks at 2 queues -> at 50 queues: {grew}"



def test_locks_of_a_share_workers_fused_ack_do_not_grow_with_the_queues(dsn: str) -> None:
    """ack_receive's short way (_share_step) runs in the queue's copy: its plans lock that queue's
    tables only."""
    grew = _grown(dsn, 1, {"ack_receive (share, lanes)"})
    assert not grew, f"locks at 2 queues -> at 50 queues: {grew}"


def test_locks_of_the_listings_do_not_grow_with_the_queues(dsn: str) -> None:
    grew = _grown(dsn, 1, {"queue_info()", "consumer_info()"})
    assert not grew, f"locks at 2 queues -> at 50 queues: {grew}"


def _copies(conn: Conn, queue: str) -> list[tuple[str, bool]]:
    """(name, open to PUBLIC or a pglogq role) of the copies of receive's functions of a queue."""
    return [(r[0], bool(r[1])) for r in conn.execute(
        "SELECT p.proname, EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
        "                          WHERE a.grantee = 0 OR a.grantee::regrole::text LIKE 'pglogq\\_%%')"
        "  FROM pg_proc p, pglogq.queue q WHERE q.queue_name = %s AND p.pronamespace = 'pglogq'::regnamespace"
        "   AND p.proname LIKE '\\_q' || q.queue_id || '\\_%%' ORDER BY 1", (queue,)).fetchall()]


def test_queue_copies_follow_the_queue(dsn: str) -> None:
    """The copies receive runs (see _queue_functions) are made with the queue, granted to nobody,
    kept by an install that changes nothing, made again by the first receive when they are of
    another install or missing, dropped with the queue."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        made = _copies(conn, "q")
        assert len(made) == QUEUE_COPIES and not any(open_ for _, open_ in made), made
        assert [name for name, _ in made if name.endswith("_receive")], made
        for _ in range(2):
            with pglogq.Client(dsn) as client:
                client.install_schema()
        assert _copies(conn, "q") == made
        _ticked(conn)
        assert len(conn.execute("SELECT * FROM pglogq.receive('q', 'c', 100)").fetchall()) == 1
        _drain(conn)
        # the layout and partitions change under the copies: they read the queue's tables anew
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '4')")
        _ticked(conn)
        assert len(conn.execute("SELECT * FROM pglogq.receive('q', 'c', 100)").fetchall()) == 1
        _drain(conn)
        # copies of an older install (another generation in their names), or none: the next
        # receive drops the old ones and makes them for the functions installed
        for name, _ in made:
            conn.execute(f"ALTER FUNCTION pglogq.{name} RENAME TO {name}_old".encode())
        assert _copies(conn, "q") != made
        _ticked(conn)
        assert len(conn.execute("SELECT * FROM pglogq.receive('q', 'c', 100)").fetchall()) == 1
        assert _copies(conn, "q") == made
        _drain(conn)
        conn.execute("SELECT pglogq._queue_functions(queue_id, false) FROM pglogq.queue")
        assert _copies(conn, "q") == []
        _ticked(conn)
        assert len(conn.execute("SELECT * FROM pglogq.receive('q', 'c', 100)").fetchall()) == 1
        assert _copies(conn, "q") == made
        _drain(conn)
        # dropped with the queue; a queue of the same name gets its own
        old = {name for name, _ in _copies(conn, "q")}
        conn.execute("SELECT pglogq.drop_queue('q', force => true)")
        left = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = ANY(%s)", (list(old),)).fetchone()
        assert left == (0,)
        conn.execute("SELECT pglogq.create_queue('q')")
        assert len(_copies(conn, "q")) == QUEUE_COPIES and not {name for name, _ in _copies(conn, "q")} & old
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT * FROM pglogq.receive('q', 'nobody', 100)")
        assert info.value.sqlstate == "PQ002"
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT * FROM pglogq.receive('gone', 'c', 100)")
        assert info.value.sqlstate == "PQ001"


def test_a_metadata_switch_locks_no_tick_table_of_a_queue_beyond_its_oldest_slot(dsn: str) -> None:
    """maint_rotate_meta visits every queue's oldest tick slot; it read each queue's newest tick
    with a static query of pglogq.tick whose plan went generic after five queues, and a generic
    plan locks every queue's tick partitions and indexes (the daemon's maintenance ran out of the
    lock table at 1,000 queues, then on every switch).  The queues made last (their oldest slot
    empty, passed at once) must hold no lock but on that slot."""
    _grow(dsn, 0, 10)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):  # a tick in every slot of the first ten queues
            for i in range(10):
                conn.execute("SELECT pglogq.force_tick(%s)", (f"other_{i}",))
            assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
    _grow(dsn, 10, 14)
    with psycopg.connect(dsn) as conn:
        late = [r[0] for r in conn.execute(
            "SELECT queue_id FROM pglogq.queue WHERE queue_name = ANY (%s)", ([f"other_{i}" for i in range(10, 14)],))]
        assert conn.execute("SELECT pglogq.maint_rotate_meta(true)").fetchone() == (True,)
        held = conn.execute(
            "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE l.pid = pg_backend_pid() AND c.relname ~ ('^tick_(' || array_to_string(%s::int[], '|') || ')_')"
            " ORDER BY 1", (late,)).fetchall()
        conn.rollback()
    tables = {name for (name,) in held if not name.endswith(("_pkey", "_idx"))}
    assert len(tables) <= len(late), held  # one slot each: the one the switch empties


def test_a_session_making_queues_keeps_no_compiled_copy_of_each(dsn: str) -> None:
    """Making a queue's copies compiles none of them in the session that makes them (PL/pgSQL's
    validator kept each copy it checked, ~2.5 MB a queue: a session that made 9,000 queues grew
    to 23 GB and was killed): the compiled functions of a session making queues do not grow."""
    compiled = "SELECT count(*) FROM pg_backend_memory_contexts WHERE name = 'PL/pgSQL function'"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('first')")
        before = conn.execute(compiled).fetchone()
        for i in range(6):
            conn.execute("SELECT pglogq.create_queue(%s)", (f"more_{i}",))
        after = conn.execute(compiled).fetchone()
    assert before is not None and after is not None
    assert after[0] - before[0] < QUEUE_COPIES, (before, after)  # it grew by QUEUE_COPIES a queue


def _making(dsn: str, start: int) -> dict[str, int]:
    """The most locks each step of making a queue held in one session that made seven: the
    later ones run where a statement may have switched to a generic plan."""
    steps = ("SELECT pglogq.create_queue(%s)", "SELECT pglogq.subscribe(%s, 'c')",
             "SELECT pglogq.send(%s, '{}')", "SELECT pglogq.force_tick(%s)")
    most = dict.fromkeys(steps, 0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(start, start + 7):
            for sql in steps:
                with conn.transaction():
                    conn.execute(sql, (f"made_{i}",))
                    row = conn.execute(LOCKS).fetchone()
                    assert row is not None
                    most[sql] = max(most[sql], int(row[0]))
    return most


def test_locks_of_making_a_queue_do_not_grow_with_the_queues(dsn: str) -> None:
    """create_queue, subscribe and the first send and tick, made over and over in one session as
    a service that makes a queue per tenant does: their locks at 50 queues are those at 2 (a
    generic plan of create_queue's read of its first tick locked every queue's tick tables, and a
    session growing a database to 10,000 queues ran out of the lock table at about 1,800)."""
    few = _making(dsn, 0)
    _grow(dsn, 7, 50)
    many = _making(dsn, 100)
    grew = {sql: (few[sql], many[sql]) for sql in few if many[sql] > few[sql]}
    assert not grew, f"locks at 7 queues -> at 57 queues: {grew}"


def _ticker_locks(dsn: str, look: int) -> int:
    """The locks one call of ticker() holds at its end, reading at most ``look`` queues, in a new
    session (no shortcut: every queue's id sequence is read)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pglogq.ticker_look', %s, false)", (str(look),))
        with conn.transaction():
            conn.execute("SELECT pglogq.ticker()")
            row = conn.execute(LOCKS).fetchone()
            assert row is not None
            return int(row[0])


def test_a_ticker_call_reads_a_bounded_number_of_queues(dsn: str) -> None:
    """A call of ticker() reads the id sequences of at most 1,000 queues (the session setting
    pglogq.ticker_look lowers it here), each read locking its sequence to the end of the call: a
    pass over 10,000 queues held 10,000 locks.  The next calls go on after them, so that an event
    sent to the last queue is ticked within a round of calls."""
    _grow(dsn, 0, 12)
    few = _ticker_locks(dsn, 5)
    _grow(dsn, 12, 30)
    assert _ticker_locks(dsn, 5) == few
    assert _ticker_locks(dsn, 1000) > few + 20  # all 30 read in one call
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pglogq.ticker_look', '5', false)")
        conn.execute("SELECT pglogq.send('other_29', '{}')")
        head = "SELECT h.tick_id FROM pglogq.tick_head h JOIN pglogq.queue q USING (queue_id)" \
               " WHERE q.queue_name = 'other_29'"
        before = conn.execute(head).fetchone()
        for _ in range(6):  # 30 queues, 5 a call
            conn.execute("SELECT pglogq.ticker()")
        assert conn.execute(head).fetchone() != before


def test_a_round_of_ticker_calls_is_a_whole_pass(dsn: str) -> None:
    """With more queues than a call reads, the round's last call counts as a whole pass: the
    daemon's next call is not cut short ('0'), and an idle call after it reads nothing (the
    shortcut state is kept); a send in between is still ticked by the next round."""
    _grow(dsn, 0, 20)
    poll = ("SELECT n, current_setting('pglogq.ticker_next', true), current_setting('pglogq.ticker_seen', true)"
            "  FROM (SELECT pglogq.ticker() AS n OFFSET 0) t")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('pglogq.ticker_look', '3', false)")
        conn.execute("SELECT set_config('pglogq.ticker_autocommit', 'on', false)")
        nexts = []
        for _ in range(8):  # 20 queues, 3 a call: a round is 7 calls
            row = conn.execute(poll).fetchone()
            assert row is not None
            nexts.append(row[1])
            if row[1] == "0":
                break
        assert nexts[-1] == "0" and len(nexts) == 7, nexts
        assert row[2], "the round's last call keeps the shortcut state"
        row = conn.execute(poll).fetchone()
        assert row is not None and row[0] == 0 and row[1] == "0" and row[2], row  # read nothing
        conn.execute("SELECT pglogq.send('other_19', '{}')")
        head = ("SELECT h.tick_id FROM pglogq.tick_head h JOIN pglogq.queue q USING (queue_id)"
                " WHERE q.queue_name = 'other_19'")
        before = conn.execute(head).fetchone()
        for _ in range(8):
            conn.execute(poll)
        assert conn.execute(head).fetchone() != before
