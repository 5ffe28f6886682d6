"""Schema install, upgrade and the one-file script."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import pglogq
from pglogq import schema
from tests.support.cli import fails, ok


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
    """A changed return type is dropped and created again; a function pglogq made (it carries the
    pinned search_path) that the files no longer hold is dropped; a user's own function in schema
    pglogq (no such mark) is kept (never drop what is not ours)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP FUNCTION pglogq.consumer_info(text, text)")
        conn.execute(
            "CREATE FUNCTION pglogq.consumer_info(for_queue text, for_consumer text) RETURNS integer"
            " LANGUAGE sql AS 'SELECT 1'"
        )
        conn.execute(
            "CREATE FUNCTION pglogq.stale_leftover(x integer) RETURNS integer LANGUAGE sql"
            " SET search_path = pglogq, pg_catalog, pg_temp AS 'SELECT x'"
        )
        conn.execute("CREATE FUNCTION pglogq.users_own(x integer) RETURNS integer LANGUAGE sql AS 'SELECT x'")
    client = pglogq.Client(dsn)
    assert client.install_schema() == []
    assert client.consumer_info() == []
    client.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT to_regprocedure('pglogq.stale_leftover(integer)')").fetchone()
        assert row is not None and row[0] is None
        row = conn.execute("SELECT to_regprocedure('pglogq.users_own(integer)') IS NOT NULL").fetchone()
        assert row == (True,)


# -- re-installing never deletes the user's objects ---------------------------------

USER_OBJECTS = """
CREATE VIEW public.my_queues AS SELECT queue_name, consumers FROM pglogq.queue_info();
CREATE FUNCTION public.enqueue(p jsonb) RETURNS bigint LANGUAGE sql
BEGIN ATOMIC
    SELECT pglogq.send('q', p);
END;
CREATE TABLE public.orders (id integer PRIMARY KEY, event_id bigint DEFAULT pglogq.send('q', '{"new": 1}'));
"""


def _user_objects_state(conn: psycopg.Connection[Any], role: str) -> dict[str, Any]:
    return {
        "view": conn.execute("SELECT to_regclass('public.my_queues') IS NOT NULL").fetchone(),
        "function": conn.execute("SELECT to_regprocedure('public.enqueue(jsonb)') IS NOT NULL").fetchone(),
        "default": conn.execute(
            "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d"
            " WHERE d.adrelid = 'public.orders'::regclass"
        ).fetchall(),
        "grant": conn.execute(
            "SELECT has_function_privilege(%s, 'pglogq.queue_info(text)', 'EXECUTE'),"
            " has_function_privilege(%s, 'pglogq.send(text, jsonb, text, jsonb, integer, text,"
            " timestamptz, interval)', 'EXECUTE')",
            (role, role),
        ).fetchone(),
    }


@pytest.fixture
def user_role(dsn: str) -> Iterator[str]:
    """A user role (cluster-wide: unique name, dropped at the end)."""
    name = f"pglogq_test_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}"'.encode())
    yield name
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"'.encode())
        conn.execute(f'DROP ROLE "{name}"'.encode())


def test_reinstall_keeps_user_views_functions_defaults_and_grants(dsn: str, user_role: str) -> None:
    """Regression: install_schema() twice and `pglogq schema upgrade` keep every user object that
    uses a pglogq function (they used to be dropped by DROP FUNCTION ... CASCADE)."""
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
        c.subscribe("q", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(USER_OBJECTS)
        conn.execute(f'GRANT EXECUTE ON FUNCTION pglogq.queue_info(text) TO "{user_role}"'.encode())
        conn.execute(
            f"GRANT EXECUTE ON FUNCTION pglogq.send(text, jsonb, text, jsonb, integer, text, timestamptz,"
            f' interval) TO "{user_role}"'.encode()
        )
        before = _user_objects_state(conn, user_role)
    assert before["grant"] == (True, True)
    with pglogq.Client(dsn) as c:
        assert c.install_schema() == []
        assert c.install_schema() == []
    ok(dsn, "schema", "upgrade")
    ok(dsn, "schema", "install")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _user_objects_state(conn, user_role) == before
        # and they still work
        assert conn.execute("SELECT * FROM public.my_queues").fetchall() == [("q", 1)]
        conn.execute("SELECT public.enqueue('{\"via\": \"atomic\"}')")
        conn.execute("INSERT INTO public.orders (id) VALUES (1)")
    with pglogq.Client(dsn) as c:
        c.tick("q", force=True)
        assert sorted(str(m.payload) for m in c.receive("q", "c")) == ["{'new': 1}", "{'via': 'atomic'}"]


def _catalog_and_user_objects(conn: psycopg.Connection[Any]) -> list[Any]:
    return [
        conn.execute(
            "SELECT p.oid::regprocedure::text, pg_get_function_result(p.oid), md5(p.prosrc)"
            " FROM pg_proc p WHERE p.pronamespace IN ('pglogq'::regnamespace, 'public'::regnamespace)"
            " ORDER BY 1"
        ).fetchall(),
        conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace IN"
            " ('pglogq'::regnamespace, 'public'::regnamespace) ORDER BY 1"
        ).fetchall(),
        conn.execute("SELECT version FROM pglogq.schema_version ORDER BY 1").fetchall(),
    ]


