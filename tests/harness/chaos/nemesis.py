"""Faults the harness injects itself, on a schedule derived from the seed.

Process faults (SIGKILL of consumers, producers, the ticker) and the server crash are run by
:mod:`.harness`; this module holds the schedule and the database-side faults: forced rotation,
a held REPEATABLE READ snapshot and prepared transactions that send events and are committed
(or rolled back) seconds later, possibly across a server crash.

The ``retention`` mode adds two: a retention pass with a small ``max_consumer_lag`` (recording
exactly which events it made each consumer skip, so the checker does not call them lost) and
a re-install of the schema (``install_schema``) while everything runs.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from tests.harness.chaos._proc import close_quietly, definite_failure
from tests.harness.chaos.history import Recorder, is_poison

# mean seconds between two faults of each kind
MEAN_INTERVAL: dict[str, float] = {
    "kill_consumer": 4.0,
    "kill_producer": 6.0,
    "kill_ticker": 10.0,
    "server_crash": 20.0,
    "forced_rotation": 3.0,
    "held_rr_snapshot": 12.0,
    "prepared_transaction": 7.0,
    "proxy_partition": 15.0,
    "twin_consumer": 15.0,
}


# extra faults of a mode (``python -m tests.harness.chaos --mode retention``)
MODE_INTERVAL: dict[str, dict[str, float]] = {
    "retention": {"retention_pass": 2.0, "reinstall_schema": 8.0},
    "keyed": {},  # the plain run's faults, on a partitioned queue with keyed events
    # a share consumer's workers: a holder of a lease killed (its lease must be taken over), and
    # schema re-installs while leases are out
    "share": {"kill_share_holder": 5.0, "reinstall_schema": 10.0},
}
# the retention limit of the retention mode: small, so that a killed or partitioned consumer
# falls behind it
RETENTION_LIMIT = "2 seconds"


# the modes with faults of their own instead of the plain run's (``--mode sharded``: three
# servers, each a shard of one cluster; no proxy, no 2PC, no rotation faults)
OWN_INTERVAL: dict[str, dict[str, float]] = {
    "sharded": {
        "move_slots": 4.0,  # cluster_admin.move_slots of a range holding a key, to another shard
        "shard_crash": 60.0,  # pg_ctl stop -m immediate of one shard's server, restarted 0.5-2 s later
        "kill_consumer": 8.0,
        "kill_producer": 8.0,
        "kill_ticker": 15.0,
    },
}


def kinds(mode: str | None = None) -> dict[str, float]:
    """The fault kinds of a run in ``mode`` (None: the plain run) and their mean intervals."""
    if mode in OWN_INTERVAL:
        return dict(OWN_INTERVAL[mode])
    return {**MEAN_INTERVAL, **(MODE_INTERVAL[mode] if mode else {})}


def schedule(seed: int, duration: float, mode: str | None = None) -> list[tuple[float, str]]:
    """(time, kind) of every fault, sorted.  Each kind happens at least once, in the first 60 %
    of the run, so that even a short run exercises all of them (in the modes with faults of their
    own, within three mean intervals of the start when that is sooner)."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    for kind, mean in kinds(mode).items():
        window = max(3.0, duration * 0.6)
        if mode in OWN_INTERVAL:  # a long run's frequent faults start early too
            window = min(window, max(3.0, 2.0 + 3 * mean))
        t = rng.uniform(2.0, window)
        out.append((t, kind))
        while True:
            t += rng.expovariate(1.0 / mean)
            if t >= duration:
                break
            out.append((t, kind))
    return sorted(out)


