"""Bad queue and consumer names get a clear error and change nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pglogq

BAD_NAMES = [
    "",
    "q" * 49,
    "café",
    "o'rders",
    'or"ders',
    "a;b",
    "a b",
    " orders",
    "orders; DROP TABLE pglogq.queue; --",
    "1orders",
    "or\nders",
]


def counts(dsn: str) -> tuple[Any, ...]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pglogq.queue), (SELECT count(*) FROM pglogq.subscription),"
            " (SELECT count(*) FROM pg_class WHERE relnamespace = 'pglogq'::regnamespace)"
        ).fetchone()
        assert row is not None
        return tuple(row)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_queue_name(client: pglogq.Client, dsn: str, name: str) -> None:
    before = counts(dsn)
    with pytest.raises(pglogq.InvalidName):
        client.create_queue(name)
    assert counts(dsn) == before


@pytest.mark.parametrize("name", [*BAD_NAMES[:1], "c" * 64, *BAD_NAMES[2:]])
def test_bad_consumer_name(client: pglogq.Client, dsn: str, name: str) -> None:
    client.create_queue("q")
    before = counts(dsn)
    with pytest.raises(pglogq.InvalidName):
        client.subscribe("q", name)
    assert counts(dsn) == before


def test_null_names_are_refused(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT pglogq.create_queue(NULL)")
        assert e.value.sqlstate == "PQ004"


def test_longest_names_fit_notify_channels(client: pglogq.Client, dsn: str) -> None:
    queue = "q" * 48
    assert client.create_queue(queue)
    assert client.subscribe(queue, "c" * 63)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "pglogq.{queue}"')
        client.send(queue, {"x": 1})
        client.tick(queue, force=True)
        notes = list(conn.notifies(timeout=5, stop_after=1))
        assert [n.channel for n in notes] == [f"pglogq.{queue}"]
