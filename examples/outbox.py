"""Transactional outbox: the event commits with the business data, or not at all.

An order is inserted into the application's own table and its "order.created" event is sent
with ``conn=`` in the same transaction.  A rolled-back order leaves no event behind; a committed
one is always delivered.  Run it:

    python examples/outbox.py        # PGLOGQ_DSN, else the embedded PostgreSQL
"""

from __future__ import annotations

import psycopg

import pglogq

# test-expects: delivered: order 1 (total 25)
# test-expects: rolled back: order 2 and its event are both gone

QUEUE = "outbox_demo"


def place_order(client: pglogq.Client, conn: psycopg.Connection, order_id: int, total: int) -> None:
    """Insert the order and its event in one transaction of the application's connection."""
    with conn.transaction():
        conn.execute("INSERT INTO shop_order (id, total) VALUES (%s, %s)", (order_id, total))
        client.send(QUEUE, {"order_id": order_id, "total": total}, type="order.created", conn=conn)
        if total < 0:
            raise ValueError(f"order {order_id}: negative total")  # rolls back both


def main() -> None:
    with pglogq.Client() as client, psycopg.connect(client.dsn or "", autocommit=True) as conn:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "mailer")
        conn.execute("DROP TABLE IF EXISTS shop_order")
        conn.execute("CREATE TABLE shop_order (id int PRIMARY KEY, total int NOT NULL)")

        place_order(client, conn, 1, 25)
        try:
            place_order(client, conn, 2, -5)
        except ValueError as exc:
            print(f"failed: {exc}")

        client.tick(QUEUE, force=True)  # the pglogq-ticker daemon does this in production
        batch = client.receive(QUEUE, "mailer")
        for m in batch:
            print(f"delivered: order {m.payload['order_id']} (total {m.payload['total']})")
        batch.ack()

        row = conn.execute("SELECT count(*) FROM shop_order WHERE id = 2").fetchone()
        if row and row[0] == 0 and all(m.payload["order_id"] != 2 for m in batch):
            print("rolled back: order 2 and its event are both gone")
        conn.execute("DROP TABLE shop_order")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
