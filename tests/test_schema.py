"""Schema install, upgrade and the one-file script."""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg

import pglogq
from pglogq import schema


def test_install_is_idempotent(dsn: str) -> None:
    client = pglogq.Client(dsn)
    assert client.install_schema() == []  # the template had it
    assert client.schema_versions() == [m.version for m in schema.migrations()]
    client.close()


def test_fresh_install_and_one_file_script_agree(new_db: Callable[[], str], server_dsn: str) -> None:
    # a fresh database without the template
    name = f"pglogq_raw_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        from psycopg.conninfo import make_conninfo

        raw = make_conninfo(server_dsn, dbname=name)
        with psycopg.connect(raw, autocommit=True) as conn:
            conn.execute(schema.one_file_sql().encode())
            funcs = conn.execute(
                "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pglogq'::regnamespace"
            ).fetchone()
        client = pglogq.Client(raw)
        assert client.install_schema() == []
        assert client.create_queue("q")
        client.close()
        with psycopg.connect(new_db()) as conn:
            funcs2 = conn.execute(
                "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pglogq'::regnamespace"
            ).fetchone()
        assert funcs == funcs2
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_package_comes_from_the_wheel_when_expected() -> None:
    if os.environ.get("PGLOGQ_EXPECT_INSTALLED"):
        assert "site-packages" in pglogq.__file__
    files = {f.name for f in (schema.sql_dir() / "functions").iterdir()}
    assert {"send.sql", "receive.sql", "ack.sql", "ticker.sql"} <= files


def test_every_function_file_has_a_header_and_one_function() -> None:
    for name, sql in schema.functions():
        assert sql.startswith("-- pglogq."), name
        assert sql.count("CREATE OR REPLACE FUNCTION") == 1, name


def test_upgrade_replaces_changed_and_stale_functions(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP FUNCTION pglogq.consumer_info(text, text)")
        conn.execute(
            "CREATE FUNCTION pglogq.consumer_info(for_queue text, for_consumer text) RETURNS integer"
            " LANGUAGE sql AS 'SELECT 1'"
        )
        conn.execute("CREATE FUNCTION pglogq.stale_leftover(x integer) RETURNS integer LANGUAGE sql AS 'SELECT x'")
    client = pglogq.Client(dsn)
    assert client.install_schema() == []
    assert client.consumer_info() == []
    client.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regprocedure('pglogq.stale_leftover(integer)')").fetchone()
        assert row is not None and row[0] is None
