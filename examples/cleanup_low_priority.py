"""Low-priority cleanup in batches: plenty of it, none of it urgent.

Cleanup tasks (temporary files, expired sessions, old logs) are queued at priority 30
("backfill"); while they wait, routine reports (100) and a user-triggered export (150) arrive.
One worker drains the backlog: the urgent work first, then the cleanup, which a batch handler
takes a page at a time (one DELETE for many rows is cheaper than one per row).  Run it:

    python examples/cleanup_low_priority.py        # PGLOGQ_DSN, else the embedded PostgreSQL

It creates (or reuses) the queue "cleanup_demo" and drops it at the end.
"""

from __future__ import annotations

import pglogq

# test-expects: order of work: export, report, report, report, cleanup x25
# test-expects: cleanup ran in 3 batches: 6, 10, 9 tasks
# test-expects: 29 tasks done, 0 failed

QUEUE = "cleanup_demo"
USER_TRIGGERED, ROUTINE, BACKFILL = 150, 100, 30


def main() -> None:
    with pglogq.Client() as client:
        client.install_schema()  # idempotent
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "housekeeping")

        kinds = ["temp_file", "session", "log"]
        client.send_batch(QUEUE, [{"what": kinds[i % 3], "n": i} for i in range(25)], type="cleanup",
                          priority=BACKFILL)
        client.tick(QUEUE, force=True)  # the pglogq-ticker daemon ticks in production
        for day in ("mon", "tue", "wed"):
            client.send(QUEUE, {"report": day}, type="report", priority=ROUTINE)
        client.tick(QUEUE, force=True)
        client.send(QUEUE, {"export": "all orders"}, type="export", priority=USER_TRIGGERED)
        client.tick(QUEUE, force=True)

        order: list[str] = []
        batches: list[int] = []
        worker = pglogq.Consumer(client, QUEUE, "housekeeping", max_messages=10)

        @worker.batch_handler("cleanup")
        def clean_up(tasks: list[pglogq.Delivery]) -> None:
            batches.append(len(tasks))
            order.extend("cleanup" for _ in tasks)
            counts = {k: sum(t.payload["what"] == k for t in tasks) for k in kinds}
            print(f"  cleanup batch of {len(tasks)}: {counts}")

        @worker.handler()
        def urgent(msg: pglogq.Delivery) -> None:
            order.append(msg.type or "?")
            print(f"  {msg.type} (priority {msg.priority}): {msg.payload}")

        stats = worker.run(stop_when_idle=True)
        head = [t for t in order if t != "cleanup"]
        print(f"order of work: {', '.join(head)}, cleanup x{order.count('cleanup')}")
        print(f"cleanup ran in {len(batches)} batches: {', '.join(map(str, batches))} tasks")
        print(f"{stats.handled} tasks done, {stats.failed} failed")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
