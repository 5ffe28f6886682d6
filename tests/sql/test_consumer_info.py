"""consumer_info's contract for names: NULL means all, a name that does not exist is an error
(PQ001 for a queue, PQ002 for a consumer), never an empty answer that reads as "no lag"."""

from __future__ import annotations

import psycopg
import pytest

import pglogq


def test_unknown_names_are_errors_and_null_means_all(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.create_queue("r")
    client.subscribe("q", "a")
    client.subscribe("q", "b")
    client.subscribe("r", "a")
    with psycopg.connect(dsn, autocommit=True) as conn:
        def names(*args: str | None) -> list[tuple[str, str]]:
            return [tuple(r) for r in conn.execute(
                "SELECT queue_name, consumer_name FROM pglogq.consumer_info(%s, %s)", args).fetchall()]

        assert names(None, None) == [("q", "a"), ("q", "b"), ("r", "a")]
        assert names("q", None) == [("q", "a"), ("q", "b")]
        assert names(None, "a") == [("q", "a"), ("r", "a")]
        assert names("r", "a") == [("r", "a")]
        for args, state, hint in [
            (("nope", None), "PQ001", None),
            (("Q", "a"), "PQ001", 'did you mean "q"?'),
            (("q", "ghost"), "PQ002", None),
            (("r", "b"), "PQ002", None),            # b exists, on another queue only
            ((None, "ghost"), "PQ002", "pglogq.consumer_info() lists the consumers"),
        ]:
            with pytest.raises(psycopg.Error) as e:
                names(*args)
            assert e.value.sqlstate == state, args
            if hint is not None:
                assert e.value.diag.message_hint == hint, args
    # the client raises the matching exceptions
    with pytest.raises(pglogq.errors.UnknownQueue):
        client.consumer_info("nope")
    with pytest.raises(pglogq.errors.UnknownConsumer):
        client.consumer_info("q", "ghost")
    with pytest.raises(pglogq.errors.UnknownConsumer):
        client.consumer_info(None, "ghost")
    # a queue without consumers is known: no rows, no error
    client.create_queue("empty")
    assert client.consumer_info("empty") == []


def test_the_queues_copy_and_the_shared_body_give_the_same_figures(client: pglogq.Client, dsn: str) -> None:
    """The tick figures (lag, unread, pending) come from _consumer_ticks, through the queue's copy
    when it has one (its plans cached for the session).  Consumers in every state that reads the
    ticks, on two queues: behind, with a batch open, with a worker's batch open, caught up, a
    share consumer with a lease out; the answer is the same with the copies and without them,
    and the copy is what runs while it exists."""
    for q in ("q", "r"):
        client.create_queue(q)
        client.subscribe(q, "behind")
        client.subscribe(q, "open")
        client.subscribe(q, "workers")
        client.subscribe(q, "done")
    client.subscribe("r", "share", share=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for q in ("q", "r"):
            for _ in range(3):
                conn.execute("SELECT pglogq.send_batch(%s, ARRAY['{}', '{}', '{}']::jsonb[])", (q,))
                conn.execute("SELECT pglogq.force_tick(%s)", (q,))
            conn.execute("SELECT * FROM pglogq.receive(%s, 'open', 2)", (q,))
            conn.execute("SELECT * FROM pglogq.receive(%s, 'workers', 4, 'w1')", (q,))
            while rows := conn.execute("SELECT batch_id FROM pglogq.receive(%s, 'done', 100)", (q,)).fetchall():
                conn.execute("SELECT pglogq.ack(%s)", (rows[0][0],))
            conn.execute("SELECT pglogq.send(%s, '{}')", (q,))  # committed, not ticked yet
        conn.execute("SELECT * FROM pglogq.receive('r', 'share', 2, 'w1')")
        listing = ("SELECT queue_name, consumer_name, lag > interval '0', lag_events, pending_events, open_batches,"
                   "       in_flight_events FROM pglogq.consumer_info() ORDER BY 1, 2")
        calls = ("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                 " WHERE schemaname = 'pglogq' AND funcname ~ '^_q[0-9]+_.*_consumer_ticks$'")
        copies = {qid: n for qid, n in conn.execute(
            "SELECT q.queue_id, (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace"
            "                    AND p.proname LIKE '\\_q' || q.queue_id || '\\_%\\_consumer\\_ticks')"
            "  FROM pglogq.queue q").fetchall()}
        assert set(copies.values()) == {1}, copies
        conn.execute("SET track_functions = 'all'")
        with conn.transaction():
            before = conn.execute(calls).fetchone()
            through_copies = conn.execute(listing).fetchall()
            after = conn.execute(calls).fetchone()
        assert before is not None and after is not None and after[0] - before[0] == 2  # one per queue
        for qid in copies:
            conn.execute("SELECT pglogq._queue_functions(%s, false)", (qid,))
        shared = conn.execute(listing).fetchall()
    assert through_copies == shared
    figures = {(r[0], r[1]): r[2:] for r in shared}
    # 9 events ticked per queue, one more sent and not ticked (not counted anywhere)
    assert figures[("q", "behind")] == (True, 9, 9, 0, None)
    # a batch takes every tick up to the last: handed (not unread), still pending
    assert figures[("q", "open")] == (True, 0, 9, 1, None)
    assert figures[("q", "workers")][1:3] == (0, 9)
    assert figures[("q", "done")] == (False, 0, 0, 0, None)
    assert figures[("r", "share")][4] == 2  # its lease of 2
