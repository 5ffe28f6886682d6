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


# -- a database owner without CREATEROLE installs when the roles exist ---------------


@pytest.fixture
def owned_db(server_dsn: str, template_db: str) -> Iterator[dict[str, str]]:
    """A login role with no CREATEROLE (not a superuser) owning an empty database of its own; the
    pglogq roles already exist (the template's install, by a superuser, created them).  Another
    login role owns nothing.  Both roles are dropped at the end (roles are cluster-wide)."""
    suffix = uuid.uuid4().hex[:8]
    owner, other, db = f"pglogq_test_owner_{suffix}", f"pglogq_test_other_{suffix}", f"pglogq_owned_{suffix}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{owner}" LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB'.encode())
        conn.execute(f'CREATE ROLE "{other}" LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB'.encode())
        conn.execute(f'CREATE DATABASE "{db}" OWNER "{owner}"'.encode())
    yield {
        "owner": make_conninfo(server_dsn, dbname=db, user=owner),
        "other": make_conninfo(server_dsn, dbname=db, user=other),
        "superuser": make_conninfo(server_dsn, dbname=db),
        "other_role": other,
    }
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'.encode())
        for name in (owner, other):
            conn.execute(f'DROP ROLE IF EXISTS "{name}"'.encode())


def test_database_owner_without_createrole_installs_when_roles_exist(owned_db: dict[str, str]) -> None:
    """Regression: the install re-ran `GRANT pglogq_writer, pglogq_reader TO pglogq_admin`, which
    needs ADMIN OPTION on those roles (42501) although the membership already existed; it now
    grants only what is missing.  Installing twice works, and the owner's schema works."""
    with pglogq.Client(owned_db["owner"]) as c:
        assert len(c.install_schema()) == len(pglogq.schema.migrations())
        assert c.install_schema() == []
        assert c.create_queue("q")
        assert c.subscribe("q", "c")
        c.send("q", {"n": 1})
        c.tick("q", force=True)
        assert [m.payload for m in c.receive("q", "c")] == [{"n": 1}]
    with psycopg.connect(owned_db["owner"]) as conn:
        owner = conn.execute(
            "SELECT nspowner::regrole::text = current_user FROM pg_namespace WHERE nspname = 'pglogq'"
        ).fetchone()
        assert owner == (True,)
    # a superuser's install afterwards keeps working (and keeps the owner)
    with pglogq.Client(owned_db["superuser"]) as c:
        assert c.install_schema() == []
    with psycopg.connect(owned_db["owner"]) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pglogq'::regnamespace"
            " AND proowner <> (SELECT oid FROM pg_roles WHERE rolname = current_user)"
        ).fetchone() == (0,)


def test_install_by_a_role_that_does_not_own_the_schema_is_refused(owned_db: dict[str, str]) -> None:
    """Attack (install): a role that does not own schema pglogq runs the install;
    it gets PQ051 naming the owner, before anything changes (it used to fail half-way with
    whatever privilege error came first)."""
    with pglogq.Client(owned_db["owner"]) as c:
        c.install_schema()
    with psycopg.connect(owned_db["superuser"], autocommit=True) as conn:
        other = (owned_db["other_role"],)
        # give it what a careless admin might: CREATE on the database and pglogq_admin
        conn.execute(f'GRANT pglogq_admin TO "{other[0]}"'.encode())
    try:
        with pglogq.Client(owned_db["other"]) as c:
            with pytest.raises(pglogq.InstallNotPermitted) as info:
                c.install_schema()
            assert info.value.sqlstate == "PQ051"
            assert "belongs to" in info.value.message
            assert c.create_queue("still_works")
    finally:
        with psycopg.connect(owned_db["superuser"], autocommit=True) as conn:
            conn.execute(f'REVOKE pglogq_admin FROM "{other[0]}"'.encode())
