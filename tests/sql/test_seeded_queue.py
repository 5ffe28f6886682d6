"""A queue made and seeded in one transaction (create_queue, subscribe, send, as a migration
does) delivers its seed events.

create_queue wrote tick 1 with a plain pg_current_snapshot(), taken inside the creating
transaction.  PostgreSQL leaves a transaction's own xid out of the running list of its snapshots,
so as soon as any transaction with a later xid had ended (any write elsewhere on the server while
create_queue built its partitions), the creating transaction's xid was below the snapshot's xmax
and not in its running list: tick 1 saw it as committed, and its events were in no batch (the
first batch holds the transactions visible in tick 2 and not in tick 1).  Tick 1 now marks the
creating transaction running, as every tick does (pglogq._tick_snapshot).

The other session's commit is placed deterministically here by holding the event table, which
create_queue locks (CREATE TABLE ... PARTITION OF) after its first write has given it an xid.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg


def _one(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return row[0]


def test_events_sent_in_the_creating_transaction_reach_a_consumer_subscribed_there(dsn: str) -> None:
    with psycopg.connect(dsn) as creator, psycopg.connect(dsn) as other, \
            psycopg.connect(dsn, autocommit=True) as watch:
        other.execute("CREATE TABLE public.elsewhere (x int)")
        other.commit()
        # another session holds the event table: create_queue, once it has its xid, waits for it
        other.execute("LOCK TABLE pglogq.event IN ACCESS SHARE MODE")
        creator_pid = creator.info.backend_pid
        failures: list[BaseException] = []

        def create() -> None:
            try:
                creator.execute("SELECT pglogq.create_queue('seeded')")
            except BaseException as e:  # pragma: no cover - reported below
                failures.append(e)

        t = threading.Thread(target=create)
        t.start()
        for _ in range(200):
            if _one(watch, "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", (creator_pid,)):
                break
            time.sleep(0.05)
        else:  # pragma: no cover
            raise AssertionError("create_queue never waited for the event table")
        # ... meanwhile a write of the other session (a later xid) commits: an ordinary busy server
        other.execute("INSERT INTO public.elsewhere VALUES (1)")
        other.commit()
        t.join(30)
        assert not failures, failures
        # the creating transaction subscribes a consumer and seeds the queue, then commits
        creator.execute("SELECT pglogq.subscribe('seeded', 'c')")
        msg_id = _one(creator, "SELECT pglogq.send('seeded', '{\"seed\": 1}')")
        creator.commit()

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.force_tick('seeded')")
        got = [r[0] for r in conn.execute("SELECT msg_id FROM pglogq.receive('seeded', 'c', 10)").fetchall()]
        # the event is stored and committed, but tick 1 already counted its transaction as seen
        stored = _one(conn, "SELECT count(*) FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
                            " WHERE q.queue_name = 'seeded'")
        assert stored == 1
        assert got == [msg_id], (
            "the seed event, committed with the queue, is in no batch: tick 1's snapshot "
            + _one(conn, "SELECT t.tick_snapshot::text FROM pglogq.tick t JOIN pglogq.queue q USING (queue_id)"
                         " WHERE q.queue_name = 'seeded' AND t.tick_id = 1")
            + " sees its transaction "
            + _one(conn, "SELECT e.ev_txid::text FROM pglogq.event e JOIN pglogq.queue q ON q.queue_id = e.ev_queue"
                         " WHERE q.queue_name = 'seeded'")
        )
