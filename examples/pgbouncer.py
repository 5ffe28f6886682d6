"""Producers and workers through PgBouncer in transaction mode; the ticker and LISTEN direct.

Everything that sends, receives, acknowledges or nacks goes through the pooler (a pool of 3
server connections here); two things need a direct connection to PostgreSQL: the ticker (its
one-active-ticker lock is a session lock) and the one connection per consumer that LISTENs for
ticks (``listen_dsn``).  Run it:

    PGLOGQ_DSN=postgresql://app@db:5432/app PGLOGQ_POOLED_DSN=postgresql://app@db:6432/app \\
        python examples/pgbouncer.py

Without ``PGLOGQ_POOLED_DSN`` it starts a throw-away pgbouncer (the ``pgbouncer`` program must be
installed) in front of ``PGLOGQ_DSN`` (else the embedded PostgreSQL).
"""

from __future__ import annotations

import os
import threading
import time

import pglogq
from pglogq.dsn import resolve_dsn

# test-expects: 60 events handled through pgbouncer, 6 of them after a retry
# test-expects: nothing lost

QUEUE = "bouncer_demo"


def main() -> None:
    direct = resolve_dsn(None)  # PGLOGQ_DSN, else the embedded PostgreSQL
    bouncer = None
    pooled = os.environ.get("PGLOGQ_POOLED_DSN")
    if not pooled:
        from _pgbouncer import PgBouncer  # examples/_pgbouncer.py: a throw-away pgbouncer

        bouncer = PgBouncer.start(direct, pool_size=3)
        pooled = bouncer.dsn(direct)
    try:
        run(direct, pooled)
    finally:
        if bouncer is not None:
            bouncer.stop()


def run(direct: str, pooled: str) -> None:
    handled: dict[int, str] = {}
    retried: set[int] = set()
    lock = threading.Lock()

    # pooled=True: the client never prepares statements (the pooler may run the next one
    # on a server connection that never saw them)
    with pglogq.Client(pooled, pooled=True) as client, pglogq.start_ticker(direct):
        client.create_queue(QUEUE)
        client.set_queue_config(QUEUE, "retry_delay", "200ms")
        client.subscribe(QUEUE, "mailer")

        def make_worker(name: str) -> pglogq.Consumer:
            worker = pglogq.Consumer(
                pglogq.Client(pooled, pooled=True, max_size=3), QUEUE, "mailer", worker=name,
                listen_dsn=direct,  # LISTEN needs a direct connection; without it the worker polls
            )

            @worker.handler("mail")
            def send_mail(msg: pglogq.Delivery) -> None:
                n = msg.payload["n"]
                if n % 10 == 0 and msg.retry_count == 0:
                    with lock:
                        retried.add(n)
                    raise RuntimeError("mail server busy")  # nacked: comes back after retry_delay
                with lock:
                    handled[n] = name

            return worker

        workers = [make_worker(f"w{i}") for i in range(3)]
        threads = [threading.Thread(target=w.run) for w in workers]
        for t in threads:
            t.start()
        for start in range(0, 60, 10):  # six transactions: the workers take different batches
            client.send_batch(QUEUE, [{"n": n} for n in range(start, start + 10)], type="mail")
        deadline = time.monotonic() + 60
        while len(handled) < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        for w in workers:
            w.stop()
        for t in threads:
            t.join()
        for w in workers:
            w.client.close()
    by = {name: sum(1 for w in handled.values() if w == name) for name in sorted(set(handled.values()))}
    print(f"{len(handled)} events handled through pgbouncer, {len(retried)} of them after a retry")
    print(f"by worker: {by}")
    print("nothing lost" if sorted(handled) == list(range(60)) else f"LOST: {set(range(60)) - set(handled)}")


if __name__ == "__main__":
    main()