def test_changed_signature_with_user_dependents_is_refused_and_changes_nothing(dsn: str) -> None:
    """Regression: a function whose return type changed cannot be replaced in place; when a
    user's view depends on the old one the install refuses (PQ050, listing the view and what to
    do) and changes nothing, instead of dropping the view."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # the database holds an "older" consumer_info returning an integer, and a view over it
        conn.execute("DROP FUNCTION pglogq.consumer_info(text, text)")
        conn.execute(
            "CREATE FUNCTION pglogq.consumer_info(for_queue text, for_consumer text) RETURNS integer"
            " LANGUAGE sql SET search_path = pglogq, pg_catalog, pg_temp AS 'SELECT 1'"
        )
        conn.execute("CREATE VIEW public.consumers_seen AS SELECT pglogq.consumer_info('q', 'c') AS n")
        # and a stale pglogq function (not in the files any more) with a dependent default
        conn.execute(
            "CREATE FUNCTION pglogq.old_helper(x integer) RETURNS integer LANGUAGE sql"
            " SET search_path = pglogq, pg_catalog, pg_temp AS 'SELECT x'"
        )
        conn.execute("CREATE TABLE public.t (a integer DEFAULT pglogq.old_helper(1))")
        before = _catalog_and_user_objects(conn)
    with pglogq.Client(dsn) as c:
        with pytest.raises(pglogq.DependentObjects) as info:
            c.install_schema()
        assert info.value.sqlstate == "PQ050"
        text = str(info.value)
        assert "pglogq.consumer_info(text,text)" in text and "view public.consumers_seen" in text
        assert "pglogq.old_helper(integer)" in text and "default value for column a of table public.t" in text
        assert "drop" in (info.value.hint or "").lower()
    r = fails(dsn, 7, "schema", "upgrade")
    assert "consumers_seen" in r.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _catalog_and_user_objects(conn) == before
        # following the hint: drop the dependents, install, re-create them
        conn.execute("DROP VIEW public.consumers_seen")
        conn.execute("DROP TABLE public.t")
    with pglogq.Client(dsn) as c:
        assert c.install_schema() == []
        assert c.consumer_info() == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regprocedure('pglogq.old_helper(integer)')").fetchone() == (None,)


# -- attacks on install / upgrade (docs/reliability/attacks-install.md) -----------------------------


def _code_catalog(conn: psycopg.Connection[Any]) -> list[Any]:
    return conn.execute(
        "SELECT p.oid::regprocedure::text, md5(p.prosrc), p.proacl::text FROM pg_proc p"
        " WHERE p.pronamespace = 'pglogq'::regnamespace ORDER BY 1"
    ).fetchall()


def test_database_newer_than_the_code_is_refused(dsn: str) -> None:
    """A downgrade (the database has a migration these files do not know) is refused with PQ052
    before anything changes, from Python, the CLI and the one-file script; it used to re-apply the
    older functions over the newer schema."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pglogq.schema_version (version, name) VALUES (9999, 'from_the_future')")
        conn.execute("CREATE OR REPLACE FUNCTION pglogq.queue_info(for_queue text DEFAULT NULL) RETURNS TABLE ("
                     " queue_name text, paused boolean, last_tick_id bigint, last_tick_time timestamptz,"
                     " last_tick_age interval, ticker_lag interval, events_per_second double precision,"
                     " pending_estimate bigint, consumers integer, retry_depth bigint, dead_letters bigint,"
                     " delayed bigint, size_bytes bigint, rotation_period interval, last_rotation timestamptz,"
                     " rotation_blocked_by text) LANGUAGE sql SET search_path = pglogq, pg_catalog, pg_temp"
                     " AS 'SELECT NULL::text, NULL::boolean, 1::bigint, NULL::timestamptz, NULL::interval,"
                     " NULL::interval, 0::float8, 0::bigint, 0, 0::bigint, 0::bigint, 0::bigint, 0::bigint,"
                     " NULL::interval, NULL::timestamptz, ''newer code''::text'")
        before = _code_catalog(conn)
    with pglogq.Client(dsn) as c:
        with pytest.raises(pglogq.SchemaTooNew) as info:
            c.install_schema()
        assert info.value.sqlstate == "PQ052" and "9999_from_the_future" in info.value.message
    r = fails(dsn, 7, "schema", "upgrade")
    assert "9999_from_the_future" in r.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as err:
            conn.execute(schema.one_file_sql().encode())
        assert err.value.sqlstate == "PQ052"
    with psycopg.connect(dsn) as conn:
        assert _code_catalog(conn) == before


