"""A chaos consumer of the ``sharded`` mode: a :class:`pglogq.Consumer` over a ShardedClient.

``python -m tests.harness.chaos.sharded_consumer --seed-dsn DSN [...] --queue Q --consumer C [--worker W]
[--workers N] --dir D --seed N``

The Consumer runs ``--workers`` receive loops per shard (each with its own listener and polling
fallback; a shard that is down only stops its loops).  Its handler records every delivery *before* the
Consumer acknowledges it, as a page of one event in the keyed mode's format (``page`` with the
handler's start as both the receive's call and return time, ``deliver`` with the key and its
sequence, ``done`` when the handler ends): the checker's per-key order and keys-in-flight
analyses then read it as they read the keyed mode's pages.  Each thread of the process (one per
loop) writes its own file ``consumer-<tag>-<pid>-<n>.log``, so that a file's pages are
sequential; the worker field is the receive loop's worker name (``--worker`` itself for a worker
process of one loop per shard, the same across restarts, so that a restarted process getting its
own page back is not an overlap; ``host:pid-i`` for the loops of ``--workers N`` without
``--worker``: a restarted process's loops take the dead one's pages over after dead_interval).

Poison events raise (nacked until dead-lettered); about 1 % of the others raise once (their
first delivery).  The handler takes 0-3 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.harness.chaos.history import Recorder


class Nacked(Exception):
    """Raised by the handler on purpose: the Consumer nacks the event."""


class Recording:
    """The handler: one record file per thread of this process."""

    def __init__(self, directory: Path, tag: str, consumer: str, worker: str | None, seed: int) -> None:
        self.directory = directory
        self.tag = tag
        self.consumer = consumer
        self.worker = worker or "-"
        self.token = secrets.token_hex(4)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.files = 0
        self.pages = 0
        self.rng = random.Random(seed)

    def recorder(self) -> Recorder:
        rec: Recorder | None = getattr(self.local, "rec", None)
        if rec is None:
            with self.lock:
                self.files += 1
                n = self.files
            rec = self.local.rec = Recorder(self.directory / f"consumer-{self.tag}-{os.getpid()}-{n}.log")
        return rec

    def __call__(self, msg: Any) -> None:
        out = self.recorder()
        now = time.monotonic()
        with self.lock:
            self.pages += 1
            page = f"{self.token}.{self.pages}"
            slow = self.rng.uniform(0, 0.003)
            flaky = self.rng.random() < 0.01
        body = msg.payload
        worker = msg.worker or self.worker
        out.write_many([
            ("page", page, self.consumer, worker, f"{now:.6f}", f"{now:.6f}", 1),
            ("deliver", body["id"], msg.batch_id, self.consumer, worker, msg.retry_count, page,
             body.get("key", "-"), body.get("kseq", "-")),
        ])
        time.sleep(slow)
        out.write("done", page, f"{time.monotonic():.6f}")
        if body.get("poison") or (flaky and msg.retry_count == 0):
            raise Nacked(body["id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed-dsn", action="append", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--consumer", required=True)
    ap.add_argument("--worker")
    ap.add_argument("--dir", required=True, type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="Receive loops per shard in this process.")
    ap.add_argument("--tag", help="Name of the record files (default: consumer[-worker]).")
    a = ap.parse_args()
    tag = a.tag or a.consumer + (f"-{a.worker}" if a.worker else "")

    import pglogq
    from pglogq.cluster.sharded_client import ShardedClient

    client = None
    while client is None:  # a shard may be down when the process (re)starts
        try:
            client = ShardedClient(a.seed_dsn)
        except Exception:
            time.sleep(0.2)
    rng = random.Random(a.seed)
    consumer = pglogq.Consumer(client, a.queue, a.consumer, worker=a.worker, heartbeat_interval=0.5,
                               poll_interval=0.5, max_messages=rng.choice((None, 20, 200)),
                               workers=a.workers)
    consumer.handler()(Recording(a.dir, tag, a.consumer, a.worker, a.seed))

    def stop(*_: object) -> None:
        consumer.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        consumer.run()
    finally:
        client.close()


if __name__ == "__main__":
    main()
