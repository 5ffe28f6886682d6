"""A call given ``conn=`` runs in the caller's transaction: it neither commits nor rolls back,
and it runs on that connection, never on one of the client's pool.

Every public method of ``Client`` and ``AsyncClient`` (and of the sharded clients) that takes
``conn=`` is found by introspection, so a new one is covered at once: ``CALLS`` says how to call
each, and a method missing from it fails.  Each call is made on a psycopg connection outside
autocommit, as the first statement of the caller's transaction and again after a write of the
caller's own, and once more on a connection in autocommit inside the caller's ``transaction()``
block; then the caller rolls back: the transaction must still be open right after the call,
no other session may have run anything meanwhile, and after the rollback nothing of the call nor
of the caller's write may be seen from another connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pglogq
from pglogq.models import Message
from pglogq.retry import RetryPolicy
from tests.support.cluster import Cluster, make_cluster
from tests.support.db import with_db


@dataclass(frozen=True)
class Prepared:
    """What the prepared database holds, for the calls' arguments."""

    batch_id: int  # consumer "c"'s open batch
    msgs: list[Message]  # its messages; the first started (running), the others not yet
    pending_id: int  # an event of "q" sent and not ticked yet
    dead_id: int  # a dead letter of "q" (consumer "d")
    lease_id: int  # worker "w" of share consumer "sh": its lease of 3 events, none started yet
    lease: list[Message]


Args = tuple[tuple[Any, ...], dict[str, Any]]


def args(*a: Any, **kw: Any) -> Args:
    return a, kw


@dataclass(frozen=True)
class Variant:
    label: str
    make: Callable[[Any], Args]
    writes: bool  # the call changes the database (checked inside the transaction, so that the
    # check after the rollback can see a commit)


def V(label: str, writes: bool, make: Callable[[Any], Args]) -> Variant:
    return Variant(label, make, writes)


POLICY = RetryPolicy.exponential(timedelta(seconds=2), factor=3.0, cap=timedelta(minutes=5), jitter=True)

CALLS: dict[str, list[Variant]] = {
    "install_schema": [V("", False, lambda p: args())],
    "schema_versions": [V("", False, lambda p: args())],
    "create_queue": [
        V("", True, lambda p: args("n1")),
        V("partitions", True, lambda p: args("n2", partitions=4)),
        V("urgent_lane", True, lambda p: args("n3", urgent_lane=True)),
    ],
    "drop_queue": [V("", True, lambda p: args("gone"))],
    "set_queue_config": [V("", True, lambda p: args("q", "max_retries", 7))],
    "set_type_config": [
        V("", True, lambda p: args("q", "t", "max_retries", 2)),
        V("retry_policy", True, lambda p: args("q", "t", "retry_policy", POLICY)),
    ],
    "type_config": [V("", False, lambda p: args("q"))],
    "subscribe": [V("", True, lambda p: args("q", "c9"))],
    "unsubscribe": [V("", True, lambda p: args("q", "c2"))],
    "send": [
        V("", True, lambda p: args("q", {"n": 10})),
        V("options", True, lambda p: args("q", {"n": 11}, type="t", key="k", idempotency_key="i", priority=5)),
    ],
    "send_batch": [V("", True, lambda p: args("q", [{"n": 12}, {"n": 13}]))],
    "cancel": [
        V("", True, lambda p: args("q", p.pending_id)),
        V("running", True, lambda p: args("q", p.msgs[0].msg_id, running=True)),
    ],
    "request_stop": [V("", True, lambda p: args("q", p.msgs[0].msg_id))],
    "lookup": [V("", False, lambda p: args("q", p.msgs[0].msg_id))],
    "jobs": [V("", False, lambda p: args("q"))],
    "schedule_add": [V("", True, lambda p: args("q", "s2", "*/5 * * * *", {"s": 2}))],
    "schedule_remove": [V("", True, lambda p: args("q", "s1"))],
    "schedule_list": [V("", False, lambda p: args())],
    "capture_table": [V("", True, lambda p: args("cap2", "q"))],
    "uncapture_table": [V("", True, lambda p: args("cap1", "q"))],
    "captured_tables": [V("", False, lambda p: args())],
    "tick": [V("", True, lambda p: args("q", force=True))],
    "receive": [V("", True, lambda p: args("q", "c2"))],
    "ack": [V("", True, lambda p: args(p.batch_id, last=p.msgs[-1]))],
    "cede": [
        V("", True, lambda p: args(p.lease_id, keep=p.lease[0])),
        V("all", True, lambda p: args(p.lease_id)),
    ],
    "nack": [
        V("", True, lambda p: args(p.msgs[1], retry_after=timedelta(seconds=30), reason="boom")),
        V("dead", True, lambda p: args(p.msgs[1], dead=True)),
    ],
    "seek_plan": [V("", False, lambda p: args("q", "c2", to="earliest"))],
    "seek": [V("", True, lambda p: args("q", "c2", to="latest", force=True))],
    "dlq_inspect": [V("", False, lambda p: args("q"))],
    "dlq_replay": [V("", True, lambda p: args(p.dead_id))],
    "dlq_replay_all": [V("", True, lambda p: args("q"))],
    "dlq_purge": [V("", True, lambda p: args("q"))],
    "dlq_count": [V("", False, lambda p: args("q"))],
    "dlq_search": [V("", False, lambda p: args("q", search="n"))],
    "dlq_text": [V("", False, lambda p: args(p.dead_id))],
    "queue_info": [V("", False, lambda p: args("q"))],
    "consumer_info": [V("", False, lambda p: args("q"))],
    "in_flight": [V("", False, lambda p: args())],
    "leases": [V("", False, lambda p: args("q", "sh"))],
    "set_share_window": [V("", True, lambda p: args("q", "sh", 100))],
    "stored_events": [V("", False, lambda p: args("q"))],
    "ticker_last_run": [V("", False, lambda p: args())],
    "ticker_holder": [V("", False, lambda p: args())],
    "mark_started": [V("", True, lambda p: args(p.msgs[1]))],
    "stop_requests": [V("", False, lambda p: args(p.batch_id, [m.msg_id for m in p.msgs]))],
    "heartbeat": [V("", True, lambda p: args(p.batch_id))],
    "report_progress": [V("", True, lambda p: args(p.batch_id, p.msgs[0].msg_id, percent=50, stage="half"))],
    # the caller's connection itself: the block must get it, not a pooled one
    "connection": [V("", False, lambda p: args())],
}

