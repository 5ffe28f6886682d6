"""The SQL schema shipped with pglogq: where it is, what it holds, and the install plan.

``sql/migrations/NNNN_name.sql`` change tables (applied once, recorded in
``pglogq.schema_version``); ``sql/functions/*.sql`` hold one function each and are re-applied on
every install or upgrade; ``sql/views.sql`` and ``sql/triggers.sql`` follow the functions;
``sql/roles.sql`` creates the roles and grants.  The wheel carries the directory as
``pglogq/sql``; in a source checkout it is the top-level ``sql/``.
"""

from __future__ import annotations

import hashlib
import json
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


@dataclass(frozen=True)
class FunctionEntry:
    """One line of ``sql/functions/MANIFEST``: a function file, its group, and the roles granted
    EXECUTE on it besides ``pglogq_admin`` (which may call every public function)."""

    name: str
    group: str
    roles: tuple[str, ...]

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


ROLES = ("pglogq_writer", "pglogq_reader", "pglogq_admin")


def manifest() -> list[FunctionEntry]:
    """The entries of ``sql/functions/MANIFEST``, in install order."""
    out: list[FunctionEntry] = []
    group = ""
    text = (sql_dir() / "functions" / "MANIFEST").read_text(encoding="utf-8")
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1].strip()
            continue
        name, *roles = line.split()
        bad = [r for r in roles if r not in ROLES]
        if not group or bad or not re.fullmatch(r"_?[a-z][a-z0-9_]*", name) or (roles and name.startswith("_")):
            raise ValueError(f"sql/functions/MANIFEST line {number}: {raw!r}")
        out.append(FunctionEntry(name, group, tuple(roles)))
    return out


def grant_map() -> dict[str, list[str]]:
    """Public function name -> roles granted EXECUTE besides pglogq_admin (from the manifest)."""
    return {e.name: list(e.roles) for e in manifest() if e.public and e.roles}


def functions() -> list[tuple[str, str]]:
    """(file name, SQL) of every function file, in the manifest's install order.  Raises
    ValueError when the manifest and the files disagree (a file not listed, or a listed one
    missing): an install must never skip a function or fail half-way through."""
    files = {f.name: f for f in (sql_dir() / "functions").iterdir() if f.name.endswith(".sql")}
    order = [e.name + ".sql" for e in manifest()]
    unlisted = sorted(set(files) - set(order))
    missing = sorted(set(order) - set(files))
    if unlisted or missing or len(order) != len(set(order)):
        raise ValueError(f"sql/functions/MANIFEST and the function files disagree: not listed {unlisted}, "
                         f"no file {missing}, listed twice {sorted({n for n in order if order.count(n) > 1})}")
    texts = [(name, files[name].read_text(encoding="utf-8")) for name in order]
    # the generation of the queues' copies of receive's functions: these files' own digest, so
    # that an install that changes any function makes each queue's copies again (lazily, on its
    # next receive; see _queue_functions), and one that changes nothing leaves them alone
    generation = hashlib.md5("".join(text for _, text in texts).encode()).hexdigest()[:8]
    return [(name, text.replace(COPIES_MARK, generation)) for name, text in texts]


# receive.sql and _queue_functions.sql hold this placeholder where the generation goes
COPIES_MARK = "@copies@"


# roles.sql holds this placeholder where the grant map goes (see grant_map)
GRANT_MAP_MARK = "'@grant_map@'"


def roles_sql() -> str:
    """roles.sql with the manifest's grant map filled in."""
    text = str((sql_dir() / "roles.sql").read_text(encoding="utf-8"))
    if text.count(GRANT_MAP_MARK) != 1:  # pragma: no cover - a file we ship
        raise ValueError(f"sql/roles.sql must hold {GRANT_MAP_MARK} exactly once")
    return text.replace(GRANT_MAP_MARK, "'" + json.dumps(grant_map(), separators=(", ", ": ")) + "'")


def views_sql() -> str:
    path = sql_dir() / "views.sql"
    return str(path.read_text(encoding="utf-8")) if path.is_file() else ""


def triggers_sql() -> str:
    """triggers.sql: triggers on pglogq tables that call pglogq functions (after the functions)."""
    path = sql_dir() / "triggers.sql"
    return str(path.read_text(encoding="utf-8")) if path.is_file() else ""


def latest_version() -> int:
    return migrations()[-1].version


def record_sql(m: Migration) -> str:
    return (
        "INSERT INTO pglogq.schema_version (version, name) "
        f"VALUES ({m.version}, '{m.name}') ON CONFLICT DO NOTHING;"
    )


# Functions pglogq made carry this setting (every function file pins it): an install drops a
# function of schema pglogq that is not in the files only when it has it.  A user's own function
# in the schema (without it) is never touched.
OWN_MARK = "search_path=pglogq, pg_catalog, pg_temp"

# dollar-quote tags of the generated install blocks: no file may contain them
_SRC_TAG = "$pglogq_src$"
_BLOCK_TAG = "$pglogq_install$"


