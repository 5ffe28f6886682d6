"""Partitions on the client side: create_queue(partitions), send(key), send_batch(keys),
the errors PQ075 / PQ076 and the key rule of pglogq.key_slot / key_partition."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pglogq
from pglogq.errors import BY_SQLSTATE, translate


def stored(dsn: str) -> list[tuple[int, str | None, int | None]]:
    """(msg_id, key, partition) of every stored event, by id."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT ev_id, ev_key, ev_partition FROM pglogq.event ORDER BY ev_id").fetchall()
    return [(int(r[0]), r[1], r[2]) for r in rows]


def test_create_queue_with_partitions_round_trip(api: Any) -> None:
    assert api.create_queue("parts", partitions=8) is True
    assert api.create_queue("parts", partitions=3) is False  # exists: nothing changes
    assert api.create_queue("plain") is True
    info = {i.queue_name: i.partitions for i in api.queue_info()}
    assert info == {"parts": 8, "plain": 1}
    assert api.create_queue("most", partitions=1024) is True


@pytest.mark.parametrize("bad", [0, -1, 1025, 2**31, True, False, None, "8", 8.0])
def test_bad_partition_counts_are_refused_before_sql(api: Any, bad: Any) -> None:
    with pytest.raises(pglogq.InvalidPartitions, match="partition count"):
        api.create_queue("q", partitions=bad)
    assert api.queue_info() == []


def test_server_pq075_maps_to_invalid_partitions(dsn: str) -> None:
    assert BY_SQLSTATE["PQ075"] is pglogq.InvalidPartitions
    with psycopg.connect(dsn, autocommit=True) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '0')")
    err = translate(info.value)
    assert isinstance(err, pglogq.InvalidPartitions) and err.sqlstate == "PQ075"


def test_send_key_goes_to_its_partition(api: Any, dsn: str) -> None:
    api.create_queue("q", partitions=8)
    a = api.send("q", {"n": 1}, key="customer-7")
    b = api.send("q", {"n": 2})  # no key: the short statement, spread by id
    c = api.send("q", {"n": 3}, type="t", key="ü-ключ")
    ids = api.send_batch("q", [{"n": 4}, {"n": 5}], keys=["customer-7", "x"])
    assert stored(dsn) == [
        (a, "customer-7", pglogq.key_partition("customer-7", 8)),
        (b, None, b % 8),
        (c, "ü-ключ", pglogq.key_partition("ü-ключ", 8)),
        (ids[0], "customer-7", pglogq.key_partition("customer-7", 8)),
        (ids[1], "x", pglogq.key_partition("x", 8)),
    ]


def test_keys_are_stored_on_an_unpartitioned_queue(api: Any, dsn: str) -> None:
    api.create_queue("q")
    a = api.send("q", 1, key="k" * 255)
    ids = api.send_batch("q", [2, 3], keys=("é" * 127, "a"))  # 254 bytes
    assert [(i, k) for i, k, _ in stored(dsn)] == [(a, "k" * 255), (ids[0], "é" * 127), (ids[1], "a")]


@pytest.mark.parametrize("bad", ["", "k" * 256, "é" * 128, "a\x00b", "\ud800", 42, b"key"])
def test_bad_key_is_refused_and_nothing_sent(api: Any, dsn: str, bad: Any) -> None:
    api.create_queue("q", partitions=4)
    with pytest.raises(pglogq.InvalidKey, match="key"):
        api.send("q", {"n": 1}, key=bad)
    with pytest.raises(pglogq.InvalidKey, match="position 2"):
        api.send_batch("q", [1, 2], keys=["ok", bad])
    assert stored(dsn) == []


@pytest.mark.parametrize(("keys", "match"), [
    ("ab", "not a single str"),
    (["a", None], "position 2: a str is expected, got None"),
    (["a"], "keys has 1 elements, payloads has 2"),
    (["a", "b", "c"], "keys has 3 elements, payloads has 2"),
    ({"a": 1, "b": 2}, "not dict"),
    (7, "not int"),
])
def test_bad_keys_list_is_refused_and_nothing_sent(api: Any, dsn: str, keys: Any, match: str) -> None:
    api.create_queue("q", partitions=4)
    with pytest.raises(pglogq.InvalidKey, match=match):
        api.send_batch("q", [1, 2], keys=keys)
    assert stored(dsn) == []


def test_server_pq076_maps_to_invalid_key(dsn: str) -> None:
    assert BY_SQLSTATE["PQ076"] is pglogq.InvalidKey
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.set_queue_config('q', 'partitions', '2')")
        conn.commit()
        for sql in ("SELECT pglogq.send_keyed('q', '1', '')",
                    "SELECT pglogq.send_batch_keyed('q', '[1, 2]', ARRAY['a'])"):
            with pytest.raises(psycopg.Error) as info:
                conn.execute(sql)
            conn.rollback()
            err = translate(info.value)
            assert isinstance(err, pglogq.InvalidKey) and err.sqlstate == "PQ076", sql


KEYS = ["", "a", "k-1", "customer-7", "é", "ü-ключ", "日本語のキー", "🙂🙂", "x" * 255, "a b\tc"]


def test_key_slot_agrees_with_sql(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT k, pglogq.key_slot(k), pglogq.key_slot(k) %% 8, pglogq.key_slot(k) %% 1000"
            " FROM unnest(%s::text[]) k", (KEYS,)
        ).fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (k, pglogq.key_slot(k), pglogq.key_partition(k, 8), pglogq.key_partition(k, 1000)) for k in KEYS
    ]
    assert all(0 <= pglogq.key_slot(k) < 16384 for k in KEYS)


def test_key_helpers_refuse_bad_arguments() -> None:
    assert pglogq.key_partition("a", 1) == 0
    for bad in (0, 1025, True, 2.0):
        with pytest.raises(pglogq.InvalidPartitions):
            pglogq.key_partition("a", bad)  # type: ignore[arg-type]
    with pytest.raises(pglogq.InvalidKey):
        pglogq.key_slot(None)  # type: ignore[arg-type]
    with pytest.raises(pglogq.InvalidKey):
        pglogq.key_slot("\udc00")


def test_an_urgent_lane_queue_hands_urgent_events_first(client: pglogq.Client) -> None:
    assert client.create_queue("lane", urgent_lane=True)
    client.subscribe("lane", "c")
    client.send_batch("lane", [{"n": i} for i in range(50)])
    client.tick("lane", force=True)
    first = client.receive("lane", "c", max_messages=10)
    vip = client.send("lane", {"vip": True}, priority=150)
    client.tick("lane", force=True)
    first.ack()
    assert [m.msg_id for m in client.receive("lane", "c", max_messages=10)] == [vip]


@pytest.mark.parametrize("bad", [None, 1, "yes"])
def test_a_bad_urgent_lane_is_refused_and_creates_nothing(client: pglogq.Client, bad: object) -> None:
    with pytest.raises(pglogq.InvalidUrgentLane):
        client.create_queue("lane", urgent_lane=bad)  # type: ignore[arg-type]
    with pytest.raises(pglogq.InvalidUrgentLane):
        client.create_queue("lane", partitions=4, urgent_lane=True)
    with pytest.raises(pglogq.InvalidPartitions):
        client.create_queue("lane", partitions=0, urgent_lane=True)
    assert client.queue_info() == []