def rotate(dsn: str, queue: str) -> bool:
    """Forced rotation: step 1 (force) and step 2, each in its own transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pglogq.maint_rotate_step1(%s, true)", (queue,)).fetchone()
        conn.execute("SELECT pglogq.maint_rotate_step2(%s)", (queue,))
    return bool(row and row[0])


# Under the consumers' row locks (workers, then the consumer, as maint_retention takes them):
# every holder's cursor and open batch before the pass, the pass itself with the limit set only
# inside this transaction (the ticker daemon never sees it), then what the pass really took from
# each consumer it moved: the open batches it closed (their ranges of ticks) and the stretch its
# cursor jumped.  Not "everything between the oldest position and the cursor": a cooperating
# consumer's cursor stands past its workers' open batches, and a batch the pass left open (it
# ends after the limit) is no skip; recording its events as skipped within the limit made a
# later, legitimate skip of them look wrong.
#
# "within" is judged by the server's own evidence only: the time of the tick that first made the
# event visible after the range's start (tick_time, written by the ticker from the server clock)
# against the instant the pass judged by (skipped_at, which maint_retention sets to that instant)
# minus the queue's max_consumer_lag, as read in this transaction.  maint_retention moves a
# consumer to the last tick made before skipped_at - max_consumer_lag, so a correct pass never
# gives within = 1, whatever the load; no clock of the harness enters.
_HOLDERS = """
SELECT coalesce(w.parent_id, w.sub_id), w.sub_id, w.last_tick, w.batch_id, w.batch_prev_tick, w.batch_cur_tick
  FROM pglogq.subscription w
 WHERE w.queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s)
"""
_CONSUMERS = """
SELECT c.sub_id, c.consumer_name, c.skipped_at
  FROM pglogq.subscription c
 WHERE c.queue_id = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s) AND c.parent_id IS NULL
 ORDER BY c.sub_id
"""
_SKIPPED = """
SELECT e.ev_payload->>'id',
       coalesce((SELECT t.tick_time FROM pglogq.tick t
                  WHERE t.queue_id = e.ev_queue AND t.tick_id > %(start)s
                    AND pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot)
                  ORDER BY t.tick_id LIMIT 1)
                >= (SELECT c.skipped_at FROM pglogq.subscription c WHERE c.sub_id = %(sub)s)
                   - (SELECT q.max_consumer_lag FROM pglogq.queue q WHERE q.queue_id = e.ev_queue),
                true)
  FROM pglogq.event e
 WHERE e.ev_queue = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %(queue)s)
   AND (e.ev_owner IS NULL OR e.ev_owner = %(sub)s)
   AND pg_visible_in_snapshot(e.ev_txid, (SELECT t.tick_snapshot FROM pglogq.tick t
                                            WHERE t.queue_id = e.ev_queue AND t.tick_id = %(end)s))
   AND NOT pg_visible_in_snapshot(e.ev_txid, (SELECT t.tick_snapshot FROM pglogq.tick t
                                                WHERE t.queue_id = e.ev_queue AND t.tick_id = %(start)s))
"""

Holder = tuple[int, int, int | None, int | None, int | None, int | None]


def skipped_ranges(before: list[Holder], after: list[Holder]) -> dict[int, list[tuple[int, int]]]:
    """consumer → the (start, end] tick ranges a pass took from it: each open batch of the
    consumer or a worker that the pass closed, and each cursor (the consumer's, a partition
    stream's) it moved forward.  Under the pass's locks nothing else changes these rows."""
    now = {h[1]: h for h in after}
    out: dict[int, list[tuple[int, int]]] = {}
    for consumer, sub, last, batch, prev, cur in before:
        new = now.get(sub)
        if new is None:
            continue
        if batch is not None and new[3] != batch and prev is not None and cur is not None:
            out.setdefault(consumer, []).append((prev, cur))
        if last is not None and new[2] is not None and new[2] > last:
            out.setdefault(consumer, []).append((last, new[2]))
    return out


def retention_pass(dsn: str, queue: str, limit: str, out: Recorder) -> int:
    """One retention pass with ``limit``; records ``skip <id> <consumer> <within>`` for every
    event it made a consumer skip (before the commit: a record too many is harmless, one too
    few would be called lost).  Returns the number of consumers moved."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL lock_timeout = '2s'")
        for (sub,) in conn.execute(
            "SELECT sub_id FROM pglogq.subscription WHERE queue_id = (SELECT queue_id FROM pglogq.queue"
            " WHERE queue_name = %s) AND parent_id IS NULL ORDER BY sub_id", (queue,)
        ).fetchall():
            conn.execute("SELECT 1 FROM pglogq.subscription WHERE parent_id = %s ORDER BY sub_id"
                         " FOR NO KEY UPDATE", (sub,))
            conn.execute("SELECT 1 FROM pglogq.subscription WHERE sub_id = %s FOR NO KEY UPDATE", (sub,))
        consumers = {r[0]: r for r in conn.execute(_CONSUMERS, (queue,)).fetchall()}
        holders = conn.execute(_HOLDERS, (queue,)).fetchall()
        conn.execute("SELECT pglogq.set_queue_config(%s, 'max_consumer_lag', %s)", (queue, limit))
        row = conn.execute("SELECT pglogq.maint_retention(%s)", (queue,)).fetchone()
        ranges = skipped_ranges(holders, conn.execute(_HOLDERS, (queue,)).fetchall())
        records: list[tuple[object, ...]] = []
        for sub, name, skipped_at in conn.execute(_CONSUMERS, (queue,)).fetchall():
            old = consumers.get(sub)
            if old is None or skipped_at == old[2]:
                continue  # not moved
            for start, end in ranges.get(sub, []):
                for ev, within in conn.execute(
                    _SKIPPED, {"start": start, "end": end, "queue": queue, "sub": sub}
                ).fetchall():
                    records.append(("skip", ev, name, int(bool(within))))
        conn.execute("SELECT pglogq.set_queue_config(%s, 'max_consumer_lag', '0')", (queue,))
        out.write_many(records)
    return int(row[0]) if row else 0


