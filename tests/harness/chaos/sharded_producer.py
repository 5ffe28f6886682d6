"""A chaos producer of the ``sharded`` mode: keyed sends through a ShardedClient, every attempt recorded.

``python -m tests.harness.chaos.sharded_producer --seed-dsn DSN [--seed-dsn DSN ...] --queue Q --name p1
--dir D --seed N --keys K``

Sequence number ``seq`` goes to key ``<name>:<seq % K>`` as that key's ``seq // K``-th event, as
in the keyed mode (:func:`.producer.event_key`).  Each operation is drawn from the seed:

* ``ShardedClient.send(queue, payload, key=k)`` (routed by the key's slot; on PQ078 the client
  refreshes its map and retries once);
* ``ShardedClient.send_batch(queue, payloads, keys=ks)`` of 2-8 events (one transaction per
  shard: not atomic across shards, so a failure leaves every event of it indeterminate);
* a send in an application transaction on the connection of the shard ``shard_for`` names
  (``send(..., conn=app_conn)``): a key moved away meanwhile is refused (``KeyMoved``, no
  retry): a definite failure; some of those transactions roll back on purpose;
* an unkeyed send (any shard, round-robin), about 5 %; it carries no key.

Outcomes: ``ok`` (returned), ``fail`` (certainly not committed: an error the server raised, or
the transaction was rolled back), ``info`` (unknown: a connection lost, a shard down, a batch
that failed part way).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import psycopg

from tests.harness.chaos._proc import StopFlag, close_quietly, definite_failure
from tests.harness.chaos.history import Recorder, is_poison
from tests.harness.chaos.producer import event_key


def sharded_definite_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by one ShardedClient call on one shard, proves nothing committed:
    an error the server raised (a pglogq error with a server SQLSTATE: PQ078 moved, ...), or a
    psycopg error that proves it (:func:`.definite_failure`).  Client-side failures (a shard
    unavailable, a pool timeout) leave the outcome unknown."""
    import pglogq.errors as errors

    if isinstance(exc, errors.PglogqError):
        state = exc.sqlstate
        cause = exc.__cause__
        if state is None or state == "PQ083":  # client side: shard unavailable, closed, ...
            return False
        return isinstance(cause, psycopg.Error) and definite_failure(cause)
    return definite_failure(exc)


class ShardedProducer:
    def __init__(self, seeds: list[str], queue: str, name: str, out: Recorder, seed: int, keys: int) -> None:
        from pglogq.cluster.sharded_client import ShardedClient

        self.client = ShardedClient(seeds, min_size=1, max_size=2)
        self.queue = queue
        self.name = name
        self.keys = keys
        self.out = out
        self.rng = random.Random(seed)
        self.seq = 0
        self.app: dict[str, psycopg.Connection[Any]] = {}  # shard DSN -> the application's connection
        self.flag = StopFlag()

    def next_ids(self, n: int) -> list[str]:
        ids = []
        for _ in range(n):
            self.seq += 1
            ids.append(f"{self.name}:{self.seq}")
        return ids

    def payload(self, ev_id: str, keyed: bool = True) -> dict[str, Any]:
        body: dict[str, Any] = {"id": ev_id, "poison": is_poison(ev_id)}
        if keyed:
            body["key"], body["kseq"] = event_key(ev_id, self.keys)
        return body

    def key(self, ev_id: str) -> str:
        return event_key(ev_id, self.keys)[0]

    def outcome(self, kind: str, ids: list[str]) -> None:
        self.out.write_many([(kind, i) for i in ids])

    def run(self) -> None:
        while not self.flag.stop:
            self.one_op()
            self.flag.sleep(self.rng.uniform(0.002, 0.02))  # a few hundred events/s in all
        for conn in self.app.values():
            close_quietly(conn)
        self.client.close()

    def one_op(self) -> None:
        r = self.rng.random()
        if r < 0.55:
            self.single(self.next_ids(1)[0])
        elif r < 0.80:
            self.batch(self.next_ids(self.rng.randint(2, 8)))
        elif r < 0.90:
            self.in_app_transaction(self.next_ids(1)[0], rollback=False)
        elif r < 0.95:
            self.in_app_transaction(self.next_ids(1)[0], rollback=True)
        else:
            self.unkeyed(self.next_ids(1)[0])

    def single(self, ev_id: str) -> None:
        self.outcome("invoke", [ev_id])
        try:
            self.client.send(self.queue, self.payload(ev_id), key=self.key(ev_id))
        except Exception as exc:
            self.note(exc)
            self.outcome("fail" if sharded_definite_failure(exc) else "info", [ev_id])
            return
        self.outcome("ok", [ev_id])

    def unkeyed(self, ev_id: str) -> None:
        self.outcome("invoke", [ev_id])
        try:
            self.client.send(self.queue, self.payload(ev_id, keyed=False))
        except Exception as exc:
            self.note(exc)
            self.outcome("fail" if sharded_definite_failure(exc) else "info", [ev_id])
            return
        self.outcome("ok", [ev_id])

    def batch(self, ids: list[str]) -> None:
        self.outcome("invoke", ids)
        try:
            self.client.send_batch(self.queue, [self.payload(i) for i in ids], keys=[self.key(i) for i in ids])
        except Exception as exc:
            # one transaction per shard: some of them may have committed before the failure
            self.note(exc)
            self.outcome("info", ids)
            return
        self.outcome("ok", ids)

    def in_app_transaction(self, ev_id: str, *, rollback: bool) -> None:
        """BEGIN on the shard the client's map names for the key; send(conn=); COMMIT (or ROLLBACK)."""
        self.outcome("invoke", [ev_id])
        key = self.key(ev_id)
        try:
            dsn = self.client.shard_for(self.queue, key)
            conn = self.app.get(dsn)
            if conn is None or conn.closed or conn.broken:
                conn = self.app[dsn] = psycopg.connect(dsn, autocommit=True, connect_timeout=3)
        except Exception:
            self.outcome("fail", [ev_id])  # nothing was sent
            return
        try:
            conn.execute("BEGIN")
            self.client.send(self.queue, self.payload(ev_id), key=key, conn=conn)
        except Exception as exc:
            self.note(exc)
            self.outcome("fail", [ev_id])  # the statement failed: the transaction commits nothing
            self.abort(dsn, conn)
            return
        if rollback:
            self.abort(dsn, conn)
            self.outcome("fail", [ev_id])
            return
        try:
            conn.execute("COMMIT")
        except Exception as exc:
            self.outcome("fail" if definite_failure(exc) else "info", [ev_id])
            return
        self.outcome("ok", [ev_id])

    def abort(self, dsn: str, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            close_quietly(conn)
            self.app.pop(dsn, None)

    def note(self, exc: BaseException) -> None:
        """Count the refusals the mode is about (a key moved: PQ078) as client faults."""
        if getattr(exc, "sqlstate", None) == "PQ078":
            self.out.write("fault", "key_moved_refusal")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed-dsn", action="append", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keys", type=int, default=8)
    a = ap.parse_args()
    path = a.dir / f"producer-{a.name}.log"
    out = Recorder(path)
    seq = 0  # resume the sequence after a restart: ids stay unique
    for line in path.read_text().splitlines():
        parts = line.split("\t")
        tail = parts[1].rsplit(":", 1)[-1] if len(parts) == 2 else ""
        if parts[0] == "invoke" and tail.isdigit():
            seq = max(seq, int(tail))
    p = ShardedProducer(a.seed_dsn, a.queue, a.name, out, a.seed, a.keys)
    p.seq = seq
    p.run()


if __name__ == "__main__":
    main()
