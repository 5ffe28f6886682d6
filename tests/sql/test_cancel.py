"""cancel(): what "handed" means, how long a cancellation lasts, and what it must never block.

Regression tests of three defects an outside review found: a cancellation that did not last,
"handed" read as "passed by a cursor", and cancel blocking consumers (the older cancel tests are
in tests/sql/test_send_options.py).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pglogq
from tests.support.concurrent import Call
from tests.support.db import TableReads
from tests.support.draining import drain
from tests.support.maintenance import rotate_all


def ids(msgs: list[pglogq.Message]) -> list[int]:
    return [m.msg_id for m in msgs]


def setup_queue(client: pglogq.Client, consumers: tuple[str, ...] = ("a",)) -> None:
    client.create_queue("q")
    for c in consumers:
        client.subscribe("q", c)


# -- a cancellation lasts as long as the event can be delivered -------------------


def test_cancelled_event_is_not_replayed_after_prune(client: pglogq.Client, dsn: str) -> None:
    """Regression: cancel() said "never delivered"; maint_prune then removed the marker and
    seek(to => 'earliest') delivered the event."""
    setup_queue(client)
    e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
    assert client.cancel("q", e) is True
    client.tick("q", force=True)
    assert ids(drain(client, "q", "a")) == [f]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.maint_prune('q')")
        client.maintain()
        conn.execute("SELECT pglogq.maint_run('prune', 'q')")
    client.seek("q", "a", to="earliest")
    assert ids(drain(client, "q", "a")) == [f]
    assert client.cancel("q", e) is False  # already cancelled


def test_cancel_marker_goes_with_the_truncated_table(client: pglogq.Client, dsn: str) -> None:
    """The marker is removed only once the event's child table has been truncated."""
    setup_queue(client)
    e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
    assert client.cancel("q", e) is True
    assert ids(rotate_all(client, dsn, "q", ["a"], times=1)) == [f]
    client.maintain()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT msg_id FROM pglogq.cancelled").fetchall() == [(e,)]
    rotate_all(client, dsn, "q", ["a"], times=3)  # every table truncated once
    client.maintain()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.cancelled").fetchone() == (0,)


# -- "handed" means returned by receive, not passed by a cursor ------------------


def test_cancel_after_a_new_consumer_subscribed(client: pglogq.Client) -> None:
    """Regression: a consumer subscribing after the event's tick made cancel() refuse, and the
    older consumer, who never received it, still got it."""
    setup_queue(client)
    e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    client.subscribe("q", "b")
    assert client.cancel("q", e) is True
    assert ids(drain(client, "q", "a")) == [f]
    assert ids(drain(client, "q", "b")) == []


def test_cancel_after_a_consumer_seeked_past_it(client: pglogq.Client) -> None:
    """Regression: seeking past an event does not hand it."""
    setup_queue(client, ("a", "b"))
    e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    client.seek("q", "b", to="latest")
    assert client.cancel("q", e) is True
    assert ids(drain(client, "q", "a")) == [f]
    client.seek("q", "b", to="earliest")  # replay: the cancelled event stays out
    assert ids(drain(client, "q", "b")) == [f]


def test_an_event_received_before_a_seek_back_stays_handed(client: pglogq.Client) -> None:
    """Handed is a fact of the past: seeking back before an event does not un-hand it."""
    setup_queue(client, ("a", "b"))
    e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    page = client.receive("q", "b", max_messages=1)
    assert ids(list(page)) == [e]
    client.seek("q", "b", to="earliest", force=True)  # drops the open batch: e was returned
    assert client.cancel("q", e) is False
    assert client.cancel("q", f) is False  # in b's dropped open batch: counted as handed
    assert ids(drain(client, "q", "a")) == [e, f]


def test_a_skip_then_a_replay_hands_the_event(client: pglogq.Client) -> None:
    """A consumer that seeked past an event and then replayed it was handed it."""
    setup_queue(client)
    (e,) = client.send_batch("q", [{"n": 1}])
    client.tick("q", force=True)
    client.seek("q", "a", to="latest")
    client.seek("q", "a", to="earliest")
    assert ids(drain(client, "q", "a")) == [e]
    assert client.cancel("q", e) is False


# -- cancel in an open transaction blocks no consumer ----------------------------