MISSING = Variant("MISSING", lambda p: args(), False)


def conn_methods(cls: type) -> list[str]:
    """The public methods of ``cls`` that take ``conn=``."""
    return sorted(
        name for name, fn in inspect.getmembers(cls, callable)
        if not name.startswith("_") and "conn" in inspect.signature(fn).parameters
    )


def _cases() -> list[Any]:
    out = []
    for flavor, cls in (("sync", pglogq.Client), ("async", pglogq.AsyncClient)):
        for name in conn_methods(cls):
            for variant in CALLS.get(name, [MISSING]):
                for position in POSITIONS:
                    label = f"{name}-{variant.label}" if variant.label else name
                    out.append(pytest.param(flavor, name, variant, position, id=f"{flavor}-{label}-{position}"))
    return out


def test_the_table_names_only_methods_that_take_conn() -> None:
    """A method renamed or removed leaves no stale row behind (a missing row fails its case)."""
    assert sorted(CALLS) == conn_methods(pglogq.Client) == conn_methods(pglogq.AsyncClient)


# -- the prepared database -------------------------------------------------------------------


def _prepare(dsn: str) -> Prepared:
    with psycopg.connect(dsn, autocommit=True) as a:
        a.execute("CREATE TABLE public.scratch (n int)")
        a.execute("CREATE TABLE public.cap1 (id int PRIMARY KEY, v text)")
        a.execute("CREATE TABLE public.cap2 (id int PRIMARY KEY, v text)")
    with pglogq.Client(dsn) as c:
        c.create_queue("q")
        c.create_queue("gone")
        for consumer in ("c", "c2", "d"):
            c.subscribe("q", consumer)
        c.subscribe("q", "sh", share=True)
        c.send_batch("q", [{"n": i} for i in range(3)], type="t")
        c.tick("q", force=True)
        dead = c.receive("q", "d")
        assert dead.nack(dead.messages[0], dead=True) == "dead"
        assert dead.ack() is True
        batch = c.receive("q", "c", start_first=1)  # handlers start on the first event only
        lease = c.receive("q", "sh", worker="w", start_first=0)
        assert lease.id is not None and len(lease.messages) == 3
        assert batch.id is not None and len(batch.messages) == 3
        pending = c.send("q", {"n": 9})
        c.schedule_add("q", "s1", "* * * * *", {"s": 1})
        c.capture_table("cap1", "q")
        dead_id = c.dlq_inspect("q")[0].dead_id
        return Prepared(batch.id, list(batch.messages), pending, dead_id, lease.id, list(lease.messages))