def _quote(text: str) -> str:
    if _SRC_TAG in text or _BLOCK_TAG in text:  # pragma: no cover - a file we ship
        raise ValueError(f"an SQL file contains {_SRC_TAG} or {_BLOCK_TAG}")
    return f"{_SRC_TAG}{text}{_SRC_TAG}"


# The install runs with search_path = pg_catalog whatever the caller's: a default or a cast that
# the migrations resolve at creation must never pick up a same-named object of another schema.
# The caller's setting comes back at the end (the change is LOCAL: a failed install undoes it).
PIN_SEARCH_PATH_SQL = (
    "SELECT pg_catalog.set_config('pglogq.caller_search_path', pg_catalog.current_setting('search_path'), true),"
    " pg_catalog.set_config('search_path', 'pg_catalog', true);"
)
RESTORE_SEARCH_PATH_SQL = (
    "SELECT pg_catalog.set_config('search_path', pg_catalog.current_setting('pglogq.caller_search_path'), true);"
)


def check_sql() -> str:
    """Refuses, before anything changes, an install that would break the database: one whose
    schema is newer than these files (PQ052), or one run by a role that does not own the existing
    schema objects (PQ051)."""
    known = ", ".join(str(m.version) for m in migrations())
    return f"""
DO {_BLOCK_TAG}
DECLARE
    newer text;
    owners text;
BEGIN
    IF to_regclass('pglogq.schema_version') IS NOT NULL THEN
        SELECT string_agg(lpad(v.version::text, 4, '0') || '_' || v.name, ', ' ORDER BY v.version)
          INTO newer FROM pglogq.schema_version v WHERE v.version <> ALL (ARRAY[{known}]);
        IF newer IS NOT NULL THEN
            RAISE EXCEPTION 'the database has pglogq schema migrations this pglogq does not know: %', newer
                USING ERRCODE = 'PQ052',
                      DETAIL = 'this pglogq knows migrations up to {latest_version():04d}; installing its '
                               'functions would replace newer ones with older code',
                      HINT = 'upgrade the pglogq package (or use the version that installed this schema); '
                             'nothing was changed';
        END IF;
    END IF;
    IF to_regnamespace('pglogq') IS NOT NULL
       AND NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
        SELECT string_agg(DISTINCT o.owner::regrole::text, ', ') INTO owners
          FROM (SELECT n.nspowner AS owner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pglogq'
                UNION ALL
                SELECT p.proowner FROM pg_catalog.pg_proc p
                 WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proconfig @> ARRAY['{OWN_MARK}']
                UNION ALL
                SELECT c.relowner FROM pg_catalog.pg_class c
                 WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')) o
         WHERE NOT pg_catalog.pg_has_role(current_user, o.owner, 'USAGE');
        IF owners IS NOT NULL THEN
            RAISE EXCEPTION 'role "%" cannot install or upgrade pglogq here: the schema belongs to %',
                current_user, owners
                USING ERRCODE = 'PQ051',
                      HINT = 'run the install as that role (or a superuser, or a member of it); nothing was changed';
        END IF;
    END IF;
END
{_BLOCK_TAG};
"""


def code_sql() -> str:
    """Creates or replaces every function of the files, in place (same oid: views, defaults and
    SQL-standard functions of the user that call it, and the grants on it, stay).  A function
    whose return type, parameter names or defaults changed is dropped (without CASCADE) and
    created again; one that is no longer in the files is dropped.  When a user object depends on
    a function that must be dropped, nothing is dropped and the install fails with PQ050, which
    names the dependent objects."""
    files = ",\n".join(_quote(sql) for _, sql in functions())
    return rf"""
DO {_BLOCK_TAG}
DECLARE
    files text[] := ARRAY[
{files}];
    src text;
    fname text;
    probe pg_catalog.pg_proc;
    old oid;
    wanted text[] := '{{}}';
    blocked text[] := '{{}}';
    bodies text := pg_catalog.current_setting('check_function_bodies');
    detail text;
    r record;
BEGIN
    FOREACH src IN ARRAY files LOOP
        fname := pg_catalog.substring(src, 'CREATE OR REPLACE FUNCTION pglogq\.(\w+)\s*\(');
        IF fname IS NULL THEN
            RAISE EXCEPTION 'pglogq install: no CREATE OR REPLACE FUNCTION pglogq.name( in %',
                pg_catalog.left(src, 80);
        END IF;
        -- the signature the file declares: create it under another name, read it, drop it
        PERFORM pg_catalog.set_config('check_function_bodies', 'off', true);
        EXECUTE pg_catalog.regexp_replace(src, 'CREATE OR REPLACE FUNCTION pglogq\.\w+\s*\(',
                                          'CREATE FUNCTION pglogq._install_probe(');
        PERFORM pg_catalog.set_config('check_function_bodies', bodies, true);
        SELECT * INTO STRICT probe FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname = '_install_probe';
        EXECUTE pg_catalog.format('DROP ROUTINE %s', probe.oid::regprocedure);
        wanted := wanted || (fname || '(' || probe.proargtypes::text || ')');
        SELECT p.oid INTO old FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname = fname
           AND p.proargtypes = probe.proargtypes;
        BEGIN
            EXECUTE src;  -- CREATE OR REPLACE: same oid, grants and dependents kept
        EXCEPTION WHEN invalid_function_definition THEN
            -- return type, parameter names or defaults changed: it must be dropped first
            IF old IS NULL THEN
                RAISE;
            END IF;
            BEGIN
                EXECUTE pg_catalog.format('DROP ROUTINE %s', old::regprocedure);
                EXECUTE src;
            EXCEPTION WHEN dependent_objects_still_exist THEN
                GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
                blocked := blocked || pg_catalog.format('%s changed its return type or parameter names; %s',
                                                        old::regprocedure, pg_catalog.replace(detail, E'\n', '; '));
            END;
        END;
    END LOOP;
    -- functions pglogq made that the files no longer hold (a user's own functions lack the mark)
    FOR r IN SELECT p.oid FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proconfig @> ARRAY['{OWN_MARK}']
                AND (p.proname || '(' || p.proargtypes::text || ')') <> ALL (wanted)
                -- a queue's copies of receive's functions are _queue_functions' (one DROP
                -- each would lock as many objects as there are copies, in this one transaction)
                AND p.proname !~ '^_q[0-9]+_'
              ORDER BY p.oid LOOP
        BEGIN
            EXECUTE pg_catalog.format('DROP ROUTINE %s', r.oid::regprocedure);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
            blocked := blocked || pg_catalog.format('%s is no longer part of pglogq; %s',
                                                    r.oid::regprocedure, pg_catalog.replace(detail, E'\n', '; '));
        END;
    END LOOP;
    IF pg_catalog.cardinality(blocked) > 0 THEN
        RAISE EXCEPTION 'pglogq install refused: objects of yours depend on pglogq functions it must drop: %',
            pg_catalog.array_to_string(blocked, ' | ')
            USING ERRCODE = 'PQ050',
                  DETAIL = pg_catalog.array_to_string(blocked, E'\n'),
                  HINT = 'drop those objects (save their definitions first), run the install again, then '
                         're-create them against the new signature; nothing was changed';
    END IF;
END
{_BLOCK_TAG};
"""


