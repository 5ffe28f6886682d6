"""A chaos consumer process: receives, records every delivery *before* acking, then acks.

``python -m tests.harness.chaos.consumer --dsn DSN --queue Q --consumer C [--worker W] --dir D --seed N
[--keyed | --share]``

Poison events are nacked (they come back with retry_count + 1 until dead-lettered); about 1 %
of the others are nacked once.  The consumer marks handler starts as the consumer runtime does
(``receive(..., start_first => 0)``, ``mark_started``): a "killer" event makes the process die
(``os._exit``) right after its start is marked - the harness restarts it, and the crashes count
as failed attempts until the killer is dead-lettered.  Nacks and the ack of a page run in one transaction.  Drawn from
the seed, the process also hurts itself: a receive in a transaction that outlives a tiny
``idle_in_transaction_session_timeout`` (the server kills the session; the page must come
back) and a receive under a 1 ms ``statement_timeout``.

With ``--keyed`` (the harness's ``keyed`` mode, on a partitioned queue) it also records each
page (``page``: when the receive was called and returned) and when its handlers finished
(``done``, before the nacks and the ack), with each delivery's key and per-key sequence, so that
the checker can tell the order of the deliveries of a key across processes and whether two
workers had one key in flight at once; its handlers then take 0-10 ms a page, so that a page
is in flight long enough for an overlap to show.

With ``--share`` (the harness's ``share`` mode: the consumer is a share consumer and each
receive names the worker, so it returns a lease of the next events no other worker holds) it
records pages and handler ends the same way, so that the checker can tell whether one event was
in flight at two workers at once.  Its pages' effects are written in the ack's transaction (a
transactional handler): one row of ``chaos_effect`` per event acknowledged (not nacked), so that
the checker can count effects applied twice (which kills, cuts and server crashes at any point of
the COMMIT must never cause) and events done without their effect.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.harness.chaos._proc import StopFlag, close_quietly, connect
from tests.harness.chaos.history import Recorder

RECEIVE = (
    "SELECT batch_id, msg_id, payload, retry_count, txid::text"
    " FROM pglogq.receive(%s, %s, %s, %s, start_first => 0)"
)
MARK = "SELECT pglogq.mark_started(%s, %s, %s::xid8)"
NACK = "SELECT pglogq.nack(%s, %s, %s::interval, %s, %s::xid8)"
ACK = "SELECT pglogq.ack(%s, %s, %s::xid8)"  # with the page's last message: see ack.sql
EFFECT = "INSERT INTO chaos_effect (consumer, msg_id) SELECT %s, unnest(%s::text[])"
EFFECT_DDL = "CREATE TABLE IF NOT EXISTS chaos_effect (consumer text NOT NULL, msg_id text NOT NULL)"


class Consumer:
    def __init__(
        self, dsn: str, queue: str, consumer: str, worker: str | None, out: Recorder, seed: int,
        keyed: bool = False, share: bool = False,
    ) -> None:
        self.keyed = keyed
        self.share = share  # the effects of acknowledged events written in the ack's transaction
        self.paged = keyed or share  # record pages and handler ends
        self.token = secrets.token_hex(4)  # page ids stay unique across restarts of the process
        self.pages = 0
        self.dsn = dsn
        self.queue = queue
        self.consumer = consumer
        self.worker = worker
        self.out = out
        self.rng = random.Random(seed)
        self.conn: psycopg.Connection[Any] | None = None
        self.flag = StopFlag()

    def ensure(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            close_quietly(self.conn)
            self.conn = None
            self.conn = connect(self.dsn)
        return self.conn

    def run(self) -> None:
        while not self.flag.stop:
            try:
                conn = self.ensure()
                got = self.step(conn)
            except psycopg.Error:
                close_quietly(self.conn)
                self.conn = None
                self.flag.sleep(0.1)
                continue
            if not got:
                self.flag.sleep(0.05)
        close_quietly(self.conn)

    def record(self, rows: list[tuple[Any, ...]], called: float, returned: float, committed: bool = True) -> str:
        """Record the deliveries of a page (with the page itself in the keyed mode); returns the
        page's id ("-" outside the keyed mode)."""
        worker = self.worker or "-"
        if not self.paged:
            self.out.write_many([("deliver", r[2]["id"], r[0], self.consumer, worker, r[3]) for r in rows])
            return "-"
        self.pages += 1
        page = f"{self.token}.{self.pages}"
        self.out.write_many([
            ("page", page, self.consumer, worker, f"{called:.6f}", f"{returned:.6f}", int(committed)),
            *(("deliver", r[2]["id"], r[0], self.consumer, worker, r[3], page, r[2].get("key", "-"),
               r[2].get("kseq", "-")) for r in rows),
        ])
        return page

    def handled(self, page: str) -> None:
        """Keyed and share modes: the handlers of ``page`` are done (its nacks and ack come next)."""
        if self.paged:
            self.flag.sleep(self.rng.uniform(0, 0.01))
            self.out.write("done", page, f"{time.monotonic():.6f}")

    def step(self, conn: psycopg.Connection[Any]) -> bool:
        r = self.rng.random()
        if r < 0.02:
            return self.idle_timeout_step(conn)
        size = self.rng.choice((1, 7, 50, 200))
        if r < 0.04:
            try:
                conn.execute("SET statement_timeout = '1ms'")
                conn.execute(RECEIVE, (self.queue, self.consumer, size, self.worker)).fetchall()
            except psycopg.errors.QueryCanceled:
                self.out.write("fault", "statement_timeout")
            finally:
                conn.execute("RESET statement_timeout")
        called = time.monotonic()
        rows = conn.execute(RECEIVE, (self.queue, self.consumer, size, self.worker)).fetchall()
        returned = time.monotonic()
        if not rows:
            return False
        for n, row in enumerate(rows):
            if row[2].get("killer"):
                # handlers start on the events up to the killer, which kills the process
                self.record(rows[: n + 1], called, returned)
                conn.execute(MARK, (row[0], row[1], row[4]))
                # the page ends with the process: a restarted process's next page says so too,
                # but a twin is not restarted, and its page stayed in flight for ever (checker)
                self.out.write("exit", f"{time.monotonic():.6f}")
                os._exit(3)
        self.handled(self.record(rows, called, returned))
        batch = rows[0][0]
        with conn.transaction():
            done: list[str] = []
            for row in rows:
                if row[2].get("poison") or self.rng.random() < 0.01:
                    conn.execute(NACK, (batch, row[1], "0.2 s", "chaos", row[4]))
                else:
                    done.append(row[2]["id"])
            if self.share and done:
                conn.execute(EFFECT, (self.consumer, done))
            conn.execute(ACK, (batch, rows[-1][1], rows[-1][4]))
        return True

    def idle_timeout_step(self, conn: psycopg.Connection[Any]) -> bool:
        """Receive inside a transaction, then idle past the session's timeout: the server
        terminates the session, the receive is rolled back and the page comes again."""
        conn.execute("BEGIN")
        try:
            conn.execute("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
            called = time.monotonic()
            rows = conn.execute(RECEIVE, (self.queue, self.consumer, 20, self.worker)).fetchall()
            if rows:
                self.record(rows, called, time.monotonic(), committed=False)
            self.flag.sleep(0.4)
            conn.execute("COMMIT")  # fails: the session was terminated (nothing acked anyway)
        except psycopg.Error:
            self.out.write("fault", "idle_in_transaction_timeout")
            close_quietly(conn)
            self.conn = None
            return True
        return bool(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--consumer", required=True)
    ap.add_argument("--worker")
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", help="Name of the record file (default: consumer[-worker]).")
    ap.add_argument("--keyed", action="store_true", help="Record pages, keys and handler ends (keyed mode).")
    ap.add_argument("--share", action="store_true", help="Record pages and handler ends (share mode).")
    a = ap.parse_args()
    tag = a.tag or a.consumer + (f"-{a.worker}" if a.worker else "")
    out = Recorder(a.dir / f"consumer-{tag}.log")
    Consumer(a.dsn, a.queue, a.consumer, a.worker, out, a.seed, a.keyed, a.share).run()


if __name__ == "__main__":
    main()