@pytest.fixture(scope="module")
def prepared(server_dsn: str, template_db: str) -> Iterator[tuple[str, Prepared]]:
    """A database with a queue, consumers, an open batch, a running event, a dead letter, a
    schedule and a captured table, made once: each case gets a copy."""
    name = f"pglogq_conntx_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        a.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    p = _prepare(with_db(server_dsn, name))
    yield name, p
    with psycopg.connect(server_dsn, autocommit=True) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def copy_dsn(server_dsn: str, prepared: tuple[str, Prepared]) -> Iterator[str]:
    name = f"{prepared[0]}_{os.urandom(4).hex()}"
    with psycopg.connect(server_dsn, autocommit=True) as a:
        a.execute(f'CREATE DATABASE "{name}" TEMPLATE "{prepared[0]}"')
    yield with_db(server_dsn, name)
    with psycopg.connect(server_dsn, autocommit=True) as a:
        a.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- what is seen ----------------------------------------------------------------------------


# the tables of pglogq's schema and of public; then one statement reading all their rows, the
# relations of both schemas (a table made or dropped by the call) and the triggers (change
# capture).  Sequences are left out: nextval is not transactional.
TABLES = """
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN ('pglogq', 'public') AND c.relkind IN ('r', 'p') ORDER BY 1
"""


def snapshot(tables: list[tuple[Any, ...]]) -> bytes:
    parts = [
        "SELECT 'relation' AS t, format('%I.%I:%s', relnamespace::regnamespace, relname, relkind) AS r"
        " FROM pg_class WHERE relnamespace IN ('pglogq'::regnamespace, 'public'::regnamespace)",
        "SELECT 'trigger', format('%s.%I', tgrelid::regclass, tgname) FROM pg_trigger WHERE NOT tgisinternal",
    ]
    parts += [f"SELECT '{t.replace(chr(39), chr(39) * 2)}', x::text FROM {t} x" for (t,) in tables]
    return (" UNION ALL ".join(parts) + " ORDER BY 1, 2").encode()


def _grouped(rows: list[tuple[Any, ...]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t, r in rows:
        out.setdefault(t, []).append(r)
    return out


def seen(dsn: str) -> dict[str, list[str]]:
    with psycopg.connect(dsn, autocommit=True) as a:
        return _grouped(a.execute(snapshot(a.execute(TABLES).fetchall())).fetchall())


@contextlib.contextmanager
def watching(dsns: list[str]) -> Iterator[Callable[[set[int]], set[tuple[Any, ...]]]]:
    """``sessions(caller_pids)``: every other client session on these databases, with when it
    began and when it started its last statement.  A pool's connection that ran anything
    meanwhile, or a new one, is not among those seen before the call (a session that ended
    meanwhile, such as an earlier reader's, may be)."""
    with contextlib.ExitStack() as stack:
        conns = [stack.enter_context(psycopg.connect(d, autocommit=True)) for d in dsns]

        def sessions(caller_pids: set[int]) -> set[tuple[Any, ...]]:
            out: set[tuple[Any, ...]] = set()
            for c in conns:
                out |= {tuple(r) for r in c.execute(
                    "SELECT datname, pid, backend_start, query_start FROM pg_stat_activity"
                    " WHERE datname = current_database() AND backend_type = 'client backend'"
                    " AND pid <> pg_backend_pid() AND NOT pid = ANY(%s)",
                    (list(caller_pids),),
                ).fetchall()}
            return out

        yield sessions


def without_scratch(s: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: v for k, v in s.items() if k != "public.scratch"}


# -- the cases -------------------------------------------------------------------------------


@dataclass
class Observed:
    status: TransactionStatus  # the caller's, right after the call
    inside: dict[str, list[str]]  # what the caller's transaction saw right after the call
    sessions_before: set[tuple[Any, ...]]
    sessions_after: set[tuple[Any, ...]]


# where the call is made: the first statement of the caller's transaction (outside autocommit),
# after a write of the caller's in it, or on a connection in autocommit inside the caller's
# ``transaction()`` block (after a write), which the caller rolls back
POSITIONS = ("first", "after_write", "autocommit_block")


def in_transaction(
    dsn: str, watch: list[str], position: str, call: Callable[[psycopg.Connection[Any]], None]
) -> Observed:
    """``call(conn)`` in the caller's transaction (see POSITIONS); then another write of the
    caller's, and a rollback."""
    in_block = position == "autocommit_block"
    with watching(watch) as sessions, psycopg.connect(dsn, autocommit=in_block) as conn:
        pids = {conn.info.backend_pid}
        before = sessions(pids)
        with conn.transaction(force_rollback=True) if in_block else contextlib.nullcontext():
            if position != "first":
                conn.execute("INSERT INTO public.scratch VALUES (1)")
            call(conn)
            status = conn.info.transaction_status
            after = sessions(pids)
            inside = _grouped(conn.execute(snapshot(conn.execute(TABLES).fetchall())).fetchall())
            conn.execute("INSERT INTO public.scratch VALUES (2)")
        if not in_block:
            conn.rollback()
    return Observed(status, inside, before, after)


async def in_transaction_async(
    dsn: str, watch: list[str], position: str, call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]
) -> Observed:
    """:func:`in_transaction` on a psycopg AsyncConnection."""
    in_block = position == "autocommit_block"
    with watching(watch) as sessions:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=in_block) as conn:
            pids = {conn.info.backend_pid}
            before = sessions(pids)
            async with conn.transaction(force_rollback=True) if in_block else contextlib.nullcontext():
                if position != "first":
                    await conn.execute("INSERT INTO public.scratch VALUES (1)")
                await call(conn)
                status = conn.info.transaction_status
                after = sessions(pids)
                tables = await (await conn.execute(TABLES)).fetchall()
                inside = _grouped(await (await conn.execute(snapshot(tables))).fetchall())
                await conn.execute("INSERT INTO public.scratch VALUES (2)")
            if not in_block:
                await conn.rollback()
    return Observed(status, inside, before, after)


