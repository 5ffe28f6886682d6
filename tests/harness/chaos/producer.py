"""A chaos producer process: sends events with unique ids and records every attempt.

``python -m tests.harness.chaos.producer --dsn DSN --queue Q --name p1 --dir D --seed N [--rr] [--keys K]``

Each operation is drawn from the seed: an autocommit send, a send in an explicit transaction,
a ``send_batch``, a transaction that rolls back, a savepoint rolled back then a send, a send under
a tiny ``statement_timeout``; about 2 % of the ids are "poison" (:func:`.history.is_poison`) (every consumer nacks them
until they are dead-lettered), and a few are "killers" (:func:`.history.is_killer`: the consumer
process that starts one dies).  With ``--rr`` it is a REPEATABLE READ producer instead: it takes
its snapshot, holds it for seconds (across forced rotations), then sends and commits.

With ``--keys K`` (the harness's ``keyed`` mode) every event has a key: sequence number ``seq``
goes to key ``<name>:<seq % K>`` as that key's ``seq // K``-th event (``kseq``), so each key has
its own sequence, carried in the payload (``key``, ``kseq``) and sent with ``send_keyed`` /
``send_batch_keyed``.  A restarted producer resumes ``seq``, so the per-key
sequences go on too.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.harness.chaos._proc import StopFlag, close_quietly, connect, definite_failure
from tests.harness.chaos.history import Recorder, is_killer, is_poison

SEND = "SELECT pglogq.send(%s, %s)"
SEND_BATCH = "SELECT pglogq.send_batch(%s, %s::jsonb[])"
SEND_KEYED = "SELECT pglogq.send_keyed(%s, %s, %s)"
SEND_BATCH_KEYED = "SELECT pglogq.send_batch_keyed(%s, %s, %s)"


def event_key(ev_id: str, keys: int) -> tuple[str, int]:
    """The key of event ``<producer>:<seq>`` when its producer has ``keys`` keys, and its
    sequence number within that key."""
    name, _, seq = ev_id.rpartition(":")
    n = int(seq)
    return f"{name}:{n % keys}", n // keys


class Producer:
    def __init__(self, dsn: str, queue: str, name: str, out: Recorder, seed: int, keys: int = 0) -> None:
        self.dsn = dsn
        self.keys = keys  # 0: unkeyed events
        self.queue = queue
        self.name = name
        self.out = out
        self.rng = random.Random(seed)
        self.seq = 0
        self.conn: psycopg.Connection[Any] | None = None
        self.flag = StopFlag()

    def next_ids(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            self.seq += 1
            ids.append(f"{self.name}:{self.seq}")
        return ids

    def payload(self, ev_id: str) -> Jsonb:
        body: dict[str, Any] = {"id": ev_id, "poison": is_poison(ev_id)}
        if is_killer(ev_id):
            body = {"id": ev_id, "poison": False, "killer": True}
        if self.keys:
            body["key"], body["kseq"] = event_key(ev_id, self.keys)
        return Jsonb(body)

    def send(self, conn: psycopg.Connection[Any], ev_id: str) -> None:
        """One ``send`` (with the event's key in the keyed mode)."""
        if self.keys:
            conn.execute(SEND_KEYED, (self.queue, self.payload(ev_id), event_key(ev_id, self.keys)[0]))
        else:
            conn.execute(SEND, (self.queue, self.payload(ev_id)))

    def send_batch(self, conn: psycopg.Connection[Any], ids: list[str]) -> None:
        """One ``send_batch`` (with the events' keys in the keyed mode)."""
        payloads = [self.payload(i) for i in ids]
        if self.keys:
            array = Jsonb([p.obj for p in payloads])  # send_batch_keyed takes one JSON array
            conn.execute(SEND_BATCH_KEYED, (self.queue, array, [event_key(i, self.keys)[0] for i in ids]))
        else:
            conn.execute(SEND_BATCH, (self.queue, payloads))

    def outcome(self, kind: str, ids: list[str]) -> None:
        self.out.write_many([(kind, i) for i in ids])

    def ensure(self) -> psycopg.Connection[Any]:
        if self.conn is None or self.conn.closed or self.conn.broken:
            close_quietly(self.conn)
            self.conn = None
            self.conn = connect(self.dsn)
        return self.conn

    def run(self, rr: bool) -> None:
        while not self.flag.stop:
            try:
                conn = self.ensure()
            except psycopg.Error:
                self.flag.sleep(0.2)
                continue
            if rr:
                self.rr_send(conn)
                self.flag.sleep(self.rng.uniform(1, 6))
            else:
                self.one_op(conn)
            self.flag.sleep(self.rng.uniform(0, 0.01))
        close_quietly(self.conn)

    # -- autocommit ---------------------------------------------------------------------------

    def autocommit(self, conn: psycopg.Connection[Any], ids: list[str]) -> None:
        self.outcome("invoke", ids)
        try:
            if len(ids) == 1:
                self.send(conn, ids[0])
            else:
                self.send_batch(conn, ids)
        except Exception as exc:
            self.outcome("fail" if definite_failure(exc) else "info", ids)
            return
        self.outcome("ok", ids)

    # -- explicit transactions ----------------------------------------------------------------

    def in_transaction(
        self, conn: psycopg.Connection[Any], ids: list[str], *, rollback_ids: list[str] | None = None,
        tiny_timeout: bool = False, rollback: bool = False,
    ) -> None:
        """BEGIN; [savepoint: send rollback_ids; ROLLBACK TO]; send ids; COMMIT (or ROLLBACK)."""
        rolled = rollback_ids or []
        self.outcome("invoke", rolled + ids)
        try:
            conn.execute("BEGIN")
            if tiny_timeout:
                conn.execute("SET LOCAL statement_timeout = '1ms'")
            if rolled:
                conn.execute("SAVEPOINT sp")
                for i in rolled:
                    self.send(conn, i)
                conn.execute("ROLLBACK TO SAVEPOINT sp")
            for i in ids:
                self.send(conn, i)
        except Exception as exc:
            if tiny_timeout and isinstance(exc, psycopg.errors.QueryCanceled):
                self.out.write("fault", "statement_timeout")
            self.outcome("fail", rolled + ids)
            self.abort(conn)
            return
        if rolled:
            self.outcome("fail", rolled)
        if rollback:
            self.abort(conn)
            self.outcome("fail", ids)
            return
        try:
            conn.execute("COMMIT")
        except Exception as exc:
            self.outcome("fail" if definite_failure(exc) else "info", ids)
            return
        self.outcome("ok", ids)

    def abort(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            close_quietly(conn)
            self.conn = None

    def one_op(self, conn: psycopg.Connection[Any]) -> None:
        r = self.rng.random()
        if r < 0.50:
            self.autocommit(conn, self.next_ids(1))
        elif r < 0.65:
            self.autocommit(conn, self.next_ids(self.rng.randint(2, 8)))
        elif r < 0.85:
            self.in_transaction(conn, self.next_ids(self.rng.randint(1, 3)))
        elif r < 0.92:
            self.in_transaction(conn, self.next_ids(self.rng.randint(1, 3)), rollback=True)
        elif r < 0.97:
            self.in_transaction(conn, self.next_ids(1), rollback_ids=self.next_ids(2))
        else:
            self.in_transaction(conn, self.next_ids(1), tiny_timeout=True)

    # -- REPEATABLE READ across rotations -----------------------------------------------------

    def rr_send(self, conn: psycopg.Connection[Any]) -> None:
        ids = self.next_ids(1)
        self.outcome("invoke", ids)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            conn.execute("SELECT count(*) FROM pglogq.queue")  # the snapshot is taken here
            self.flag.sleep(self.rng.uniform(2, 8))
            self.send(conn, ids[0])
        except Exception:
            self.outcome("fail", ids)
            self.abort(conn)
            return
        try:
            conn.execute("COMMIT")
        except Exception as exc:
            self.outcome("fail" if definite_failure(exc) else "info", ids)
            return
        self.outcome("ok", ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rr", action="store_true")
    ap.add_argument("--keys", type=int, default=0, help="Keys of this producer (0: unkeyed events).")
    a = ap.parse_args()
    path = a.dir / f"producer-{a.name}.log"
    out = Recorder(path)
    # resume the sequence after a restart: ids stay unique
    seq = 0
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        tail = parts[1].rsplit(":", 1)[-1] if len(parts) == 2 else ""
        if parts[0] == "invoke" and tail.isdigit():
            seq = max(seq, int(tail))
    p = Producer(a.dsn, a.queue, a.name, out, a.seed, a.keys)
    p.seq = seq
    p.run(a.rr)


if __name__ == "__main__":
    main()
