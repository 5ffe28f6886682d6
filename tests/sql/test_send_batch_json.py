"""send_batch_json inserts straight from the JSON array: the same events, ids,
errors and refusals as send_batch given the same payloads as a jsonb[]; and send's inline checks
(its short path, which skips a call of _check_event) give the same errors as _check_event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pglogq

EVENTS = ("SELECT ev_id, ev_type, ev_payload, ev_headers, ev_priority FROM pglogq.event"
          " WHERE ev_queue = (SELECT queue_id FROM pglogq.queue WHERE queue_name = %s) ORDER BY ev_id")


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
        c.create_queue("r")
        c.set_queue_config("q", "max_payload_bytes", 1000)
        c.set_queue_config("r", "max_payload_bytes", 1000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def _events(conn: psycopg.Connection[Any], queue: str) -> list[tuple[Any, ...]]:
    return conn.execute(EVENTS, (queue,)).fetchall()


def test_ids_follow_the_array_and_every_event_carries_the_options(conn: psycopg.Connection[Any]) -> None:
    items: list[Any] = [{"n": 1}, 2, "three", None, [4], {"n": 5}]
    row = conn.execute("SELECT pglogq.send_batch_json('q', %s::jsonb, type => 't', headers => '{\"h\": 1}',"
                       " priority => 7)", (json.dumps(items),)).fetchone()
    assert row is not None
    ids = row[0]
    assert len(ids) == len(items) and ids == sorted(ids) and len(set(ids)) == len(ids)
    stored = _events(conn, "q")
    assert [r[0] for r in stored] == ids
    assert [r[2] for r in stored] == items  # a JSON null element is an event whose payload is null
    assert {(r[1], json.dumps(r[3]), r[4]) for r in stored} == {("t", '{"h": 1}', 7)}


def test_same_events_as_send_batch_with_a_jsonb_array(conn: psycopg.Connection[Any]) -> None:
    items = [{"a": i, "s": "x" * i} for i in range(50)]
    conn.execute("SELECT pglogq.send_batch_json('q', %s::jsonb, type => 'k')", (json.dumps(items),))
    conn.execute("SELECT pglogq.send_batch('r', %s::jsonb[], type => 'k')", ([json.dumps(i) for i in items],))
    assert [r[1:] for r in _events(conn, "q")] == [r[1:] for r in _events(conn, "r")]


BAD = [
    ("the 3rd element over the cap", '[1, 2, {"pad": "' + "x" * 1200 + '"}, 4]', {}, "PQ006"),
    ("headers push the 2nd over the cap", '[1, {"pad": "' + "x" * 600 + '"}]', {"headers": {"h": "y" * 500}},
     "PQ006"),
    ("headers not an object", "[1]", {"headers": [1]}, "PQ007"),
    ("empty type", "[1]", {"type": ""}, "PQ007"),
    ("priority out of range", "[1]", {"priority": 40000}, "PQ019"),
    ("priority NULL", "[1]", {"priority": None}, "PQ019"),
    ("too many events", "[" + ",".join(["1"] * 100001) + "]", {}, "PQ019"),
]


def _call(conn: psycopg.Connection[Any], fn: str, queue: str, items: str, opts: dict[str, Any]) -> str:
    """The SQLSTATE and message of the refused call (items as one JSON array, or as a jsonb[])."""
    args = ", ".join(f"{k} => %s" + ("::jsonb" if k == "headers" else "") for k in opts)
    payloads = items if fn == "send_batch_json" else [json.dumps(e) for e in json.loads(items)]
    cast = "::jsonb" if fn == "send_batch_json" else "::jsonb[]"
    values = [json.dumps(v) if k == "headers" else v for k, v in opts.items()]
    sql = f"SELECT pglogq.{fn}(%s, %s{cast}{', ' + args if args else ''})"
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(sql.encode(), (queue, payloads, *values))
    err = exc.value
    return f"{err.sqlstate}: {err.diag.message_primary}"


@pytest.mark.parametrize(("items", "opts", "code"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_refusals_match_send_batch_and_store_nothing(
    conn: psycopg.Connection[Any], items: str, opts: dict[str, Any], code: str
) -> None:
    got = _call(conn, "send_batch_json", "q", items, opts)
    assert got.startswith(code + ":"), got
    assert got == _call(conn, "send_batch", "q", items, opts)
    assert _events(conn, "q") == []


def test_unknown_queue_and_empty_array(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.Error) as exc:
        conn.execute("SELECT pglogq.send_batch_json('nope', '[1]')")
    assert exc.value.sqlstate == "PQ001"
    assert conn.execute("SELECT pglogq.send_batch_json('q', '[]')").fetchone() == ([],)


SEND_BAD = [
    ("type over 255 bytes", {"type": "t" * 256}, "PQ007"),
    ("empty type", {"type": ""}, "PQ007"),
    ("headers a string", {"headers": "h"}, "PQ007"),
    ("headers push the payload over the cap", {"headers": {"h": "y" * 990}}, "PQ006"),
    ("priority negative", {"priority": -1}, "PQ019"),
]


@pytest.mark.parametrize(("opts", "code"), [b[1:] for b in SEND_BAD], ids=[b[0] for b in SEND_BAD])
def test_send_refuses_what_check_event_refuses(conn: psycopg.Connection[Any], opts: dict[str, Any],
                                               code: str) -> None:
    args = ", ".join(f"{k} => %s" + ("::jsonb" if k == "headers" else "") for k in opts)
    values = [json.dumps(v) if k == "headers" else v for k, v in opts.items()]
    with pytest.raises(psycopg.Error) as exc:
        conn.execute(f"SELECT pglogq.send('q', '1', {args})".encode(), values)
    with pytest.raises(psycopg.Error) as direct:
        conn.execute("SELECT pglogq._check_event('1', %s, %s::jsonb, %s, 1000, NULL)",
                     (opts.get("type"), json.dumps(opts["headers"]) if "headers" in opts else None,
                      opts.get("priority", 100)))
    assert exc.value.sqlstate == code
    assert exc.value.diag.message_primary == direct.value.diag.message_primary
    assert _events(conn, "q") == []


def test_send_with_a_valid_type_and_headers_stores_them(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pglogq.send('q', '1', type => %s, headers => '{\"h\": 1}')", ("t" * 255,))
    assert [(r[1], r[3]) for r in _events(conn, "q")] == [("t" * 255, {"h": 1})]


def test_a_refused_batch_in_a_savepoint_leaves_the_rest_of_the_transaction(dsn: str,
                                                                            conn: psycopg.Connection[Any]) -> None:
    """The direct path inserts the valid elements before it sees the bad one: the error must
    take them back with the savepoint."""
    big = '[1, {"pad": "' + "x" * 1200 + '"}]'
    with psycopg.connect(dsn) as tx:
        tx.execute("SELECT pglogq.send('q', '\"kept\"')")
        tx.execute("SAVEPOINT s")
        with pytest.raises(psycopg.Error) as exc:
            tx.execute("SELECT pglogq.send_batch_json('q', %s::jsonb)", (big,))
        assert exc.value.sqlstate == "PQ006"
        tx.execute("ROLLBACK TO SAVEPOINT s")
        tx.execute("SELECT pglogq.send_batch_json('q', '[\"after\"]')")
        tx.commit()
    assert [r[2] for r in _events(conn, "q")] == ["kept", "after"]
