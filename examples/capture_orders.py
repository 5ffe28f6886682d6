"""Change capture: every change of an application table becomes an event, in its transaction.

The application writes its ``orders`` table with plain SQL and knows nothing of pglogq;
``capture_table`` made triggers that append one event per inserted, updated or deleted row to
the queue, in the writer's transaction (a rolled-back change leaves no event).  The events carry
the primary key (also as the "key" header), the new row and the old values of changed columns.
Run it:

    python examples/capture_orders.py        # PGLOGQ_DSN, else the embedded PostgreSQL
"""

from __future__ import annotations

import psycopg

import pglogq
from pglogq.dsn import resolve_dsn

# test-expects: insert key=1 new={'id': 1, 'total': 25, 'status': 'new'}
# test-expects: update key=1 status: 'new' -> 'paid'
# test-expects: delete key=1 old={'id': 1, 'total': 25, 'status': 'paid'}
# test-expects: 3 events; the rolled-back insert of order 2 left none

QUEUE = "orders_cdc"


def main() -> None:
    dsn = resolve_dsn(None)
    with pglogq.Client(dsn) as client, psycopg.connect(dsn, autocommit=True) as app:
        client.install_schema()
        app.execute("DROP TABLE IF EXISTS orders")
        app.execute("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, total int NOT NULL,"
                    " card_number text)")
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "search-index")
        # never publish the card number; UPDATEs carry the old values of the changed columns
        client.capture_table("orders", QUEUE, exclude_columns=["card_number"], old_values="changed")

        # the application, unchanged: plain SQL in its own transactions
        with app.transaction():
            app.execute("INSERT INTO orders VALUES (1, 'new', 25, '4111 1111 1111 1111')")
        with app.transaction():
            app.execute("UPDATE orders SET status = 'paid' WHERE id = 1")
        try:
            with app.transaction():
                app.execute("INSERT INTO orders VALUES (2, 'new', 99, NULL)")
                raise RuntimeError("payment declined")  # rolls back the row and its event
        except RuntimeError:
            pass
        app.execute("DELETE FROM orders WHERE id = 1")

        client.tick(QUEUE, force=True)  # a ticker daemon does this in production
        count = 0
        for msg in client.receive(QUEUE, "search-index"):
            count += 1
            key = msg.headers["key"] if msg.headers else None
            change = msg.payload
            if msg.type == "update":
                diffs = ", ".join(f"{c}: {old!r} -> {change['new'][c]!r}" for c, old in change["old"].items())
                print(f"update key={key} {diffs}")
            elif msg.type == "insert":
                print(f"insert key={key} new={change['new']}")
            elif msg.type == "delete":
                print(f"delete key={key} old={change['old']}")
        client.receive(QUEUE, "search-index").ack()
        print(f"{count} events; the rolled-back insert of order 2 left none")
        client.uncapture_table("orders")


if __name__ == "__main__":
    main()