def test_one_file_script_after_a_python_install_reapplies_and_keeps_user_objects(dsn: str) -> None:
    """`pglogq schema sql | psql` on a database installed from Python: it used to stop at the
    first existing table; it now re-applies the functions like install_schema() (user objects
    and grants kept), and running it twice changes nothing."""
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(USER_OBJECTS)
        before = _code_catalog(conn)
        conn.execute(schema.one_file_sql().encode())
        conn.execute(schema.one_file_sql().encode())
        assert _code_catalog(conn) == before
        assert conn.execute("SELECT * FROM public.my_queues").fetchall() == [("q", 0)]
        assert conn.execute("SELECT count(*) FROM pglogq.schema_version").fetchone() == (
            len(schema.migrations()),
        )


def test_user_objects_inside_schema_pglogq_are_kept(dsn: str) -> None:
    """Objects a user made inside schema pglogq (a table, a view over a pglogq function, a
    function of their own) survive every install."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pglogq.my_notes (note text)")
        conn.execute("INSERT INTO pglogq.my_notes VALUES ('keep me')")
        conn.execute("CREATE VIEW pglogq.my_view AS SELECT queue_name FROM pglogq.queue_info()")
        conn.execute("CREATE FUNCTION pglogq.my_fn() RETURNS integer LANGUAGE sql AS 'SELECT 7'")
    with pglogq.Client(dsn) as c:
        assert c.install_schema() == []
        assert c.install_schema() == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT note FROM pglogq.my_notes").fetchall() == [("keep me",)]
        assert conn.execute("SELECT count(*) FROM pglogq.my_view").fetchone() == (0,)
        assert conn.execute("SELECT pglogq.my_fn()").fetchone() == (7,)


def test_install_ignores_a_hostile_search_path_and_restores_the_callers(dsn: str) -> None:
    """An install from a session whose search_path puts another schema before pg_catalog (with
    functions named like built-ins): nothing of that schema is bound into pglogq's defaults or
    run, and the caller's search_path is the same afterwards, in its own transaction."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA evil")
        conn.execute("CREATE TABLE evil.fired (what text)")
        conn.execute(
            "CREATE FUNCTION evil.lpad(text, integer, text) RETURNS text LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO evil.fired VALUES ('lpad'); RETURN 'x'; END $$"
        )
        conn.execute(
            "CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS"
            " $$ BEGIN INSERT INTO evil.fired VALUES ('now'); RETURN pg_catalog.now(); END $$"
        )
        conn.execute("DROP SCHEMA pglogq CASCADE")  # a fresh install: migrations bind defaults
    with psycopg.connect(dsn) as conn:
        conn.execute("SET search_path = evil, pg_catalog, public")
        with pglogq.Client(dsn) as c:
            assert len(c.install_schema(conn=conn)) == len(schema.migrations())
            assert conn.execute("SHOW search_path").fetchone() == ("evil, pg_catalog, public",)
            conn.commit()
            assert c.install_schema(conn=conn) == []
        assert conn.execute("SHOW search_path").fetchone() == ("evil, pg_catalog, public",)
        conn.commit()
        assert conn.execute("SELECT * FROM evil.fired").fetchall() == []
        bound = conn.execute(
            "SELECT count(*) FROM pg_depend d WHERE d.refclassid = 'pg_proc'::regclass"
            " AND d.refobjid IN (SELECT oid FROM pg_proc WHERE pronamespace = 'evil'::regnamespace)"
        ).fetchone()
        assert bound == (0,)