def views_code_sql() -> str:
    """views.sql, run so that a view it must drop while a user object depends on it gives PQ050."""
    views = views_sql()
    if not views:
        return ""
    return rf"""
DO {_BLOCK_TAG}
DECLARE
    detail text;
BEGIN
    EXECUTE {_quote(views)};
EXCEPTION WHEN dependent_objects_still_exist THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE EXCEPTION 'pglogq install refused: objects of yours depend on a pglogq view it must drop: %',
        pg_catalog.replace(detail, E'\n', '; ')
        USING ERRCODE = 'PQ050', DETAIL = detail,
              HINT = 'drop those objects (save their definitions first), run the install again, then '
                     're-create them; nothing was changed';
END
{_BLOCK_TAG};
"""


def plan(applied: set[int]) -> list[tuple[str, str]]:
    """The statements that bring a database with ``applied`` migrations to the latest schema."""
    steps: list[tuple[str, str]] = [("search_path", PIN_SEARCH_PATH_SQL), ("check", check_sql())]
    for m in migrations():
        if m.version not in applied:
            steps.append((f"migration {m.version:04d}_{m.name}", m.sql))
            steps.append((f"record {m.version}", record_sql(m)))
    steps.append(("functions", code_sql()))
    views = views_code_sql()
    if views:
        steps.append(("views", views))
    triggers = triggers_sql()
    if triggers:
        steps.append(("triggers", triggers))
    steps.append(("roles", roles_sql()))
    steps.append(("restore search_path", RESTORE_SEARCH_PATH_SQL))
    return steps


def guarded_migration_sql(m: Migration) -> str:
    """A migration that applies itself only when ``schema_version`` does not record it (the
    one-file script can thus run on a database at any earlier version, or an up-to-date one)."""
    return f"""
DO {_BLOCK_TAG}
DECLARE
    done boolean := false;
BEGIN
    IF to_regclass('pglogq.schema_version') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pglogq.schema_version WHERE version = {m.version})' INTO done;
    END IF;
    IF NOT done THEN
        EXECUTE {_quote(m.sql)};
        EXECUTE {_quote(record_sql(m))};
    END IF;
END
{_BLOCK_TAG};
"""


def one_file_sql() -> str:
    """The whole schema as one script for psql, in one transaction: it installs, upgrades from
    any earlier version (each migration checks ``schema_version``) or re-applies the functions,
    exactly as ``install_schema()`` does."""
    parts = [f"-- pglogq schema, version {latest_version()}: psql -v ON_ERROR_STOP=1 -f this.sql",
             "BEGIN;", f"SELECT pg_advisory_xact_lock(hashtext('{LOCK_KEY}'));"]
    all_versions = {m.version for m in migrations()}
    for label, sql in plan(all_versions):
        if label == "check":
            parts.append(f"-- {label}\n{sql}")
            for m in migrations():
                parts.append(f"-- migration {m.version:04d}_{m.name}\n{guarded_migration_sql(m)}")
            continue
        parts.append(f"-- {label}\n{sql}")
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"
