"""SQLAlchemy: the event commits with the session's transaction, sync and async, any driver.

The same request handler twice: with a ``Session`` (psycopg driver) and with an
``AsyncSession`` (asyncpg driver).  pglogq's SQL function runs through the session's own
connection, so a committed order is delivered, a rolled-back one leaves no event, and a retried
request with the same idempotency key stores one event.  Run it:

    pip install -e '.[sqlalchemy]' asyncpg   # in the checkout (once published: 'pglogq[sqlalchemy]')
    python examples/sqlalchemy_outbox.py   # PGLOGQ_DSN, else the embedded PostgreSQL
"""

from __future__ import annotations

import asyncio
import contextlib

from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import URL, create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pglogq
from pglogq.contrib.sqlalchemy import send, send_async
from pglogq.dsn import resolve_dsn

# test-expects: sync: order 1 committed, order 2 rolled back, order 3 retried once
# test-expects: async: order 11 committed, order 12 rolled back, order 13 retried once
# test-expects: delivered orders: [1, 3, 11, 13]

QUEUE = "sqlalchemy_outbox_demo"
INSERT = text("INSERT INTO shop_order VALUES (:id, :total) ON CONFLICT (id) DO NOTHING")


def url(dsn: str, driver: str) -> URL:
    """A SQLAlchemy URL for a libpq DSN (a socket directory goes in the query)."""
    p = conninfo_to_dict(dsn)
    host = str(p.get("host") or "")
    socket = host.startswith("/")
    return URL.create(
        f"postgresql+{driver}", username=p.get("user"), password=p.get("password"),
        host=None if socket else host or None, port=int(p["port"]) if p.get("port") else None,
        database=p.get("dbname"), query={"host": host} if socket else {},
    )


def place_order(session: Session, order_id: int, total: int) -> int:
    """Save the order and send its event in the session's transaction."""
    with session.begin():
        session.execute(INSERT, {"id": order_id, "total": total})
        msg_id = send(session, QUEUE, {"order_id": order_id}, type="order.created",
                      idempotency_key=f"order-{order_id}")
        if total < 0:
            raise ValueError(f"order {order_id}: negative total")  # rolls back the row and the event
        return msg_id


async def place_order_async(session: AsyncSession, order_id: int, total: int) -> int:
    """The same with an AsyncSession."""
    async with session.begin():
        await session.execute(INSERT, {"id": order_id, "total": total})
        msg_id = await send_async(session, QUEUE, {"order_id": order_id}, type="order.created",
                                  idempotency_key=f"order-{order_id}")
        if total < 0:
            raise ValueError(f"order {order_id}: negative total")
        return msg_id


def run_sync(dsn: str) -> None:
    engine = create_engine(url(dsn, "psycopg"))  # or psycopg2, pg8000...
    with Session(engine) as session:
        place_order(session, 1, 25)
        with contextlib.suppress(ValueError):
            place_order(session, 2, -5)
        retried = place_order(session, 3, 40) == place_order(session, 3, 40)
    engine.dispose()
    print(f"sync: order 1 committed, order 2 rolled back, order 3 retried {'once' if retried else 'twice!'}")


async def run_async(dsn: str) -> None:
    engine = create_async_engine(url(dsn, "asyncpg"))  # or psycopg (its async mode)
    async with AsyncSession(engine) as session:
        await place_order_async(session, 11, 25)
        with contextlib.suppress(ValueError):
            await place_order_async(session, 12, -5)
        retried = await place_order_async(session, 13, 40) == await place_order_async(session, 13, 40)
    await engine.dispose()
    print(f"async: order 11 committed, order 12 rolled back, order 13 retried {'once' if retried else 'twice!'}")


def main() -> None:
    dsn = resolve_dsn()
    with pglogq.Client(dsn) as client:
        client.drop_queue(QUEUE, force=True)
        client.create_queue(QUEUE)
        client.subscribe(QUEUE, "mailer")
        with client.connection() as conn:
            conn.execute("DROP TABLE IF EXISTS shop_order")
            conn.execute("CREATE TABLE shop_order (id int PRIMARY KEY, total int NOT NULL)")

        run_sync(dsn)
        asyncio.run(run_async(dsn))

        client.tick(QUEUE, force=True)  # the pglogq-ticker daemon does this in production
        batch = client.receive(QUEUE, "mailer")
        print(f"delivered orders: {[m.payload['order_id'] for m in batch]}")
        batch.ack()
        with client.connection() as conn:
            conn.execute("DROP TABLE shop_order")
        client.drop_queue(QUEUE, force=True)


if __name__ == "__main__":
    main()
