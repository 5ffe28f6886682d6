"""``receive(..., ack=page)``: the page acknowledged and the next one received in one statement
and one transaction (SQL ``pglogq.ack_receive``), all or nothing."""

from __future__ import annotations

import psycopg
import pytest

import pglogq
from pglogq.errors import InvalidArgument, StaleBatch

Q = "q"


def _ids(batch: pglogq.Batch) -> list[int]:
    return [m.msg_id for m in batch]


@pytest.fixture
def sent(client: pglogq.Client) -> list[int]:
    client.create_queue(Q)
    client.subscribe(Q, "c")
    client.subscribe(Q, "sh", share=True)
    client.subscribe(Q, "ln", share=True, lanes=True)
    ids = [client.send(Q, {"n": i}) for i in range(7)]
    client.tick(Q, force=True)
    return ids


@pytest.mark.parametrize(("consumer", "worker"), [("c", None), ("c", "w"), ("sh", "w"), ("ln", "w")])
def test_each_page_acknowledged_with_the_next_receive(client: pglogq.Client, sent: list[int], consumer: str,
                                                      worker: str | None) -> None:
    got: list[int] = []
    page = client.receive(Q, consumer, worker=worker, max_messages=3)
    while page.messages:
        got.extend(_ids(page))
        page = client.receive(Q, consumer, worker=worker, max_messages=3, ack=page)
    assert sorted(got) == sent
    assert client.receive(Q, consumer, worker=worker, ack=page).messages == []  # an empty page: nothing to ack
    (info,) = client.consumer_info(Q, consumer)
    assert info.open_batches == 0


def test_a_refused_ack_receives_nothing(client: pglogq.Client, sent: list[int]) -> None:
    first = client.receive(Q, "c", max_messages=2)
    second = client.receive(Q, "c", max_messages=2, ack=first)
    with pytest.raises(StaleBatch):
        client.receive(Q, "c", max_messages=2, ack=first)  # acknowledged already
    assert _ids(client.receive(Q, "c", max_messages=2)) == _ids(second)  # the same page: nothing moved
    a = client.receive(Q, "sh", worker="a", max_messages=2)
    b = client.receive(Q, "sh", worker="b", max_messages=2)
    with pytest.raises(StaleBatch):
        client.receive(Q, "sh", worker="b", max_messages=2, ack=a)  # another worker's lease
    assert _ids(client.receive(Q, "sh", worker="a", max_messages=2)) == _ids(a)  # a's lease, unacknowledged
    assert _ids(client.receive(Q, "sh", worker="b", max_messages=2)) == _ids(b)
    with pytest.raises(InvalidArgument):
        client.receive(Q, "c", ack=42)  # type: ignore[arg-type]


def test_in_the_callers_transaction_a_rollback_undoes_both(client: pglogq.Client, sent: list[int], dsn: str) -> None:
    first = client.receive(Q, "c", max_messages=2)
    with psycopg.connect(dsn) as conn:
        nxt = client.receive(Q, "c", max_messages=2, ack=first, conn=conn)
        assert _ids(nxt) == sent[2:4]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # not committed for us
        conn.rollback()
    assert _ids(client.receive(Q, "c", max_messages=2)) == _ids(first)  # as before: unacknowledged