def reinstall_schema(dsn: str) -> None:
    """``install_schema()`` on a live database: idempotent, at every start-up of an app."""
    import pglogq

    with pglogq.Client(dsn) as client:
        client.install_schema()


@dataclass
class HeldSnapshot:
    """A REPEATABLE READ transaction holding its snapshot (and the xmin horizon) for a while."""

    conn: psycopg.Connection[Any]
    until: float


@dataclass
class Prepared:
    gid: str
    ids: list[str]
    commit: bool
    due: float


@dataclass
class Nemesis:
    dsn: str
    queue: str
    rng: random.Random
    twopc: Recorder
    held: list[HeldSnapshot] = field(default_factory=list)
    prepared: list[Prepared] = field(default_factory=list)
    seq: int = 0

    def hold_snapshot(self, now: float) -> None:
        conn = psycopg.connect(self.dsn, autocommit=True)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM pglogq.tick")
        self.held.append(HeldSnapshot(conn, now + self.rng.uniform(3, 10)))

    def prepare(self, now: float) -> None:
        """BEGIN; send 1-3 events; PREPARE TRANSACTION; decided later (80 % commit)."""
        self.seq += 1
        gid = f"chaos-{self.seq}"
        ids = [f"2pc:{self.seq}.{i}" for i in range(self.rng.randint(1, 3))]
        commit = self.rng.random() < 0.8
        self.twopc.write_many([("invoke", i) for i in ids])
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("BEGIN")
                for i in ids:
                    conn.execute("SELECT pglogq.send(%s, %s)", (self.queue, Jsonb({"id": i, "poison": is_poison(i)})))
                conn.execute(f"PREPARE TRANSACTION '{gid}'".encode())
        except psycopg.Error:
            # the harness never crashes the server while it prepares: the transaction is gone
            self.twopc.write_many([("fail", i) for i in ids])
            return
        self.prepared.append(Prepared(gid, ids, commit, now + self.rng.uniform(2, 10)))

    def settle(self, now: float, *, everything: bool = False) -> None:
        """Release snapshots and finish prepared transactions whose time has come."""
        for h in list(self.held):
            if everything or now >= h.until:
                with contextlib.suppress(psycopg.Error):
                    h.conn.execute("COMMIT")
                close_quietly(h.conn)
                self.held.remove(h)
        for p in list(self.prepared):
            if everything or now >= p.due:
                self._finish(p)

    def _finish(self, p: Prepared) -> None:
        verb = "COMMIT PREPARED" if p.commit else "ROLLBACK PREPARED"
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f"{verb} '{p.gid}'".encode())
        except psycopg.Error as exc:
            if not definite_failure(exc):
                return  # server down: try again later (the prepared transaction survives)
            raise
        self.twopc.write_many([("ok" if p.commit else "fail", i) for i in p.ids])
        self.prepared.remove(p)

    def drop_connections(self) -> None:
        """After a server crash: the held snapshots are gone (prepared transactions are not)."""
        for h in self.held:
            close_quietly(h.conn)
        self.held.clear()


def wait_until(pred: Any, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False