def check(name: str, writes: bool, got: Observed, before: dict[str, list[str]], after: dict[str, list[str]]) -> None:
    assert got.status == TransactionStatus.INTRANS, (
        f"{name}: the caller's transaction is {got.status.name} right after the call (it committed or rolled back)"
    )
    assert got.sessions_after <= got.sessions_before, f"{name} ran on another connection than the caller's"
    if writes:
        assert without_scratch(got.inside) != without_scratch(before), (
            f"{name}: the call changed nothing (its arguments do not test a commit)"
        )
    assert after == before, f"{name}: something committed despite the caller's rollback"


def _call_sync(client: Any, name: str, a: Args, conn: psycopg.Connection[Any]) -> None:
    result = getattr(client, name)(*a[0], conn=conn, **a[1])
    if isinstance(result, contextlib.AbstractContextManager):
        with result as c:
            assert c is conn, f"{name} gave another connection than the caller's"
            c.execute("SELECT 1")


async def _call_async(client: Any, name: str, a: Args, conn: psycopg.AsyncConnection[Any]) -> None:
    result = getattr(client, name)(*a[0], conn=conn, **a[1])
    if isinstance(result, contextlib.AbstractAsyncContextManager):
        async with result as c:
            assert c is conn, f"{name} gave another connection than the caller's"
            await c.execute("SELECT 1")
    else:
        await result


@pytest.mark.parametrize(("flavor", "name", "variant", "position"), _cases())
def test_a_call_with_conn_joins_the_callers_transaction(
    copy_dsn: str, prepared: tuple[str, Prepared], flavor: str, name: str, variant: Variant, position: str
) -> None:
    if variant is MISSING:
        pytest.fail(f"{name} takes conn= but CALLS does not say how to call it: add a row")
    a = variant.make(prepared[1])
    before = seen(copy_dsn)
    if flavor == "sync":
        with pglogq.Client(copy_dsn) as client:
            got = in_transaction(copy_dsn, [copy_dsn], position, lambda conn: _call_sync(client, name, a, conn))
    else:
        async def main() -> Observed:
            async with pglogq.AsyncClient(copy_dsn) as client:
                return await in_transaction_async(
                    copy_dsn, [copy_dsn], position, lambda conn: _call_async(client, name, a, conn)
                )

        got = asyncio.run(main())
    check(f"{name} {variant.label}".strip(), variant.writes, got, before, seen(copy_dsn))


# -- the sharded clients ---------------------------------------------------------------------

SHARDED_CALLS: dict[str, list[Variant]] = {
    # ``p`` here: (the key of shard s0, the batch received from s0)
    "send": [V("", True, lambda p: args("q", {"n": 1}, key=p[0]))],
    "send_batch": [V("", True, lambda p: args("q", [{"n": 2}, {"n": 3}], keys=[p[0], p[0]]))],
    "ack": [V("", True, lambda p: args(p[1]))],
    "nack": [V("", True, lambda p: args(p[1], p[1].messages[0], retry_after=timedelta(seconds=30)))],
}


