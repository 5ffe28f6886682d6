"""Change capture from tables: pglogq.capture_table on real tables and real triggers.

Every test captures a table of its own fresh database into a queue, changes rows with plain SQL
(as an application would, with no pglogq call), then ticks and reads what the queue received.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pglogq
from tests.support.cli import fails, js, ok
from tests.support.draining import drain


def events(client: pglogq.Client, queue: str = "cdc", consumer: str = "c") -> list[pglogq.Message]:
    """Everything the consumer has not read yet, in order (ticks first)."""
    client.tick(queue, force=True)
    return drain(client, queue, consumer)


@pytest.fixture
def db(client: pglogq.Client, dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection with queue 'cdc', consumer 'c' and table public.orders captured."""
    client.create_queue("cdc")
    client.subscribe("cdc", "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, status text, amount numeric, note text)")
        yield conn


def test_insert_update_delete_each_append_one_event_keyed_by_the_primary_key(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    assert client.capture_table("orders", "cdc") is True
    db.execute("INSERT INTO orders VALUES (1, 'new', 10.5, 'x')")
    db.execute("UPDATE orders SET status = 'paid' WHERE id = 1")
    db.execute("DELETE FROM orders WHERE id = 1")
    got = events(client)
    assert [m.type for m in got] == ["insert", "update", "delete"]
    assert all(m.headers == {"key": "1", "table": "public.orders"} for m in got)
    ins, upd, dele = (m.payload for m in got)
    assert ins == {"op": "insert", "table": "public.orders", "key": {"id": 1},
                   "new": {"id": 1, "status": "new", "amount": 10.5, "note": "x"}}
    # default old_values='changed': the old values of the changed columns only
    assert upd == {"op": "update", "table": "public.orders", "key": {"id": 1},
                   "new": {"id": 1, "status": "paid", "amount": 10.5, "note": "x"}, "old": {"status": "new"}}
    assert dele == {"op": "delete", "table": "public.orders", "key": {"id": 1},
                    "old": {"id": 1, "status": "paid", "amount": 10.5, "note": "x"}}


def test_multi_row_update_in_one_transaction_appends_one_event_per_row(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    db.execute("INSERT INTO orders SELECT g, 'new', g, NULL FROM generate_series(1, 50) g")
    client.capture_table("orders", "cdc")
    with db.transaction():
        db.execute("UPDATE orders SET status = 'paid' WHERE id % 2 = 0")
        db.execute("UPDATE orders SET amount = amount + 1 WHERE id <= 10")
    got = events(client)
    assert len(got) == 25 + 10
    assert {m.payload["key"]["id"] for m in got[:25]} == set(range(2, 51, 2))
    assert sorted(m.payload["new"]["amount"] for m in got[25:]) == [i + 1 for i in range(1, 11)]
    assert len({m.txid for m in got}) == 1  # all of it committed as one transaction


def test_rolled_back_transaction_appends_nothing(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc")
    with pytest.raises(RuntimeError), db.transaction():
        db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
        db.execute("UPDATE orders SET status = 'x'")
        raise RuntimeError("the application fails")
    with db.transaction():
        db.execute("INSERT INTO orders VALUES (2, 'new', 1, NULL)")
        with pytest.raises(psycopg.errors.UniqueViolation), db.transaction():  # a savepoint rolled back
            db.execute("INSERT INTO orders VALUES (3, 'new', 1, NULL)")
            db.execute("INSERT INTO orders VALUES (3, 'dup', 1, NULL)")
    got = events(client)
    assert [(m.type, m.payload["key"]) for m in got] == [("insert", {"id": 2})]


def test_schema_change_of_the_captured_table(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc")
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, 'n')")
    db.execute("ALTER TABLE orders ADD COLUMN region text DEFAULT 'eu'")
    db.execute("UPDATE orders SET region = 'us' WHERE id = 1")
    db.execute("ALTER TABLE orders DROP COLUMN note")
    db.execute("INSERT INTO orders VALUES (2, 'new', 2, 'asia')")
    got = events(client)
    assert got[0].payload["new"] == {"id": 1, "status": "new", "amount": 1, "note": "n"}
    assert got[1].payload["new"] == {"id": 1, "status": "new", "amount": 1, "note": "n", "region": "us"}
    assert got[1].payload["old"] == {"region": "eu"}
    assert got[2].payload["new"] == {"id": 2, "status": "new", "amount": 2, "region": "asia"}


def test_include_list_ignores_added_columns_and_unchanged_updates(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    client.capture_table("orders", "cdc", include_columns=["id", "status"])
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, 'n')")
    db.execute("UPDATE orders SET note = 'only a note'")  # no captured column changed: no event
    db.execute("UPDATE orders SET status = status")  # nothing changed at all: no event
    db.execute("ALTER TABLE orders ADD COLUMN secret text")
    db.execute("UPDATE orders SET secret = 's', status = 'paid'")
    got = events(client)
    assert [m.payload.get("new") for m in got] == [{"id": 1, "status": "new"}, {"id": 1, "status": "paid"}]
    assert got[1].payload["old"] == {"status": "new"}


def test_exclude_list_and_old_values_modes(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc", exclude_columns=["note"], old_values="full")
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, 'secret')")
    db.execute("UPDATE orders SET amount = 2")
    client.capture_table("orders", "cdc", old_values="none")  # replaces the capture: note comes back
    db.execute("UPDATE orders SET amount = 3")
    db.execute("DELETE FROM orders")
    got = events(client)
    assert got[0].payload["new"] == {"id": 1, "status": "new", "amount": 1}
    assert got[1].payload["old"] == {"id": 1, "status": "new", "amount": 1}
    assert "old" not in got[2].payload and got[2].payload["new"]["note"] == "secret"
    assert got[3].payload == {"op": "delete", "table": "public.orders", "key": {"id": 1}}


def test_primary_key_change_carries_the_old_key(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc", exclude_columns=["id"])
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
    db.execute("UPDATE orders SET id = 7")  # only the (excluded) key changed: still an event
    got = events(client)
    assert got[1].payload["key"] == {"id": 7} and got[1].payload["old_key"] == {"id": 1}
    assert got[1].headers["key"] == "7"


def test_composite_key_and_key_columns_for_a_table_without_primary_key(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    db.execute("CREATE TABLE lines (order_id int, line int, sku text, PRIMARY KEY (order_id, line))")
    db.execute("CREATE TABLE log (code text NOT NULL UNIQUE, msg text)")
    client.capture_table("lines", "cdc")
    with pytest.raises(pglogq.NoCaptureKey) as err:
        client.capture_table("log", "cdc")
    assert "primary key" in err.value.message and err.value.sqlstate == "PQ071"
    assert [c.table_name for c in client.captured_tables()] == ["lines"]  # the refusal changed nothing
    client.capture_table("log", "cdc", key_columns=["code"])
    db.execute("INSERT INTO lines VALUES (5, 1, 'a'), (5, 2, 'b')")
    db.execute("INSERT INTO log VALUES ('E1', 'boom')")
    got = events(client)
    assert [m.headers["key"] for m in got] == ["[5, 1]", "[5, 2]", "E1"]
    assert got[1].payload["key"] == {"order_id": 5, "line": 2}


def test_truncate_appends_one_event(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc")
    db.execute("INSERT INTO orders SELECT g, 'new', g, NULL FROM generate_series(1, 3) g")
    db.execute("TRUNCATE orders")
    got = events(client)
    assert [m.type for m in got] == ["insert"] * 3 + ["truncate"]
    assert got[3].payload == {"op": "truncate", "table": "public.orders"}
    assert got[3].headers == {"table": "public.orders"}


def test_only_if_becomes_the_triggers_when_clause(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.capture_table("orders", "cdc", only_if={"status": "paid"})
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL), (2, 'paid', 2, NULL)")
    db.execute("UPDATE orders SET status = 'paid' WHERE id = 1")  # enters the condition
    db.execute("UPDATE orders SET status = 'refunded' WHERE id = 2")  # leaves it: old row matched
    db.execute("DELETE FROM orders WHERE id = 2")  # old row no longer matches
    got = events(client)
    assert [(m.type, m.payload["key"]["id"]) for m in got] == [("insert", 2), ("update", 1), ("update", 2)]
    [info] = client.captured_tables("cdc")
    assert info.only_if == {"status": "paid"} and info.key_columns == ["id"] and info.old_values == "changed"
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass AND tgqual IS NOT NULL")
        assert cur.fetchone() == (3,)


def test_uncapture_and_list(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.create_queue("audit")
    client.capture_table("orders", "cdc")
    client.capture_table("orders", "audit", include_columns=["id"])
    assert client.capture_table("orders", "cdc") is False  # replaced
    assert sorted((c.table_name, c.queue_name) for c in client.captured_tables()) == [
        ("orders", "audit"), ("orders", "cdc")]
    assert [c.include_columns for c in client.captured_tables("audit")] == [["id"]]
    assert client.captured_tables("nope") == []
    assert client.uncapture_table("orders", "cdc") == 1
    assert client.uncapture_table("orders", "cdc") == 0
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
    assert events(client) == []
    assert client.uncapture_table("orders") == 1
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'orders'::regclass")
        assert cur.fetchone() == (0,)


def test_drop_queue_refuses_while_a_table_is_captured_into_it(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    client.capture_table("orders", "cdc")
    with pytest.raises(pglogq.QueueCaptured) as err:
        client.drop_queue("cdc", force=True)
    assert "orders" in err.value.message and err.value.sqlstate == "PQ074"
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")  # writes still work
    client.uncapture_table("orders")
    assert client.drop_queue("cdc", force=True) is True


def test_a_row_too_large_for_the_queue_fails_the_write(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    client.set_queue_config("cdc", "max_payload_bytes", 1024)
    client.capture_table("orders", "cdc")
    with pytest.raises(psycopg.Error) as err:
        db.execute("INSERT INTO orders VALUES (1, 'new', 1, repeat('x', 5000))")
    assert err.value.sqlstate == "PQ006"
    db.execute("INSERT INTO orders VALUES (2, 'new', 1, 'small')")
    assert [m.payload["key"] for m in events(client)] == [{"id": 2}]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"table": "pglogq.queue"}, pglogq.NotCapturable),
        ({"table": "pg_class"}, pglogq.NotCapturable),
        ({"table": "orders_view"}, pglogq.NotCapturable),
        ({"table": "orders", "queue": "nope"}, pglogq.UnknownQueue),
        ({"table": "orders", "queue": "bad name"}, pglogq.UnknownQueue),
        ({"table": "orders", "include_columns": ["id"], "exclude_columns": ["note"]}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "include_columns": []}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "include_columns": ["id", "id"]}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "exclude_columns": ["nope"]}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "key_columns": ["nope"]}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "key_columns": []}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "include_columns": "id"}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "include_columns": [None]}, pglogq.InvalidCaptureColumns),
        ({"table": "orders", "old_values": "some"}, pglogq.InvalidCaptureOption),
        ({"table": "orders", "old_values": None}, pglogq.InvalidCaptureOption),
        ({"table": "orders", "only_if": ["paid"]}, pglogq.InvalidCaptureOption),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    client: pglogq.Client, db: psycopg.Connection[Any], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    db.execute("CREATE VIEW orders_view AS SELECT * FROM orders")
    args = {"queue": "cdc", **kwargs}
    table, queue = args.pop("table"), args.pop("queue")
    with pytest.raises(error):
        client.capture_table(table, queue, **args)
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                    " WHERE p.proname = 'capture_row'")
        assert cur.fetchone() == (0,)


