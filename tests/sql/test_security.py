"""Security: catalog sweeps, least privilege end to end, no shadowing, no SQL fragments, and
NOTIFY payloads that carry no event data.

Roles are cluster-wide: every test role has a unique name and is dropped at the end.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

import pglogq
from pglogq import schema
from tests.support.db import is_superuser

ROLES = ("pglogq_writer", "pglogq_reader", "pglogq_admin")
PINNED = "search_path=pglogq, pg_catalog, pg_temp"


def roles_map() -> dict[str, list[str]]:
    """The map function name → roles in sql/roles.sql (the one documented place)."""
    text = schema.roles_sql()
    m = re.search(r"roles_of jsonb := '(\{.*?\})';", text, re.S)
    assert m, "roles.sql no longer holds the roles_of map"
    data: dict[str, list[str]] = json.loads(m.group(1))
    return data


def api_functions(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    """(oid, name, signature) of every function in schema pglogq."""
    return [
        (r[0], r[1], r[2])
        for r in conn.execute(
            "SELECT p.oid::int, p.proname, p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace = 'pglogq'::regnamespace ORDER BY 2, 3"
        )
    ]


# -- catalog sweeps ------------------------------------------------------------------------------


def test_every_function_pins_search_path_with_pg_temp_last(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.prosecdef, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace = 'pglogq'::regnamespace"
        ).fetchall()
    assert len(rows) > 30
    definers = [r for r in rows if r[1]]
    assert definers, "no SECURITY DEFINER function at all?"
    for sig, _secdef, config in rows:
        paths = [c for c in (config or []) if c.startswith("search_path=")]
        assert paths == ([] if sig in INLINED else [PINNED]), (sig, config)
    # every public API function runs as definer but the reviewed INVOKER ones; helpers are never
    # granted (checked below)
    public = {r[0] for r in rows if not r[0].startswith("pglogq._")}
    assert public - INVOKER == {r[0] for r in definers if not r[0].startswith("pglogq._")}
    assert {r[0] for r in rows if not r[1]} >= INVOKER


# Helpers PostgreSQL inlines into their callers' statements, reviewed: a SET clause would stop
# that (a function call on the hot path).  Each qualifies every name it uses (pg_catalog.),
# runs as its caller, is granted to no role, and is called only from functions that pin the
# search_path, which is the one their body is then parsed with.
INLINED = {"pglogq._wake_ticker()"}


# Public functions that run as their caller, reviewed: they make or drop triggers on the caller's
# tables, so PostgreSQL itself checks the caller's TRIGGER privilege or ownership of the table
# (as definer they would let any pglogq_writer put triggers on any table).  They touch no table
# of pglogq's and call only functions granted to pglogq_writer.
INVOKER = {
    "pglogq.capture_table(regclass,text,text[],text[],text[],text,jsonb)",
    "pglogq.uncapture_table(regclass,text)",
}


def test_public_can_execute_or_read_nothing(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        # a NULL proacl means the default ACL, i.e. EXECUTE for PUBLIC
        open_funcs = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace"
            " AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
        ).fetchall()
        assert open_funcs == []
        open_rels = conn.execute(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'pglogq'::regnamespace"
            " AND c.relkind IN ('r', 'p', 'S', 'v', 'm')"
            " AND EXISTS (SELECT 1 FROM aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a"
            "             WHERE a.grantee = 0)"
        ).fetchall()
        assert open_rels == []
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a"
            " WHERE n.nspname = 'pglogq' AND a.grantee = 0)"
        ).fetchone()
        assert row == (False,)


def test_each_role_executes_exactly_its_documented_set(dsn: str) -> None:
    mapping = roles_map()
    with psycopg.connect(dsn) as conn:
        funcs = api_functions(conn)
        names = {name for _, name, _ in funcs}
        assert set(mapping) <= names, f"roles.sql grants functions that do not exist: {set(mapping) - names}"
        for oid, name, sig in funcs:
            for role in ROLES:
                row = conn.execute("SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (role, oid)).fetchone()
                assert row is not None
                if name.startswith("_"):
                    expected = False
                elif role == "pglogq_admin":
                    expected = True
                else:
                    expected = role in mapping.get(name, [])
                assert row[0] is expected, (role, sig)


def test_writer_and_reader_touch_no_table(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for role in ("pglogq_writer", "pglogq_reader"):
            rows = conn.execute(
                "SELECT c.relname, priv FROM pg_class c,"
                " unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) priv"
                " WHERE c.relnamespace = 'pglogq'::regnamespace AND c.relkind IN ('r', 'p', 'v')"
                "   AND has_table_privilege(%s, c.oid, priv)",
                (role,),
            ).fetchall()
            allowed = {("schema_version", "SELECT")}  # clients check the schema version
            if role == "pglogq_reader":
                allowed.add(("in_flight", "SELECT"))
            assert set(rows) <= allowed, (role, rows)


# -- end to end with real LOGIN roles -----------------------------------------------------------


@pytest.fixture
def logins(dsn: str) -> Iterator[Callable[..., str]]:
    """Factory: a LOGIN role with unique name, member of the given pglogq roles; its DSN."""
    if not is_superuser(dsn):
        pytest.skip("needs a superuser to create roles")
    made: list[str] = []

    def make(*grants: str, extra: str = "") -> str:
        name = f"pglogq_sec_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN'.encode())
            for g in grants:
                conn.execute(f'GRANT "{g}" TO "{name}"'.encode())
            if extra:
                conn.execute(extra.format(role=name).encode())
        made.append(name)
        return make_conninfo(dsn, user=name)

    yield make
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP OWNED BY "{name}"'.encode())
            conn.execute(f'DROP ROLE "{name}"'.encode())


def denied(fn: Callable[[], object]) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        fn()


def test_writer_cannot_consume_or_administer(client: pglogq.Client, logins: Callable[..., str]) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 0})
    client.tick("q", force=True)
    page = client.receive("q", "c")
    assert page.id is not None
    with pglogq.Client(logins("pglogq_writer")) as w, psycopg.connect(w.dsn or "", autocommit=True) as conn:
        assert w.schema_versions() == client.schema_versions()
        w.send("q", {"n": 1})
        w.send_batch("q", [{"n": 2}])
        assert [i.queue_name for i in w.queue_info()] == ["q"]
        denied(lambda: w.receive("q", "c"))
        denied(lambda: w.ack(page.id or 0))
        denied(lambda: w.nack(page.messages[0]))
        denied(lambda: w.dlq_inspect("q"))
        denied(lambda: w.dlq_replay(1))
        denied(lambda: w.consumer_info())
        denied(lambda: w.tick("q", force=True))
        denied(lambda: w.create_queue("other"))
        denied(lambda: w.subscribe("q", "spy"))
        denied(lambda: w.set_queue_config("q", "paused", True))
        denied(lambda: conn.execute("SELECT * FROM pglogq.seek_plan('q', 'c', 'latest')"))
        denied(lambda: conn.execute("SELECT pglogq.heartbeat(%s)", (page.id,)))
        denied(lambda: conn.execute("SELECT * FROM pglogq.event"))
        denied(lambda: conn.execute("SELECT * FROM pglogq.dead_letter"))
        denied(lambda: conn.execute("SELECT pglogq._tick(1, true)"))
    # the writer's sends arrived; the open batch is untouched
    assert client.receive("q", "c").id == page.id


def test_reader_cannot_produce_or_administer(client: pglogq.Client, logins: Callable[..., str]) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "max_retries", 1)
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    with pglogq.Client(logins("pglogq_reader")) as r, psycopg.connect(r.dsn or "", autocommit=True) as conn:
        assert r.schema_versions() == client.schema_versions()
        page = r.receive("q", "c")
        assert [m.payload for m in page] == [{"n": 1}]
        assert r.nack(page.messages[0], retry_after=timedelta(0)) == "retry"
        assert page.ack() is True
        assert [i.consumer_name for i in r.consumer_info("q")] == ["c"]
        denied(lambda: r.send("q", {"n": 2}))
        denied(lambda: r.send_batch("q", [{"n": 3}]))
        denied(lambda: r.cancel("q", 1))
        denied(lambda: r.dlq_replay(1))
        denied(lambda: r.dlq_replay_all("q"))
        denied(lambda: r.dlq_purge("q"))
        denied(lambda: r.tick("q", force=True))
        denied(lambda: r.drop_queue("q", force=True))
        denied(lambda: r.unsubscribe("q", "c"))
        denied(lambda: conn.execute("SELECT pglogq.maint_run('pump')"))
        denied(lambda: conn.execute("INSERT INTO pglogq.event (ev_queue, ev_slot, ev_id, ev_payload)"
                                    " VALUES (1, 0, 1, '{}')"))
        denied(lambda: conn.execute("UPDATE pglogq.subscription SET last_tick = 1"))
    assert client.queue_info("q")[0].consumers == 1


def test_login_role_without_grant_can_call_nothing(dsn: str, logins: Callable[..., str]) -> None:
    nobody = logins()
    with psycopg.connect(dsn) as conn:
        funcs = api_functions(conn)
    with psycopg.connect(nobody) as conn:
        callable_ = [
            sig for oid, _, sig in funcs
            if conn.execute("SELECT has_function_privilege(%s::oid, 'EXECUTE')", (oid,)).fetchone() != (False,)
        ]
        assert callable_ == []
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pglogq.queue")
    with pglogq.Client(nobody) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.send("q", {})
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.queue_info()


# -- roles are cluster-wide -----------------------------------------------------------


def test_pglogq_roles_reach_every_database_until_connect_is_revoked(
    dsn: str, new_db: Callable[[], str], logins: Callable[..., str]
) -> None:
    """Regression: pglogq_admin, pglogq_writer and pglogq_reader are cluster-wide roles, and every
    database grants CONNECT to PUBLIC by default: a login given pglogq_admin for one database
    administers the queues of every other database where pglogq is installed.  What isolates
    tenants is CONNECT (docs/how-to/psql-only.md, "Several databases in one cluster"): once the
    other database revokes it from PUBLIC, the login cannot reach it at all."""
    tenant_a = logins("pglogq_admin")  # meant for the database of dsn only
    other_db = new_db()  # another application's database, pglogq installed, same cluster
    user = conninfo_to_dict(tenant_a)["user"]
    intruder = make_conninfo(other_db, user=user)
    with pglogq.Client(other_db) as owner:
        owner.create_queue("theirs")
    # the fact the docs state: it works across databases
    with pglogq.Client(intruder) as c:
        assert c.create_queue("planted")
        assert c.drop_queue("theirs")
        assert c.drop_queue("planted")
    # the isolation the docs recommend
    other_name = conninfo_to_dict(other_db)["dbname"]
    with psycopg.connect(other_db, autocommit=True) as conn:
        conn.execute(f'REVOKE CONNECT ON DATABASE "{other_name}" FROM PUBLIC'.encode())
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(intruder).close()
    # its own database is untouched by that
    with pglogq.Client(tenant_a) as c:
        assert c.create_queue("mine")


# -- shadowing -----------------------------------------------------------------------------------

# built-ins the API calls unqualified: (name, argument types, return type, call of the real one)
SHADOWED_FUNCTIONS = [
    ("now", "", "timestamptz", "pg_catalog.now()"),
    ("clock_timestamp", "", "timestamptz", "pg_catalog.clock_timestamp()"),
    ("pg_current_xact_id", "", "xid8", "pg_catalog.pg_current_xact_id()"),
    ("pg_current_snapshot", "", "pg_snapshot", "pg_catalog.pg_current_snapshot()"),
    ("pg_visible_in_snapshot", "xid8, pg_snapshot", "boolean", "pg_catalog.pg_visible_in_snapshot($1, $2)"),
    ("pg_snapshot_xmin", "pg_snapshot", "xid8", "pg_catalog.pg_snapshot_xmin($1)"),
    ("pg_snapshot_xmax", "pg_snapshot", "xid8", "pg_catalog.pg_snapshot_xmax($1)"),
    ("jsonb_typeof", "jsonb", "text", "pg_catalog.jsonb_typeof($1)"),
    ("octet_length", "text", "integer", "pg_catalog.octet_length($1)"),
    ("pg_column_size", "jsonb", "integer", "pg_catalog.pg_column_size($1)"),
    ("hashtext", "text", "integer", "pg_catalog.hashtext($1)"),
    ("pg_notify", "text, text", "void", "pg_catalog.pg_notify($1, $2)"),
    ("nextval", "regclass", "bigint", "pg_catalog.nextval($1)"),
    ("pg_sequence_last_value", "regclass", "bigint", "pg_catalog.pg_sequence_last_value($1)"),
    ("lower", "text", "text", "pg_catalog.lower($1)"),
    ("left", "text, integer", "text", "pg_catalog.left($1, $2)"),
    ("current_setting", "text", "text", "pg_catalog.current_setting($1)"),
    ("format", "text, text", "text", "pg_catalog.format($1, $2)"),
]
# operators: (symbol, left type, right type, real function)
SHADOWED_OPERATORS = [
    ("=", "text", "text", "pg_catalog.texteq"),
    ("=", "integer", "integer", "pg_catalog.int4eq"),
    ("=", "bigint", "bigint", "pg_catalog.int8eq"),
    ("<", "xid8", "xid8", "pg_catalog.xid8lt"),
    (">=", "xid8", "xid8", "pg_catalog.xid8ge"),
    ("~", "text", "text", "pg_catalog.textregexeq"),
    ("||", "text", "text", "pg_catalog.textcat"),
]


def plant_traps(conn: psycopg.Connection[Any], schema_name: str) -> None:
    """Functions and operators named like built-ins that record that they ran, then behave."""
    for i, (name, args, ret, real) in enumerate(SHADOWED_FUNCTIONS):
        params = ", ".join(f"a{j} {t.strip()}" for j, t in enumerate(args.split(",")) if t.strip())
        call = real.replace("$1", "a0").replace("$2", "a1")
        body = (f"BEGIN INSERT INTO public.pwned VALUES ('{schema_name}.{name}'); "
                f"RETURN {call}; END" if ret != "void" else
                f"BEGIN INSERT INTO public.pwned VALUES ('{schema_name}.{name}'); PERFORM {call}; END")
        conn.execute(
            f"CREATE FUNCTION {schema_name}.{name}({params}) RETURNS {ret} LANGUAGE plpgsql "
            f"AS $t{i}$ {body} $t{i}$".encode()
        )
    if schema_name != "public":
        return  # operators in pg_temp cannot be created
    for i, (op, left, right, real) in enumerate(SHADOWED_OPERATORS):
        fn = f"public.evil_op_{i}"
        conn.execute(
            f"CREATE FUNCTION {fn}(a {left}, b {right}) RETURNS {'text' if op == '||' else 'boolean'}"
            f" LANGUAGE plpgsql AS $o$ BEGIN INSERT INTO public.pwned VALUES ('op {op}({left},{right})');"
            f" RETURN {real}(a, b); END $o$".encode()
        )
        conn.execute(f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {fn})".encode())


def api_cycle(c: pglogq.Client, conn: psycopg.Connection[Any], queue: str) -> None:
    """Every kind of API call once, checking results."""
    assert c.create_queue(queue)
    c.set_queue_config(queue, "max_retries", 1)
    assert c.subscribe(queue, "c")
    ids = [c.send(queue, {"n": 1}, type="t", headers={"h": "v"}, idempotency_key="k1")]
    ids += c.send_batch(queue, [{"n": 2}, {"n": 3}])
    c.send(queue, {"later": 1}, delay=timedelta(hours=1))
    c.tick(queue, force=True)
    c.tick()
    page = c.receive(queue, "c", max_messages=10)
    assert [m.msg_id for m in page] == ids
    assert c.nack(page.messages[0], retry_after=timedelta(0)) == "retry"
    assert page.ack()
    c.maintain()
    c.rotate(queue)
    c.tick(queue, force=True)
    again = c.receive(queue, "c", max_messages=10)
    assert [m.msg_id for m in again] == ids[:1]
    assert c.nack(again.messages[0]) == "dead"
    again.ack()
    dead = c.dlq_inspect(queue)
    assert [d.msg_id for d in dead] == ids[:1]
    assert c.dlq_replay(dead[0].dead_id) == ids[0]
    assert c.queue_info(queue)[0].consumers == 1
    assert c.consumer_info(queue)[0].consumer_name == "c"
    conn.execute("SELECT * FROM pglogq.seek_plan(%s, 'c', 'latest')", (queue,)).fetchall()
    conn.execute("SELECT * FROM pglogq.seek(%s, 'c', 'latest')", (queue,)).fetchall()
    assert c.unsubscribe(queue, "c")
    assert c.drop_queue(queue, force=True)  # the delayed event is still stored


def hostile_session(conn: psycopg.Connection[Any]) -> None:
    """What an attacker does in its own session before calling the API."""
    plant_traps(conn, "pg_temp")
    # temporary tables named like pglogq's, in the schema this session searches first
    for t in ("queue", "tick", "subscription", "event", "retry", "dead_letter"):
        conn.execute(f"CREATE TEMP TABLE {t} (junk int)".encode())
    conn.execute("SET search_path = pg_temp, public, pg_catalog")


def test_shadowing_functions_and_operators_never_run_inside_the_api(
    dsn: str, logins: Callable[..., str]
) -> None:
    attacker = logins("pglogq_admin", extra='GRANT CREATE ON SCHEMA public TO "{role}"')
    with psycopg.connect(attacker, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.pwned (what text)")
        conn.execute("GRANT INSERT, SELECT, DELETE ON public.pwned TO PUBLIC")
        plant_traps(conn, "public")
        hostile_session(conn)
        # positive control: the traps do fire for unqualified calls outside the API
        conn.execute("SELECT now(), 'a'::text = 'b'::text, pg_temp.clock_timestamp()")
        fired = {r[0] for r in conn.execute("SELECT what FROM public.pwned")}
        assert {"public.now", "op =(text,text)", "pg_temp.clock_timestamp"} <= fired
        conn.execute("DELETE FROM public.pwned")
        # the attacker calls the whole API from a hostile session (one connection: every call,
        # maintenance included, runs with those temp objects and that search_path)
        pool: ConnectionPool[Any] = ConnectionPool(
            attacker, min_size=1, max_size=1, kwargs={"autocommit": True}, configure=hostile_session, open=True
        )
        with pool, pglogq.Client(pool=pool) as c:
            api_cycle(c, conn, "shadow1")
        assert conn.execute("SELECT what FROM public.pwned").fetchall() == []
    # a victim (the database owner, default search_path "$user", public) calls the API too
    with pglogq.Client(dsn) as victim, psycopg.connect(dsn, autocommit=True) as vconn:
        api_cycle(victim, vconn, "shadow2")
        assert vconn.execute("SELECT what FROM public.pwned").fetchall() == []


# -- no SQL fragments ----------------------------------------------------------------------------

FRAGMENT_NAMES = re.compile(r"(where|sql|query|filter|order|clause|expr|fragment|condition|statement|cmd|predicate)")
# every text parameter of the API, reviewed: each is a name, a label, or a value parsed strictly
TEXT_PARAMETERS = {
    "queue_name", "consumer_name", "worker_name", "type", "reason", "idempotency_key", "idempotency_keys",
    "param", "value", "op", "to_position", "stage", "worker", "for_queue", "for_consumer", "queue", "consumer",
    "msg_type", "include_columns", "exclude_columns", "key_columns", "old_values",
    "search",  # dlq_search: a plain substring (strpos on lower()), no LIKE pattern, no dynamic SQL
    # the job queue: per-type settings, jobs, schedules (compared or stored as values only)
    "ev_type", "in_state", "after", "name", "cron", "missed",
    # partitions: event keys (stored and hashed as values only)
    "key", "keys",
    # sharding: the cluster and shard names of cluster_join (checked by _check_name, stored as values)
    "cluster_name", "shard_name",
    # the outcome log (record_outcomes): outcomes checked against a fixed list, errors stored,
    # results cast to jsonb, types stored: values only
    "outcomes", "errors", "results", "types",
}
# functions that build SQL dynamically, reviewed: identifiers only through format('%I'), values
# only through USING, parameter text never concatenated
DYNAMIC_SQL = {"create_queue", "drop_queue", "maint_rotate_step1", "set_queue_config",
               # rotated metadata: tick slot and state partition names from format('%I') of numbers
               "maint_rotate_meta",
               # the outcome log's oldest slot: TRUNCATE of format('%I') of a number
               "maint_rotate_history",
               # partitions: the partition / urgent-event index of one queue, names from format('%I')
               "_set_layout",
               # CREATE/DROP TRIGGER on the caller's table: the table as regclass (%s of a regclass
               # is its quoted name), trigger names %I, trigger arguments and only_if %L
               "capture_table", "uncapture_table",
               # the queue's copy of receive, jobs, cancel, cancel's check, nack, mark_started,
               # lookup, seek_plan and ack_receive's short way (_share_step): its name made of
               # the queue's id, format('%I')
               "receive", "jobs", "cancel", "_cancel_handed", "nack", "mark_started", "lookup", "seek_plan",
               "ack_receive",
               # the count of the queue's own event table: its name made of the queue's id, format('%I')
               "stored_events",
               # a listing of every queue reads a queue's id sequence with SELECT (a lock its
               # subtransaction lets go): the sequence as regclass, %s; one queue's row from its
               # copy, whose name is made of the queue's id, format('%I')
               "queue_info",
               # copies of installed functions (their catalog definitions, names made of the
               # queue's id), run as src; no argument text reaches them
               "_queue_functions",
               # the reads and the insert of the queue's own tick and event tables: names made of
               # the queue's id, format('%I'); values through USING
               "_tick",
               # the sends' inserts and cancel's re-check at COMMIT, into / from the queue's own
               # event table: its name made of the queue's id, format('%I'); values through USING
               "send", "_send_batch", "send_batch_keyed", "_cancel_recheck",
               # the queue's copy of _consumer_ticks: its name made of the queue's id, format('%I')
               "consumer_info",
               # the read of the queue's last tick from its own tick table: its name made of the
               # queue's id, format('%I')
               "subscribe"}


def test_no_api_function_takes_sql_fragments(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, coalesce(p.proargnames, '{}'), p.proargtypes::regtype[]::text[], p.pronargs,"
            " p.prosrc FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace"
        ).fetchall()
    dynamic = set()
    for name, argnames, argtypes, nargs, src in rows:
        names = (list(argnames) + [""] * nargs)[:nargs]  # unnamed parameters count too
        for arg, typ in zip(names, argtypes, strict=True):
            assert not FRAGMENT_NAMES.search(arg), (name, arg)
            if typ in ("text", "character varying", "text[]") and not name.startswith("_"):
                assert arg in TEXT_PARAMETERS, f"new text parameter {name}({arg}): review it, then list it"
        if re.search(r"\bEXECUTE\s", src, re.I):
            dynamic.add(name)
            for stmt in re.findall(r"\bEXECUTE\s+(.*?);", src, re.I | re.S):
                # each dynamic statement is built by format() or from a variable made by format(),
                # or is a constant (string literals only, its values passed with USING: EXECUTEd to
                # be planned for those values, never built from them)
                constant = re.fullmatch(r"(?:'[^']*'\s*)+(?:INTO\b.*|USING\b.*)?", stmt.strip(), re.S)
                # ... or a variable the function declares constant, from string literals only
                var = re.match(r"(\w+)\s+(?:INTO|USING)\b", stmt.strip())
                constant = constant or (var is not None and re.search(
                    rf"\b{var.group(1)}\s+constant\s+text\s*:=\s*(?:'[^']*'\s*)+;", src, re.I) is not None)
                assert ("format(" in stmt or re.match(r"'[^']*'\s*\|\|\s*tab\b", stmt.strip()) or constant
                        or (name, stmt) == ("_queue_functions", "src")), (name, stmt)
    assert dynamic <= DYNAMIC_SQL, f"new dynamic SQL in {dynamic - DYNAMIC_SQL}: review it, then list it"


# -- NOTIFY --------------------------------------------------------------------------------------


def test_notify_payloads_carry_no_event_data(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    secret = "s3cr3t-" + uuid.uuid4().hex
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "pglogq.q"')
        client.send("q", {"secret": secret}, type=secret, headers={"k": secret})
        client.send_batch("q", [{"secret": secret}] * 3)
        # nothing but the ticker notifies: a send alone says nothing
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == []
        client.tick("q", force=True)
        page = client.receive("q", "c")
        page.ack()
        client.tick("q", force=True)
        got = list(listener.notifies(timeout=5, stop_after=2))
    assert len(got) == 2
    for n in got:
        assert n.channel == "pglogq.q"
        assert re.fullmatch(r"\d+", n.payload), n.payload
        assert secret not in n.payload
    assert [int(n.payload) for n in got] == sorted(int(n.payload) for n in got)


def test_jobs_type_settings_and_schedules_by_role(client: pglogq.Client, logins: Callable[..., str]) -> None:
    """A writer may look a job up (it sent it) but not list a consumer's jobs; a reader
    may do both; per-type settings and schedules are the admin's."""
    client.create_queue("q")
    client.subscribe("q", "c")
    m = client.send("q", {"n": 1})
    with pglogq.Client(logins("pglogq_writer")) as w, pglogq.Client(logins("pglogq_reader")) as r:
        assert [j.state for j in w.lookup("q", m)] == ["waiting"]
        assert [j.state for j in r.lookup("q", m)] == ["waiting"]
        assert [j.msg_id for j in r.jobs("q")] == [m]
        denied(lambda: w.jobs("q"))
        for role in (w, r):
            denied(lambda role=role: role.set_type_config("q", "t", "max_retries", 0))
            denied(lambda role=role: role.type_config("q"))
            denied(lambda role=role: role.schedule_add("q", "s", "* * * * *", {}))
            denied(lambda role=role: role.schedule_list("q"))
            denied(lambda role=role: role.schedule_remove("q", "s"))
    assert client.type_config("q") == [] and client.schedule_list() == []