def test_install_while_a_session_is_mid_receive_loses_nothing(dsn: str) -> None:
    """A consumer session holds a page in an open transaction while the schema is re-installed
    (twice: Python and the one-file script); it then acknowledges in the same transaction and
    every event is delivered exactly once."""
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
        c.subscribe("q", "c")
        ids = c.send_batch("q", [{"n": i} for i in range(6)])
        c.tick("q", force=True)
        with psycopg.connect(dsn) as consumer, psycopg.connect(dsn) as producer:
            page = consumer.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c', 3)").fetchall()
            # a producer's send is in flight across the install too
            late = producer.execute("SELECT pglogq.send('q', '{\"late\": 1}')").fetchone()
            assert late is not None
            assert c.install_schema() == []
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute(schema.one_file_sql().encode())
            again = consumer.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c', 3)").fetchall()
            assert again == page
            assert consumer.execute("SELECT pglogq.ack(%s)", (page[0][0],)).fetchone() == (True,)
            consumer.commit()
            producer.commit()
        c.tick("q", force=True)
        ids.append(late[0])
        got = [r[1] for r in page]
        for _ in range(5):
            b = c.receive("q", "c", max_messages=3)
            if not b:
                break
            got += [m.msg_id for m in b]
            b.ack()
        assert got == ids


def test_concurrent_installs_python_and_script_all_succeed(dsn: str) -> None:
    """Three installs at once on an installed database (two from Python, one the one-file script)
    are serialised by the advisory lock: all succeed, the catalog is unchanged."""
    with psycopg.connect(dsn) as conn:
        before = _code_catalog(conn)
    errors: list[BaseException] = []

    def python_install() -> None:
        try:
            with pglogq.Client(dsn) as c:
                c.install_schema()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def script_install() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(schema.one_file_sql().encode())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (python_install, script_install, python_install)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with psycopg.connect(dsn) as conn:
        assert _code_catalog(conn) == before


def test_manifest_lists_every_function_file_once_and_nothing_else() -> None:
    """sql/functions/MANIFEST is the install order, the groups and the grant map: a
    function file it does not list, or a line naming no file, fails here (and the install refuses
    to run with either)."""
    files = {f.name[:-4] for f in (schema.sql_dir() / "functions").iterdir() if f.name.endswith(".sql")}
    listed = [e.name for e in schema.manifest()]
    assert len(listed) == len(set(listed)), "a function is listed twice"
    assert sorted(files - set(listed)) == [], "function files missing from sql/functions/MANIFEST"
    assert sorted(set(listed) - files) == [], "MANIFEST lines without a function file"
    assert [n[:-4] for n, _ in schema.functions()] == listed  # installed in manifest order
    groups = [e.group for e in schema.manifest()]
    assert groups[0] == "Internal helpers"
    # each group is one block, helpers are exactly the _ names, and only public functions are granted
    assert [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g] == list(dict.fromkeys(groups))
    assert all((e.group == "Internal helpers") == e.name.startswith("_") for e in schema.manifest())


def test_manifest_installs_a_sql_callee_before_its_caller() -> None:
    """A LANGUAGE sql body is checked when it is created: what it calls must exist already."""
    order = {e.name: i for i, e in enumerate(schema.manifest())}
    for name, sql in schema.functions():
        if not re.search(r"LANGUAGE sql", sql, re.I):
            continue
        body = sql.split("$$", 1)[1]
        for callee in set(re.findall(r"pglogq\.(\w+)\s*\(", body)) & set(order):
            if callee != name[:-4]:
                assert order[callee] < order[name[:-4]], f"{name} calls {callee}, listed after it"


def test_roles_sql_grants_from_the_manifest_map() -> None:
    text = schema.roles_sql()
    assert schema.GRANT_MAP_MARK not in text
    assert json.dumps(schema.grant_map(), separators=(", ", ": ")) in text
    assert schema.grant_map()["send"] == ["pglogq_writer"]
    assert schema.grant_map()["queue_info"] == ["pglogq_writer", "pglogq_reader"]
    assert all(not name.startswith("_") for name in schema.grant_map())
