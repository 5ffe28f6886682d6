"""Django: the event commits with the order in ``transaction.atomic()``, or not at all.

A stand-alone Django project in one file (settings configured here; in a project they live in
settings.py): orders are saved and their events sent in the same transaction of Django's
connection; a rolled-back order leaves no event; a retried request with the same idempotency
key stores one event; then the management commands tick and run the worker.  Run it:

    pip install -e '.[django]'         # in the checkout (once published: 'pglogq[django]')
    python examples/django_outbox.py   # PGLOGQ_DSN, else the embedded PostgreSQL
"""

from __future__ import annotations

import django
from django.conf import settings
from psycopg.conninfo import conninfo_to_dict

import pglogq
from pglogq.dsn import resolve_dsn

# test-expects: order 1 sent as event 1
# test-expects: order 2 rolled back: no row, no event
# test-expects: order 3 retried: same event
# test-expects: mailer got order 1
# test-expects: mailer got order 3
# test-expects: events delivered: 2

QUEUE = "django_outbox_demo"

# -- settings.py --------------------------------------------------------------------------------
_db = conninfo_to_dict(resolve_dsn())
settings.configure(
    INSTALLED_APPS=["pglogq.contrib.django"],  # the pglogq_worker and pglogq_ticker commands
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": _db.get("dbname", ""), "USER": _db.get("user", ""), "PASSWORD": _db.get("password", ""),
            "HOST": _db.get("host", ""), "PORT": _db.get("port", ""),
        }
    },
    PGLOGQ={"DATABASE": "default"},  # the alias that holds pglogq (the DSN of workers comes from it)
    USE_TZ=True,
)
django.setup()

from django.core.management import call_command  # noqa: E402  (after django.setup())
from django.db import connection, transaction  # noqa: E402

from pglogq.contrib.django import send  # noqa: E402

# -- the consumer: `python manage.py pglogq_worker myapp.consumers:consumer` ---------------------
consumer = pglogq.Consumer(None, QUEUE, "mailer")
delivered: list[int] = []


@consumer.handler("order.created")
def mail(msg: pglogq.Delivery) -> None:
    delivered.append(msg.payload["order_id"])
    print(f"mailer got order {msg.payload['order_id']}")


# -- a view's work ------------------------------------------------------------------------------
def place_order(order_id: int, total: int) -> int:
    """Save the order and send its event in one transaction; a retried request (same order id)
    stores no second event: the idempotency key returns the first event's id."""
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("INSERT INTO shop_order VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", [order_id, total])
        msg_id = send(QUEUE, {"order_id": order_id}, type="order.created", idempotency_key=f"order-{order_id}")
        if total < 0:
            raise ValueError(f"order {order_id}: negative total")  # rolls back the row and the event
        return msg_id


def main() -> None:
    with pglogq.Client(resolve_dsn()) as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "mailer")
    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS shop_order")
        cur.execute("CREATE TABLE shop_order (id int PRIMARY KEY, total int NOT NULL)")

    print(f"order 1 sent as event {place_order(1, 25)}")
    try:
        place_order(2, -5)
    except ValueError:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM shop_order WHERE id = 2")
            (rows,) = cur.fetchone()
        print(f"order 2 rolled back: {'no row' if rows == 0 else 'a row!'}, no event")
    first = place_order(3, 40)
    print(f"order 3 retried: {'same' if place_order(3, 40) == first else 'another'} event {first}")

    call_command("pglogq_ticker", "--once", "--log-level", "WARNING")  # in production: a daemon
    call_command("pglogq_worker", "__main__:consumer", "--stop-when-idle", "--log-level", "WARNING")
    print(f"events delivered: {len(delivered)}")

    with connection.cursor() as cur:
        cur.execute("DROP TABLE shop_order")
    with pglogq.Client(resolve_dsn()) as client:
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