def _sharded_cases() -> list[Any]:
    out = []
    for flavor, cls in (("sync", pglogq.ShardedClient), ("async", pglogq.AsyncShardedClient)):
        for name in conn_methods(cls):
            for variant in SHARDED_CALLS.get(name, [MISSING]):
                for position in POSITIONS:
                    out.append(pytest.param(flavor, name, variant, position, id=f"{flavor}-{name}-{position}"))
    return out


def test_the_sharded_table_names_only_methods_that_take_conn() -> None:
    assert sorted(SHARDED_CALLS) == conn_methods(pglogq.ShardedClient) == conn_methods(pglogq.AsyncShardedClient)


@pytest.fixture
def cluster(new_db: Callable[[], str], server_dsn: str) -> Cluster:
    c = make_cluster(new_db, server_dsn, 3)
    for dsn in c.seeds:
        with psycopg.connect(dsn, autocommit=True) as a:
            a.execute("CREATE TABLE public.scratch (n int)")
    return c


@pytest.mark.parametrize(("flavor", "name", "variant", "position"), _sharded_cases())
def test_a_sharded_call_with_conn_joins_the_callers_transaction(
    cluster: Cluster, flavor: str, name: str, variant: Variant, position: str
) -> None:
    if variant is MISSING:
        pytest.fail(f"{name} takes conn= but SHARDED_CALLS does not say how to call it: add a row")
    key = cluster.keys_of("s0", 1)[0]
    shard = cluster.dsns["s0"]

    def state() -> list[dict[str, list[str]]]:
        return [seen(d) for d in cluster.seeds]

    if flavor == "sync":
        with pglogq.ShardedClient(cluster.seeds[:1]) as client:
            client.create_queue("q")
            client.subscribe("q", "c")
            client.send("q", {"n": 0}, key=key)
            client.tick("q", force=True)
            batch = client.receive("q", "c")  # the only shard with an event
            assert batch.shard == "s0" and len(batch.messages) == 1
            a = variant.make((key, batch))
            before = state()
            got = in_transaction(shard, cluster.seeds, position, lambda conn: _call_sync(client, name, a, conn))
    else:
        async def main() -> tuple[list[dict[str, list[str]]], Observed]:
            async with pglogq.AsyncShardedClient(cluster.seeds[:1]) as client:
                await client.create_queue("q")
                await client.subscribe("q", "c")
                await client.send("q", {"n": 0}, key=key)
                await client.tick("q", force=True)
                batch = await client.receive("q", "c")
                assert batch.shard == "s0" and len(batch.messages) == 1
                a = variant.make((key, batch))
                before = state()
                return before, await in_transaction_async(
                    shard, cluster.seeds, position, lambda conn: _call_async(client, name, a, conn)
                )

        before, got = asyncio.run(main())
    check(name, variant.writes, got, before[0], state()[0])
    assert state()[1:] == before[1:], f"{name} changed another shard"


# -- a call that fails -----------------------------------------------------------------------


def test_a_call_of_several_statements_that_fails_leaves_the_callers_transaction_failed(dsn: str) -> None:
    """Like one statement of the caller's: the server's error fails the caller's transaction
    (nothing of it can commit), whatever the number of statements the call makes."""
    with psycopg.connect(dsn, autocommit=True) as a:
        a.execute("CREATE TABLE public.scratch (n int)")
    with pglogq.Client(dsn) as client, psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO public.scratch VALUES (1)")
        with pytest.raises(pglogq.errors.UnknownQueue):
            client.set_type_config("nope", "t", "retry_policy", POLICY, conn=conn)
        assert conn.info.transaction_status == TransactionStatus.INERROR
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM public.scratch").fetchone() == (0,)


def test_an_async_call_of_several_statements_that_fails_leaves_the_callers_transaction_failed(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as a:
        a.execute("CREATE TABLE public.scratch (n int)")

    async def main() -> None:
        async with pglogq.AsyncClient(dsn) as client, await psycopg.AsyncConnection.connect(dsn) as conn:
            await conn.execute("INSERT INTO public.scratch VALUES (1)")
            with pytest.raises(pglogq.errors.InvalidName):  # refused by the server
                await client.create_queue("", partitions=4, conn=conn)
            assert conn.info.transaction_status == TransactionStatus.INERROR
            await conn.rollback()
            assert await (await conn.execute("SELECT count(*) FROM public.scratch")).fetchone() == (0,)

    asyncio.run(main())
