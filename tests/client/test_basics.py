"""The core contract, run on both Client and AsyncClient."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pglogq


def test_send_tick_receive_ack_fan_out(api: Any, dsn: str) -> None:
    assert api.create_queue("orders") is True
    assert api.create_queue("orders") is False
    for name in ("billing", "audit", "search"):
        assert api.subscribe("orders", name) is True
    assert api.subscribe("orders", "billing") is False
    one = api.send("orders", {"id": 42}, type="order.created")
    more = api.send_batch("orders", [{"id": 43}, {"id": 44}], type="order.created")
    assert more == [one + 1, one + 2]
    assert api.tick("orders", force=True) == 1
    for name in ("billing", "audit", "search"):
        batch = api.receive("orders", name)
        assert [m.payload["id"] for m in batch] == [42, 43, 44]
        assert {m.type for m in batch} == {"order.created"}
        assert batch.ack() is True
        assert len(api.receive("orders", name)) == 0
    # one stored copy whatever the number of subscribers
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
        assert row is not None and row[0] == 3


def test_receive_before_any_tick_is_empty(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    api.send("q", {"a": 1})
    batch = api.receive("q", "c")
    assert len(batch) == 0 and batch.id is None
    assert batch.ack() is False


def test_receive_repeats_until_ack(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    api.send_batch("q", [{"n": i} for i in range(5)])
    api.tick("q", force=True)
    first = api.receive("q", "c", max_messages=10)
    again = api.receive("q", "c", max_messages=10)
    assert first.id == again.id
    assert [m.msg_id for m in first] == [m.msg_id for m in again]


def test_partial_receive_pages_through_the_batch(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    ids = api.send_batch("q", [{"n": i} for i in range(10)])
    api.tick("q", force=True)
    seen: list[int] = []
    batch_ids = set()
    while True:
        page = api.receive("q", "c", max_messages=3)
        if not page:
            break
        batch_ids.add(page.id)
        seen.extend(m.msg_id for m in page)
        assert page.ack() is True
    assert seen == ids
    assert len(batch_ids) == 1


def test_ack_acknowledges_exactly_the_returned_page(api: Any) -> None:
    api.create_queue("q")
    api.subscribe("q", "c")
    ids = api.send_batch("q", [{"n": i} for i in range(6)])
    api.tick("q", force=True)
    page = api.receive("q", "c", max_messages=2)
    page.ack()
    # a new event ticked meanwhile does not change the open batch
    api.send("q", {"late": True})
    api.tick("q", force=True)
    rest = api.receive("q", "c", max_messages=100)
    assert [m.msg_id for m in rest] == ids[2:]
    rest.ack()
    late = api.receive("q", "c")
    assert [m.payload for m in late] == [{"late": True}]


def test_unknown_queue_and_consumer(api: Any) -> None:
    api.create_queue("orders")
    with pytest.raises(pglogq.UnknownQueue) as e:
        api.send("order", {})
    assert "did you mean" in str(e.value)
    with pytest.raises(pglogq.UnknownConsumer):
        api.receive("orders", "nobody")


def test_send_in_caller_transaction(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    with psycopg.connect(dsn) as conn:
        client.send("q", {"kept": True}, conn=conn)
        conn.commit()
        client.send("q", {"kept": False}, conn=conn)
        conn.rollback()
    client.tick("q", force=True)
    assert [m.payload for m in client.receive("q", "c")] == [{"kept": True}]