def test_cancel_in_an_open_transaction_blocks_no_consumer(client: pglogq.Client, dsn: str) -> None:
    """Regression: cancel() held FOR SHARE on every subscription row until commit."""
    setup_queue(client, ("a", "b"))
    e, f, g = client.send_batch("q", [{"n": 1}, {"n": 2}, {"n": 3}])
    client.tick("q", force=True)
    page = client.receive("q", "b", max_messages=1)
    with psycopg.connect(dsn) as producer:
        assert client.cancel("q", g, conn=producer) is True
        # receive, ack, heartbeat, nack of other consumers do not wait for the producer
        work = Call(
            dsn,
            lambda c: (
                c.execute("SELECT pglogq.heartbeat(%s)", (page.id,)).fetchone(),
                c.execute(
                    "SELECT pglogq.ack(%s, %s, %s::xid8)", (page.id, page.messages[-1].msg_id, page.messages[-1].txid)
                ).fetchone(),
                c.execute("SELECT msg_id FROM pglogq.receive('q', 'a', 1)").fetchall(),
            ),
        )
        work.start()
        out = work.outcome()
        assert out[2] == [(e,)]
        producer.commit()
    assert ids(drain(client, "q", "a")) == [e, f]  # e's page again (not acked), then f; g cancelled
    assert ids(drain(client, "q", "b")) == [f]


def test_an_event_handed_before_the_cancel_commits_fails_the_commit(client: pglogq.Client, dsn: str) -> None:
    """The other side of cancel blocking no consumer: nobody waits, so a consumer handed the event while the
    cancelling transaction was open makes that transaction's COMMIT fail (PQ035); the event is
    delivered normally."""
    setup_queue(client)
    (e,) = client.send_batch("q", [{"n": 1}])
    client.tick("q", force=True)
    with psycopg.connect(dsn) as producer:
        assert client.cancel("q", e, conn=producer) is True
        assert ids(list(client.receive("q", "a"))) == [e]
        with pytest.raises(psycopg.Error) as err:
            producer.commit()
        assert err.value.sqlstate == "PQ035"
    assert client.cancel("q", e) is False


def test_cancel_and_its_commit_check_run_the_queues_copy(client: pglogq.Client, dsn: str) -> None:
    """cancel and the re-check at COMMIT answer through the queue's copies (_queue_functions),
    whose generic plans are cached for the session: the shared bodies planned every statement on
    every call (a mass cancel of 4,000 events spent 42 s in the COMMIT alone)."""
    setup_queue(client)
    sent = client.send_batch("q", [{"n": i} for i in range(20)])
    client.tick("q", force=True)
    with psycopg.connect(dsn) as conn:
        conn.execute("SET track_functions = 'all'")
        for e in sent:
            assert conn.execute("SELECT pglogq.cancel('q', %s)", (e,)).fetchone() == (True,)
        conn.commit()
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.commit()
        calls = dict(conn.execute(
            "SELECT regexp_replace(funcname, '^_q[0-9]+_[0-9a-f]+_', 'copy:'), calls FROM pg_stat_user_functions "
            "WHERE schemaname = 'pglogq' AND funcname ~ '(^|_)(cancel|_cancel_handed)$'").fetchall())
    # every answer is the copy's: 20 in cancel, 20 at COMMIT
    assert calls.get("copy:cancel") == 20 and calls.get("copy:_cancel_handed") == 40, calls
    assert ids(drain(client, "q", "a")) == []