def test_only_if_must_be_a_json_object_on_the_server_too(db: psycopg.Connection[Any]) -> None:
    for sql, code in [
        ("SELECT pglogq.capture_table('orders', 'cdc', only_if => '[1]')", "PQ073"),
        ("SELECT pglogq.capture_table('no_such_table', 'cdc')", "42P01"),
        ("SELECT pglogq.capture_table(NULL, 'cdc')", "PQ070"),
        ("SELECT pglogq.capture_table('orders', NULL)", "PQ004"),
    ]:
        with pytest.raises(psycopg.Error) as err:
            db.execute(sql.encode())
        assert err.value.sqlstate == code, sql


# -- least privilege ------------------------------------------------------------------------------


@pytest.fixture
def roles(dsn: str) -> Iterator[Callable[..., str]]:
    """Factory: a LOGIN role with a unique name, member of the given roles; returns its DSN."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (row and row[0]):
        pytest.skip("needs a superuser to create roles")
    made: list[str] = []

    def make(*grants: str) -> str:
        name = f"pglogq_cap_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN'.encode())
            conn.execute(f'GRANT CREATE ON SCHEMA public TO "{name}"'.encode())
            for g in grants:
                conn.execute(f'GRANT "{g}" TO "{name}"'.encode())
        made.append(name)
        return make_conninfo(dsn, user=name)

    yield make
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP OWNED BY "{name}"'.encode())
            conn.execute(f'DROP ROLE "{name}"'.encode())


def test_table_owner_without_writer_role_cannot_capture_into_a_queue(
    client: pglogq.Client, db: psycopg.Connection[Any], roles: Callable[..., str]
) -> None:
    owner = roles()  # owns a table, has no pglogq role
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("CREATE TABLE mine (id int PRIMARY KEY)")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pglogq.capture_table('mine', 'cdc')")
        # making the trigger by hand, with arguments of its choosing, is refused too
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TRIGGER t AFTER INSERT ON mine FOR EACH ROW "
                         "EXECUTE FUNCTION pglogq.capture_row('cdc', 'changed', '{id}', '', '', '')")
        conn.execute("INSERT INTO mine VALUES (1)")
    assert events(client) == []


def test_writer_captures_only_tables_it_may_trigger_and_plain_writers_need_no_role(
    client: pglogq.Client, db: psycopg.Connection[Any], roles: Callable[..., str]
) -> None:
    writer = roles("pglogq_writer")
    app = roles()  # the application's role: writes the table, has no pglogq role at all
    with psycopg.connect(writer, autocommit=True) as conn:
        # orders belongs to another role: no TRIGGER privilege, PostgreSQL refuses
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pglogq.capture_table('orders', 'cdc')")
        conn.execute("CREATE TABLE theirs (id int PRIMARY KEY, v text)")
        conn.execute("SELECT pglogq.capture_table('theirs', 'cdc')")
        conn.execute("GRANT INSERT, UPDATE ON theirs TO " + psycopg.sql.Identifier(
            psycopg.conninfo.conninfo_to_dict(app)["user"]).as_string(conn))
        assert conn.execute("SELECT count(*) FROM pglogq.captured_tables()").fetchone() == (1,)
    with psycopg.connect(app, autocommit=True) as conn:
        conn.execute("INSERT INTO public.theirs VALUES (1, 'a')")
        # the trigger's function cannot be called by hand, nor is the queue reachable otherwise
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pglogq.send('cdc', '{}')")
    # "trigger functions can only be called as triggers"
    with psycopg.connect(writer, autocommit=True) as conn, pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute("SELECT pglogq.capture_row()")
    # a role that does not own the table cannot remove someone else's capture
    with psycopg.connect(app, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT pglogq.uncapture_table('public.theirs')")
    got = events(client)
    assert [(m.type, m.payload["new"]) for m in got] == [("insert", {"id": 1, "v": "a"})]


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_capture_add_list_remove(client: pglogq.Client, db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE log (code text NOT NULL, msg text)")
    r = ok(dsn, "capture", "add", "orders", "cdc", "--exclude", "note", "--only-if", '{"status": "paid"}')
    assert "capturing orders into 'cdc'" in r.stdout
    assert js(dsn, "capture", "add", "log", "cdc", "--key-column", "code", "--old-values", "full") == {
        "table": "log", "queue": "cdc", "created": True}
    rows = js(dsn, "capture", "list")
    assert [(r["table_name"], r["key_columns"], r["exclude_columns"], r["only_if"], r["old_values"]) for r in rows] == [
        ("log", ["code"], None, None, "full"), ("orders", ["id"], ["note"], {"status": "paid"}, "changed")]
    assert "all but note" in ok(dsn, "capture", "list").stdout
    fails(dsn, 4, "capture", "add", "log", "cdc")  # no primary key, no --key-column: PQ071
    fails(dsn, 4, "capture", "add", "orders", "cdc", "--only-if", "{nope")
    fails(dsn, 3, "capture", "add", "no_such_table", "cdc")
    fails(dsn, 3, "capture", "add", "orders", "no_such_queue")
    fails(dsn, 5, "queue", "drop", "cdc", "--force", "--yes")  # PQ074: captured
    db.execute("INSERT INTO orders VALUES (1, 'paid', 1, 'n')")
    assert [m.payload["new"] for m in events(client)] == [{"id": 1, "status": "paid", "amount": 1}]
    assert js(dsn, "capture", "remove", "orders", "--queue", "other") == {"table": "orders", "removed": 0}
    assert "1 capture(s) removed" in ok(dsn, "capture", "remove", "orders").stdout
    assert js(dsn, "capture", "remove", "log") == {"table": "log", "removed": 1}
    assert js(dsn, "capture", "list") == []


def test_capture_in_a_rolled_back_transaction_leaves_nothing(
    client: pglogq.Client, db: psycopg.Connection[Any]
) -> None:
    with pytest.raises(RuntimeError), db.transaction():
        client.capture_table("orders", "cdc", conn=db)
        db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
        raise RuntimeError("rolled back")
    assert client.captured_tables() == []
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
    assert events(client) == []


def test_longest_queue_name_keeps_whole_trigger_names(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    long = "q" * 48  # the longest queue name: pglogq_cap_x_ + 48 bytes = 61 < 63, never truncated
    client.create_queue(long)
    client.subscribe(long, "c")
    client.capture_table("orders", long)
    client.capture_table("orders", "cdc")
    db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
    assert len(events(client, long)) == 1 and len(events(client)) == 1
    assert sorted(c.queue_name for c in client.captured_tables()) == ["cdc", long]
    assert client.uncapture_table("orders", long) == 1
    assert [c.queue_name for c in client.captured_tables()] == ["cdc"]


def test_quoted_and_schema_qualified_table_names(client: pglogq.Client, db: psycopg.Connection[Any]) -> None:
    db.execute('CREATE SCHEMA "Sales"')
    db.execute('CREATE TABLE "Sales"."Order Lines" ("Id" int PRIMARY KEY, "Qty" int)')
    client.capture_table('"Sales"."Order Lines"', "cdc")
    db.execute('INSERT INTO "Sales"."Order Lines" VALUES (1, 2)')
    [m] = events(client)
    assert m.payload["table"] == '"Sales"."Order Lines"' and m.payload["key"] == {"Id": 1}
    assert m.headers == {"key": "1", "table": '"Sales"."Order Lines"'}
    assert [c.table_name for c in client.captured_tables()] == ['"Sales"."Order Lines"']


def test_async_client_captures_too(dsn: str, db: psycopg.Connection[Any], client: pglogq.Client) -> None:
    async def go() -> list[pglogq.CaptureInfo]:
        async with pglogq.AsyncClient(dsn) as ac:
            assert await ac.capture_table("orders", "cdc", key_columns=["id"], old_values="none") is True
            infos = await ac.captured_tables("cdc")
            db.execute("INSERT INTO orders VALUES (1, 'new', 1, NULL)")
            assert await ac.uncapture_table("orders", "cdc") == 1
            return infos

    [info] = asyncio.run(go())
    assert (info.table_name, info.old_values, info.key_columns) == ("orders", "none", ["id"])
    assert [m.type for m in events(client)] == ["insert"]
