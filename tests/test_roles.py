"""Roles: a writer produces, a reader consumes, neither does the other's job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pglogq


@pytest.fixture
def role_dsns(dsn: str) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    names = {kind: f"pglogq_test_{kind}_{suffix}" for kind in ("writer", "reader", "nobody")}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for kind, name in names.items():
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
            if kind != "nobody":
                conn.execute(f'GRANT pglogq_{kind} TO "{name}"')
    yield {kind: make_conninfo(dsn, user=name) for kind, name in names.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names.values():
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')


def test_writer_and_reader_are_separate(client: pglogq.Client, role_dsns: dict[str, str]) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    with pglogq.Client(role_dsns["writer"]) as writer, pglogq.Client(role_dsns["reader"]) as reader:
        writer.send("q", {"n": 1})
        client.tick("q", force=True)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            writer.receive("q", "c")
        batch = reader.receive("q", "c")
        assert [m.payload for m in batch] == [{"n": 1}]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            writer.ack(batch.id or 0)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.send("q", {"n": 2})
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            reader.create_queue("other")
        assert reader.ack(batch.id or 0)


def test_a_role_without_grants_can_do_nothing(client: pglogq.Client, role_dsns: dict[str, str]) -> None:
    client.create_queue("q")
    with pglogq.Client(role_dsns["nobody"]) as nobody:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            nobody.send("q", {"n": 1})
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            nobody.queue_info()
