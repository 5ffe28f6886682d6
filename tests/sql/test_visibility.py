"""Which events a batch holds: only committed ones, in the batch where they become visible."""

from __future__ import annotations

import uuid

import psycopg
import pytest

import pglogq


@pytest.fixture
def q(client: pglogq.Client) -> str:
    client.create_queue("q")
    client.subscribe("q", "c")
    return "q"


def payloads(client: pglogq.Client) -> list[object]:
    out: list[object] = []
    while True:
        batch = client.receive("q", "c", max_messages=1000)
        if not batch:
            return out
        out.extend(m.payload for m in batch)
        batch.ack()


def test_send_tick_receive_in_one_transaction_delivers_nothing(client: pglogq.Client, dsn: str, q: str) -> None:
    with psycopg.connect(dsn) as conn:
        client.send(q, {"n": 1}, conn=conn)
        client.tick(q, force=True, conn=conn)
        assert len(client.receive(q, "c", conn=conn)) == 0
        conn.commit()
    # after the commit, the next tick delivers it
    client.tick(q, force=True)
    assert payloads(client) == [{"n": 1}]


def test_rolled_back_sends_are_never_delivered(client: pglogq.Client, dsn: str, q: str) -> None:
    with psycopg.connect(dsn) as conn:
        client.send(q, {"rolled": "back"}, conn=conn)
        conn.rollback()
        with conn.transaction():
            client.send(q, {"kept": 1}, conn=conn)
            with pytest.raises(RuntimeError), conn.transaction():
                client.send(q, {"savepoint": "rolled back"}, conn=conn)
                raise RuntimeError("roll back to the savepoint")
            with conn.transaction():
                client.send(q, {"savepoint": "released"}, conn=conn)
    client.tick(q, force=True)
    assert payloads(client) == [{"kept": 1}, {"savepoint": "released"}]


def test_event_of_a_transaction_open_across_ticks_arrives_when_visible(
    client: pglogq.Client, dsn: str, q: str
) -> None:
    with psycopg.connect(dsn) as slow:
        client.send(q, {"slow": True}, conn=slow)  # xid assigned, not committed
        for i in range(3):
            client.send(q, {"fast": i})
            client.tick(q, force=True)
            assert payloads(client) == [{"fast": i}]
        slow.commit()
    assert payloads(client) == []  # not ticked yet
    client.tick(q, force=True)
    assert payloads(client) == [{"slow": True}]


def test_prepared_transaction_event_arrives_after_commit_prepared(
    client: pglogq.Client, dsn: str, q: str
) -> None:
    with psycopg.connect(dsn) as conn:
        setting = conn.execute("SHOW max_prepared_transactions").fetchone()
        if not setting or int(setting[0]) == 0:
            pytest.skip("max_prepared_transactions = 0 on this server (the embedded test server enables it)")
    gids = [f"pglogq-{uuid.uuid4()}" for _ in range(2)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for gid, n in zip(gids, (1, 2), strict=True):
            conn.execute("BEGIN")
            client.send(q, {"prepared": n}, conn=conn)
            conn.execute(f"PREPARE TRANSACTION '{gid}'")
        client.tick(q, force=True)
        assert payloads(client) == []
        conn.execute(f"COMMIT PREPARED '{gids[0]}'")
        conn.execute(f"ROLLBACK PREPARED '{gids[1]}'")
    client.tick(q, force=True)
    assert payloads(client) == [{"prepared": 1}]
    client.tick(q, force=True)
    assert payloads(client) == []


def test_ticker_refuses_repeatable_read(client: pglogq.Client, dsn: str, q: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(pglogq.TickerMisuse):
            client.tick(q, force=True, conn=conn)
