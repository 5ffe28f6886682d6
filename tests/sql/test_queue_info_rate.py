"""queue_info's rate (events ticked in the last minute of wall-clock time, over 60 s) as a listing
of every queue has it: from tick_head when the queue's last tick of events is its only one in the
last minute (migration 0048), else from its ticks; the same figure either way."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.db import TICK_HEAD_FOLLOWS

Conn = psycopg.Connection[Any]


def _rates(conn: Conn) -> dict[str, float]:
    return {r[0]: float(r[1]) for r in conn.execute("SELECT queue_name, events_per_second FROM pglogq.queue_info()")}


def _age(conn: Conn, queue: str) -> None:
    """Every tick of the queue so far a minute and a second older."""
    conn.execute("UPDATE pglogq.tick SET tick_time = tick_time - interval '61 s'"
                 " WHERE queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s)", (queue,))
    conn.execute(TICK_HEAD_FOLLOWS)


def test_the_rate_of_a_queue_ticked_once_a_minute_is_read_from_tick_head(client: pglogq.Client, dsn: str) -> None:
    """first: its first events, in one tick; paced: a tick of events over a minute ago, then one
    now; busy: two ticks of events in the last minute.  The rates are those read from the ticks;
    with each queue's tick table locked by another session, the listing of first and paced goes
    on (it reads none of their ticks), and that of busy waits."""
    for queue in ("first", "paced", "busy"):
        client.create_queue(queue)
        client.subscribe(queue, "c")
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as other:
        client.send_batch("first", [{"n": i} for i in range(2)])
        client.tick("first", force=True)
        client.send("paced", {"n": 0})
        client.tick("paced", force=True)
        _age(conn, "paced")
        client.send_batch("paced", [{"n": i} for i in range(3)])
        client.tick("paced", force=True)
        client.tick("paced", force=True)  # an empty tick after it changes nothing
        client.send("busy", {"n": 0})
        client.tick("busy", force=True)
        client.send_batch("busy", [{"n": i} for i in range(4)])
        client.tick("busy", force=True)
        shortcut = _rates(conn)
        with conn.transaction():
            conn.execute("UPDATE pglogq.tick_head SET prev_event_total = NULL")  # as a row of before 0048
            read = _rates(conn)
            conn.execute("ROLLBACK")
        assert shortcut == read
        assert shortcut == pytest.approx({"first": 2 / 60, "paced": 3 / 60, "busy": 5 / 60})
        conn.execute("SET lock_timeout = '2s'")
        for queue, waits in (("first", False), ("paced", False), ("busy", True)):
            qid = conn.execute("SELECT queue_id FROM pglogq.queue WHERE queue_name = %s", (queue,)).fetchone()
            assert qid is not None
            with other.transaction():
                other.execute(f"LOCK TABLE pglogq.tick_{qid[0]} IN ACCESS EXCLUSIVE MODE".encode())
                try:
                    listed = _rates(conn)
                    assert not waits and listed == shortcut
                except psycopg.errors.LockNotAvailable:
                    assert waits
        # the paced producer's last events a minute old too: no rate, no read either
        _age(conn, "paced")
        assert _rates(conn)["paced"] == 0
