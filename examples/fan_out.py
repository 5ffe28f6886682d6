"""Fan-out with a dead-letter queue: three subscribers read one stored copy of every event.

"billing" fails on one order every time: the event is retried (to billing only) and, after
max_retries, dead-lettered; "shipping" and "audit" are not affected.  Run it:

    python examples/fan_out.py        # PGLOGQ_DSN, else the embedded PostgreSQL

It creates (or reuses) the queue "fanout_demo" and drops it at the end.
"""

from __future__ import annotations

from datetime import timedelta

import pglogq

# test-expects: shipping got orders [1, 2, 3, 4, 5]
# test-expects: dead letters of billing: [3]
# test-expects: 5 event rows stored for 3 subscribers

QUEUE = "fanout_demo"
CONSUMERS = ("billing", "shipping", "audit")


def handle(consumer: str, order: dict[str, int]) -> None:
    """Pretend to process an order; billing cannot charge order 3."""
    if consumer == "billing" and order["id"] == 3:
        raise RuntimeError("card declined")


def drain(client: pglogq.Client, consumer: str) -> list[int]:
    """Receive and acknowledge everything ticked for one consumer; returns the ids handled."""
    done: list[int] = []
    while batch := client.receive(QUEUE, consumer, max_messages=100):
        for msg in batch:
            try:
                handle(consumer, msg.payload)
                done.append(msg.payload["id"])
            except RuntimeError as exc:
                outcome = batch.nack(msg, retry_after=timedelta(0), reason=str(exc))
                print(f"  {consumer}: order {msg.payload['id']} failed ({exc}), try {msg.retry_count + 1}: {outcome}")
        batch.ack()  # after the nacks: the failures are already on their way back
    return done


def main() -> None:
    with pglogq.Client() as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.set_queue_config(QUEUE, "max_retries", 2)  # 1 try + 2 retries, then the DLQ
        for consumer in CONSUMERS:
            client.subscribe(QUEUE, consumer)

        client.send_batch(QUEUE, [{"id": i} for i in range(1, 6)], type="order.created")
        client.tick(QUEUE, force=True)  # the pglogq-ticker daemon does this in production
        for consumer in CONSUMERS:
            print(f"{consumer} got orders {drain(client, consumer)}")
        with client.connection() as conn:  # a peek at the storage: one row per event, not per subscriber
            row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        print(f"{row[0] if row else 0} event rows stored for {len(CONSUMERS)} subscribers")

        # retries come back through the pump (run by the ticker daemon's maintenance)
        for _ in range(3):
            client.maintain()
            client.tick(QUEUE, force=True)
            drain(client, "billing")

        dead = client.dlq_inspect(QUEUE, "billing")
        print(f"dead letters of billing: {[d.payload['id'] for d in dead]}")
        for d in dead:
            print(f"  dead_id={d.dead_id} msg_id={d.msg_id} retries={d.retry_count} reason={d.reason!r}")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