def test_cancel_without_the_queues_copy_answers_the_same(client: pglogq.Client, dsn: str) -> None:
    """Copies dropped (as after an install that changed the functions, before the queue's next
    receive): the shared bodies answer, with the same answers, the commit check included."""
    setup_queue(client)
    (e, f, g) = client.send_batch("q", [{"n": 1}, {"n": 2}, {"n": 3}])
    client.tick("q", force=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq._queue_functions(queue_id, false) FROM pglogq.queue")
    assert client.cancel("q", g) is True
    with psycopg.connect(dsn) as producer:
        assert client.cancel("q", e, conn=producer) is True
        assert ids(list(client.receive("q", "a", max_messages=1))) == [e]
        with pytest.raises(psycopg.Error) as err:
            producer.commit()
        assert err.value.sqlstate == "PQ035"
    assert client.cancel("q", e) is False
    with psycopg.connect(dsn) as conn:
        made = conn.execute("SELECT count(*) FROM pg_proc WHERE proname ~ '^_q[0-9]+_'").fetchone()
    assert made is not None and made[0] > 0  # that receive made them again
    assert client.cancel("q", f) is True  # after the page of e: not handed; through the new copy
    assert ids(drain(client, "q", "a")) == [e]
def test_cancel_conflict_maps_to_its_class() -> None:
    assert pglogq.errors.BY_SQLSTATE["PQ035"] is pglogq.CancelConflict


def test_cancel_as_a_writer_login_in_an_open_transaction(client: pglogq.Client, dsn: str) -> None:
    """The check at COMMIT runs as the session's role: a pglogq_writer login must get the same
    answers (and PQ035) as a superuser, with no lock held meanwhile."""
    name = f"pglogq_test_writer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
        conn.execute(f'GRANT pglogq_writer TO "{name}"')
    try:
        setup_queue(client)
        e, f = client.send_batch("q", [{"n": 1}, {"n": 2}])
        client.tick("q", force=True)
        with psycopg.connect(make_conninfo(dsn, user=name)) as writer:
            assert writer.execute("SELECT pglogq.cancel('q', %s)", (f,)).fetchone() == (True,)
            writer.commit()
            assert writer.execute("SELECT pglogq.cancel('q', %s)", (e,)).fetchone() == (True,)
            assert ids(list(client.receive("q", "a"))) == [e]  # not blocked; hands e
            with pytest.raises(psycopg.Error) as err:
                writer.commit()
            assert err.value.sqlstate == "PQ035"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')


def test_reinstall_keeps_the_commit_check(client: pglogq.Client, dsn: str) -> None:
    """Re-installing the schema re-creates the deferred check on pglogq.cancelled."""
    setup_queue(client)
    client.install_schema()
    client.install_schema()
    (e,) = client.send_batch("q", [{"n": 1}])
    client.tick("q", force=True)
    with psycopg.connect(dsn) as producer:
        assert client.cancel("q", e, conn=producer) is True
        client.receive("q", "a")
        with pytest.raises(psycopg.Error) as err:
            producer.commit()
        assert err.value.sqlstate == "PQ035"


def test_concurrent_cancels_of_one_event_one_wins(client: pglogq.Client, dsn: str) -> None:
    setup_queue(client)
    (e,) = client.send_batch("q", [{"n": 1}])
    with psycopg.connect(dsn) as one:
        assert client.cancel("q", e, conn=one) is True
        two = Call(dsn, lambda c: c.execute("SELECT pglogq.cancel('q', %s)", (e,)).fetchone())
        two.start()
        one.commit()
    assert two.outcome() == (False,)


@pytest.mark.parametrize("msg_id", [None, 0, -1, 2**31, 2**63 - 1])
def test_cancel_boundaries(client: pglogq.Client, dsn: str, msg_id: int | None) -> None:
    setup_queue(client)
    client.send("q", {})
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as err:
        conn.execute("SELECT pglogq.cancel('q', %s::bigint)", (msg_id,))
    assert err.value.sqlstate == "PQ021"


# -- the cost of cancel markers grows with the page, not with the markers ----------------------


def mass_cancel(dsn: str, queue: str, events: int, every: int) -> list[int]:
    """Send ``events`` events in one transaction and record every ``every``-th as cancelled, the
    way cancel() records it (a mass cancel, written directly: thousands of cancel() calls would
    only make the test slow); the statistics are then fresh.  Returns the ids left."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pglogq.send_batch(%s, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, %s) g))",
            (queue, events),
        )
        conn.execute(
            "INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid)"
            " SELECT e.ev_queue, e.ev_id, e.ev_txid FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
            " WHERE q.queue_name = %s AND e.ev_id %% %s = 0",
            (queue, every),
        )
        conn.execute("ANALYZE pglogq.cancelled")
        conn.execute("ANALYZE pglogq.event")
        rows = conn.execute(
            "SELECT e.ev_id FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
            " WHERE q.queue_name = %s AND e.ev_id %% %s <> 0 ORDER BY e.ev_id",
            (queue, every),
        ).fetchall()
    return [r[0] for r in rows]


def test_receive_probes_the_markers_of_its_page_only(client: pglogq.Client, dsn: str) -> None:
    """A page of receive with 20,000 cancel markers in its batch: the generic plan of the page
    query hashed every marker of the queue (a seq scan of pglogq.cancelled on every page, 19 ms
    at 100,000 markers); the markers are now probed per row read, so a page reads about as many
    markers as it reads events, never the table."""
    setup_queue(client)
    left = mass_cancel(dsn, "q", 40_000, 2)
    client.tick("q", force=True)
    with psycopg.connect(dsn) as conn:
        for turn in range(8):  # past the plan cache's first custom plans
            before = TableReads(conn, "cancelled")
            rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
            spent = TableReads(conn, "cancelled") - before
            assert [r[1] for r in rows] == left[turn * 100:(turn + 1) * 100]
            assert spent.seq_scan == 0, spent
            assert spent.rows_read() <= 201, spent  # the page's 100 events and the 100 cancelled between
            conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
            conn.commit()


@pytest.mark.parametrize("priority", [100, 90], ids=["transaction order", "priority order (_batch_page)"])
def test_receive_probes_the_markers_with_plans_made_when_they_were_few(
        client: pglogq.Client, dsn: str, priority: int) -> None:
    """A consumer's session plans receive (generic plans, kept for the session) while the queue
    holds a marker or three (analysed empty): then a mass cancel of 4,000 events, not analysed yet.  The page
    still probes the markers' primary key per event read: the plans made for a one-page table
    scanned every marker for every event of the batch, or read them all through the txid index
    (seconds a page at 10,000 markers)."""
    setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as other, psycopg.connect(dsn) as conn:
        other.execute("ANALYZE pglogq.cancelled")
        for _ in range(3):
            few = client.send_batch("q", [{"n": i} for i in range(6)], priority=priority)
            client.cancel("q", few[0])
            client.tick("q", force=True)
            rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
            assert [r[1] for r in rows] == few[1:]
            conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
            conn.commit()
        sent = client.send_batch("q", [{"n": i} for i in range(4_100)], priority=priority)
        with other.transaction():
            # what 4,000 cancel() calls leave (their re-check at commit aside: nothing was handed)
            other.execute("SET LOCAL session_replication_role = replica")
            other.execute("INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid)"
                          " SELECT e.ev_queue, e.ev_id, e.ev_txid FROM pglogq.event e"
                          "  WHERE e.ev_id = ANY (%s)", (sent[:4_000],))
        client.tick("q", force=True)
        before = TableReads(conn, "cancelled")
        rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
        spent = TableReads(conn, "cancelled") - before
        assert [r[1] for r in rows] == sent[4_000:]
        assert spent.seq_scan == 0, spent
        assert spent.rows_read() <= 4_200, spent  # one marker a cancelled event read, at most
        conn.commit()


def test_jobs_probe_the_markers_with_plans_made_when_they_were_few(client: pglogq.Client, dsn: str) -> None:
    """jobs (and _open_batch_events under it), as receive above: a session's plans made while the
    queue held a marker or three scanned every marker for every event listed after a mass cancel
    (8.4 million rows read for one page after 4,000 cancels); each event is a probe now."""
    setup_queue(client)
    with psycopg.connect(dsn, autocommit=True) as other, psycopg.connect(dsn) as conn:
        other.execute("ANALYZE pglogq.cancelled")
        for _ in range(3):
            few = client.send_batch("q", [{"n": i} for i in range(6)])
            client.cancel("q", few[0])
            client.tick("q", force=True)
            rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
            for state in (None, "waiting", "in-flight"):
                for _ in range(6):  # past the plan cache's first custom plans
                    conn.execute("SELECT * FROM pglogq.jobs('q', 'a', NULL, %s, 100)", (state,)).fetchall()
            conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
            conn.commit()
        sent = client.send_batch("q", [{"n": i} for i in range(4_100)])
        with other.transaction():
            other.execute("SET LOCAL session_replication_role = replica")  # what 4,000 cancel() calls leave
            other.execute("INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid)"
                          " SELECT e.ev_queue, e.ev_id, e.ev_txid FROM pglogq.event e WHERE e.ev_id = ANY (%s)",
                          (sent[:4_000],))
        client.tick("q", force=True)
        page = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 50)").fetchall()
        assert [r[1] for r in page] == sent[4_000:4_050]
        conn.commit()
        for state, want in ((None, sent[4_000:4_100]), ("waiting", sent[4_050:4_100]),
                            ("in-flight", sent[4_000:4_050])):
            before = TableReads(conn, "cancelled")
            rows = conn.execute("SELECT msg_id FROM pglogq.jobs('q', 'a', NULL, %s, 100)", (state,)).fetchall()
            spent = TableReads(conn, "cancelled") - before
            conn.commit()
            assert sorted(r[0] for r in rows) == want, state
            assert spent.seq_scan == 0 and spent.rows_read() <= 4_200, (state, spent)


def test_receive_skips_the_marker_test_for_a_batch_without_markers(client: pglogq.Client, dsn: str) -> None:
    """Markers of older batches (a mass cancel an hour ago) cost a page of a newer batch one
    probe of the markers' txid index, and no marker is read."""
    setup_queue(client)
    mass_cancel(dsn, "q", 20_000, 1)
    client.tick("q", force=True)
    fresh = client.send_batch("q", [{"n": i} for i in range(300)])
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.force_tick('q')")
        conn.commit()
        # the first batch holds only cancelled events: it is passed on the way
        before = TableReads(conn, "cancelled")
        rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
        spent = TableReads(conn, "cancelled") - before
        assert [r[1] for r in rows] == fresh[:100]
        assert spent.seq_scan == 0, spent
        conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
        conn.commit()
        before = TableReads(conn, "cancelled")
        rows = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'a', 100)").fetchall()
        spent = TableReads(conn, "cancelled") - before
        assert [r[1] for r in rows] == fresh[100:200]
        assert spent.seq_scan == 0 and spent.rows_read() == 0, spent


