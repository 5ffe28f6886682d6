"""The SQL schema shipped with pglogq: where it is, what it holds, and the install plan.

``sql/migrations/NNNN_name.sql`` change tables (applied once, recorded in
``pglogq.schema_version``); ``sql/functions/*.sql`` hold one function each and are re-applied on
every install or upgrade; ``sql/roles.sql`` creates the roles and grants.  The wheel carries the
directory as ``pglogq/sql``; in a source checkout it is the top-level ``sql/``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

LOCK_KEY = "pglogq.schema"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def sql_dir() -> Traversable:
    """The ``sql`` directory: inside the installed package, else the source checkout's."""
    packaged = resources.files("pglogq") / "sql"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "sql"


def migrations() -> list[Migration]:
    out = []
    for f in (sql_dir() / "migrations").iterdir():
        m = re.fullmatch(r"(\d{4})_(\w+)\.sql", f.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), f.read_text(encoding="utf-8")))
    return sorted(out, key=lambda m: m.version)


def functions() -> list[tuple[str, str]]:
    """(file name, SQL) of every function file, helpers (``_*``) first, then by name."""
    files = [f for f in (sql_dir() / "functions").iterdir() if f.name.endswith(".sql")]
    files.sort(key=lambda f: (not f.name.startswith("_"), f.name))
    return [(f.name, f.read_text(encoding="utf-8")) for f in files]


def roles_sql() -> str:
    return (sql_dir() / "roles.sql").read_text(encoding="utf-8")


def views_sql() -> str:
    path = sql_dir() / "views.sql"
    return str(path.read_text(encoding="utf-8")) if path.is_file() else ""


def latest_version() -> int:
    return migrations()[-1].version


def record_sql(m: Migration) -> str:
    return (
        "INSERT INTO pglogq.schema_version (version, name) "
        f"VALUES ({m.version}, '{m.name}') ON CONFLICT DO NOTHING;"
    )


# Functions and views are re-created from the files on every install: dropping them first means
# a changed return type, a renamed parameter or a removed overload never blocks or lingers.
DROP_CODE_SQL = """
DO $drop$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS name FROM pg_class c
              WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind IN ('v', 'm') LOOP
        EXECUTE format('DROP VIEW IF EXISTS %s CASCADE', r.name);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS sig FROM pg_proc p
              WHERE p.pronamespace = 'pglogq'::regnamespace LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.sig);
    END LOOP;
END
$drop$;
"""


def plan(applied: set[int]) -> list[tuple[str, str]]:
    """The statements that bring a database with ``applied`` migrations to the latest schema."""
    steps: list[tuple[str, str]] = []
    for m in migrations():
        if m.version not in applied:
            steps.append((f"migration {m.version:04d}_{m.name}", m.sql))
            steps.append((f"record {m.version}", record_sql(m)))
    steps.append(("drop functions and views", DROP_CODE_SQL))
    for name, sql in functions():
        steps.append((f"function {name}", sql))
    views = views_sql()
    if views:
        steps.append(("views", views))
    steps.append(("roles", roles_sql()))
    return steps


def one_file_sql() -> str:
    """The whole schema as one script for psql (a fresh install, in one transaction)."""
    parts = [f"-- pglogq schema, version {latest_version()}: psql -v ON_ERROR_STOP=1 -f this.sql",
             "BEGIN;", f"SELECT pg_advisory_xact_lock(hashtext('{LOCK_KEY}'));"]
    for label, sql in plan(set()):
        parts.append(f"-- {label}\n{sql}")
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"
