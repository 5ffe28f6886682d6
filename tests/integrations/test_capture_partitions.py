"""Change capture into a partitioned queue: a captured row's events carry its key.

A real table with real triggers (pglogq.capture_table), written with plain SQL in several
transactions; a consumer of the 4-partition queue must get one row's changes in commit order, and
the stored events must carry the row's key (and so sit in the key's partition)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.cli import fails
from tests.support.draining import drain


@pytest.fixture
def pdb(client: pglogq.Client, dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection with queue 'cdc' of 4 partitions, consumer 'c', table public.orders."""
    client.create_queue("cdc", partitions=4)
    client.subscribe("cdc", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, status text, n int)")
        yield conn


def stored_keys(conn: psycopg.Connection[Any], ids: list[int]) -> list[tuple[str | None, int | None]]:
    """(ev_key, ev_partition) of the stored events ``ids``, in that order."""
    rows = dict(
        (r[0], (r[1], r[2]))
        for r in conn.execute(
            "SELECT ev_id, ev_key, ev_partition FROM pglogq.event WHERE ev_id = ANY (%s)", (ids,)).fetchall()
    )
    return [rows[i] for i in ids]


def test_a_rows_changes_keep_commit_order_on_a_partitioned_queue(
    client: pglogq.Client, pdb: psycopg.Connection[Any]
) -> None:
    client.capture_table("orders", "cdc")
    pdb.execute("INSERT INTO orders VALUES (1, 'new', 0), (2, 'new', 0), (3, 'new', 0)")
    for t in range(6):  # six transactions, ticked now and then: the batches span several ticks
        with pdb.transaction():
            for _ in range(3):
                pdb.execute("UPDATE orders SET n = n + 1 WHERE id = 1")
            pdb.execute("UPDATE orders SET n = n + 1 WHERE id IN (2, 3)")
        if t % 2:
            client.tick("cdc", force=True)
    pdb.execute("DELETE FROM orders WHERE id = 1")
    client.tick("cdc", force=True)
    got = drain(client, "cdc", "c", worker="w1")
    assert len(got) == 3 + 6 * 5 + 1
    row1 = [m for m in got if m.payload["key"] == {"id": 1}]
    assert [(m.type, (m.payload.get("new") or {}).get("n")) for m in row1] == (
        [("insert", 0)] + [("update", n) for n in range(1, 19)] + [("delete", None)])
    for key in (2, 3):
        updates = [m.payload["new"]["n"] for m in got if m.payload["key"] == {"id": key} and m.type == "update"]
        assert updates == list(range(1, 7))
    # the events carry the key header's text as their key: every change of a row in its partition
    for m in got:
        assert m.headers["key"] == str(m.payload["key"]["id"])
    assert {k for k in stored_keys(pdb, [m.msg_id for m in row1])} == {("1", pglogq.key_partition("1", 4))}


def test_the_key_text_of_composite_long_empty_and_null_keys(
    client: pglogq.Client, pdb: psycopg.Connection[Any]
) -> None:
    pdb.execute("CREATE TABLE visits (url text NOT NULL, day int NOT NULL, hits int)")
    pdb.execute("CREATE TABLE notes (name text PRIMARY KEY, body text)")
    pdb.execute("CREATE TABLE tags (tag text, n int)")
    client.capture_table("visits", "cdc", key_columns=["url", "day"])
    client.capture_table("notes", "cdc")
    client.capture_table("tags", "cdc", key_columns=["tag"])
    long = "é" * 200  # 400 bytes: longer than a key may be
    pdb.execute("INSERT INTO visits VALUES ('a|b', 5, 1), ('a', 5, 1)")
    pdb.execute("INSERT INTO notes VALUES (%s, 'long'), ('', 'empty'), ('plain', 'p')", (long,))
    pdb.execute("INSERT INTO tags VALUES (NULL, 1)")  # a NULL key value: sent without a key
    client.tick("cdc", force=True)
    got = sorted(drain(client, "cdc", "c"), key=lambda m: m.msg_id)
    keys = [k for k, _ in stored_keys(pdb, [m.msg_id for m in got])]

    def md5(text: str) -> str:
        return "md5:" + hashlib.md5(text.encode()).hexdigest()

    assert keys == ['["a|b", 5]', '["a", 5]', md5(long), md5(""), "plain", None]
    assert [m.headers["key"] for m in got] == ['["a|b", 5]', '["a", 5]', long, "", "plain", None]


def test_a_table_without_a_key_is_refused_on_a_partitioned_queue(
    client: pglogq.Client, pdb: psycopg.Connection[Any], dsn: str
) -> None:
    pdb.execute("CREATE TABLE log (line text)")
    with pytest.raises(pglogq.NoCaptureKey) as err:
        client.capture_table("log", "cdc")
    assert err.value.sqlstate == "PQ071" and "primary key" in err.value.message
    fails(dsn, 4, "capture", "add", "log", "cdc")
    # nothing was made: no capture listed, no trigger, and writes of the table append nothing
    assert client.captured_tables("cdc") == []
    assert pdb.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'log'::regclass").fetchone() == (0,)
    pdb.execute("INSERT INTO log VALUES ('x')")
    client.tick("cdc", force=True)
    assert drain(client, "cdc", "c") == []


def test_on_a_queue_of_one_partition_the_events_carry_no_key(
    client: pglogq.Client, dsn: str
) -> None:
    # the key would place nothing there: the cheaper unkeyed send, the key in the header only
    client.create_queue("plain")
    client.subscribe("plain", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, status text)")
        client.capture_table("orders", "plain")
        conn.execute("INSERT INTO orders VALUES (7, 'new')")
        client.tick("plain", force=True)
        [m] = drain(client, "plain", "c")
        assert m.headers == {"key": "7", "table": "public.orders"}
        assert stored_keys(conn, [m.msg_id]) == [(None, None)]