def test_prune_reads_only_the_markers_it_deletes(client: pglogq.Client, dsn: str) -> None:
    """maint_prune (every 5 s per queue) checked every marker against the event tables: 0.44 to
    0.73 s a pass at 1,000,000 markers whose events were still stored.  It now deletes the
    markers below the oldest stored transaction, through their txid index: a pass with nothing
    to delete reads no marker, and the markers of rotated events still go."""
    setup_queue(client)
    mass_cancel(dsn, "q", 20_000, 1)
    with psycopg.connect(dsn) as conn:
        before = TableReads(conn, "cancelled")
        assert conn.execute("SELECT pglogq.maint_prune('q')").fetchone() == (0,)
        spent = TableReads(conn, "cancelled") - before
        conn.commit()
    assert spent.seq_scan == 0 and spent.rows_read() == 0, spent
    rotate_all(client, dsn, "q", ["a"], times=3)  # every table truncated once
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.maint_prune('q')")
        conn.commit()
        assert conn.execute("SELECT count(*) FROM pglogq.cancelled").fetchone() == (0,)


def test_maint_operations_probes_the_markers_once_a_mass_cancel_is_gone(client: pglogq.Client, dsn: str) -> None:
    """The daemon asks maint_operations every 500 ms which queues have markers to prune.  Planned
    on statistics of a full marker table (a mass cancel, analysed), that test read every marker
    for the queues without any, and after the mass cancel's queue was dropped, its dead rows
    until the next vacuum (22-38 ms a pass at 100,000).  It is one primary-key probe per queue
    whatever the statistics."""
    for name in ("gone", "q1", "q2", "q3"):
        client.create_queue(name)
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            # markers of events never sent: no deferred re-check to pay for (a fake mass cancel)
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute("INSERT INTO pglogq.cancelled (queue_id, msg_id, ev_txid)"
                         " SELECT q.queue_id, g, '1'::xid8 FROM pglogq.queue q, generate_series(1, 5000) g"
                         " WHERE q.queue_name = 'gone'")
        conn.execute("ANALYZE pglogq.cancelled")
        conn.commit()
        for _ in range(3):
            before = TableReads(conn, "cancelled")
            ops = conn.execute("SELECT * FROM pglogq.maint_operations()").fetchall()
            spent = TableReads(conn, "cancelled") - before
            assert ("prune", "gone") in ops and ("prune", "q1") not in ops
            assert spent.seq_scan == 0 and spent.rows_read() <= 4, spent
        conn.commit()
        client.drop_queue("gone", force=True)
        for _ in range(3):
            before = TableReads(conn, "cancelled")
            ops = conn.execute("SELECT * FROM pglogq.maint_operations()").fetchall()
            spent = TableReads(conn, "cancelled") - before
            assert [o for o in ops if o[0] == "prune"] == []
            assert spent.seq_scan == 0 and spent.rows_read() == 0, spent
        conn.commit()
