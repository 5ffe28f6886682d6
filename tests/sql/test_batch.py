"""Batches: their ids, who closes them, empty batches, and which page an ack acknowledges.

Regressions of defects found by outside reviews (batch ids collided past 2^20 subscriptions, a
cancelled tail left a batch open, receive returned nothing while a ticked event waited, a stale
ack of a twin process was accepted), plus the contract attacks recorded in
docs/reliability/attacks-batch.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.concurrent import Call, wait_blocked
from tests.support.paths import REPO, UPGRADE_DATA

MAX_BIGINT = 2**63 - 1


@pytest.fixture
def sql(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


def one(conn: psycopg.Connection[Any], stmt: str, args: Any = None) -> Any:
    row = conn.execute(stmt.encode(), args).fetchone()
    assert row is not None
    return row[0]


def sub_id(conn: psycopg.Connection[Any], consumer: str) -> int:
    return int(one(conn, "SELECT sub_id FROM pglogq.subscription WHERE consumer_name = %s AND parent_id IS NULL",
                   (consumer,)))


def open_batches(conn: psycopg.Connection[Any], consumer: str) -> int:
    return int(one(conn, "SELECT open_batches FROM pglogq.consumer_info('q', %s)", (consumer,)))


# -- batch ids are plain ids, no ceiling, no decoding -----------------------------


@pytest.mark.parametrize("sub_jump", [2**20, 2**31 - 8], ids=["sub-past-2^20", "sub-near-2^31"])
def test_batch_ids_of_two_consumers_never_collide_whatever_their_sub_ids(
    client: pglogq.Client, sql: psycopg.Connection[Any], sub_jump: int
) -> None:
    """Regression (data loss): with sub ids 2^20 apart, x and y got the same batch id and
    ack of x's batch acknowledged y's page (y silently skipped two events)."""
    client.create_queue("q")
    client.subscribe("q", "y")
    y_sub = sub_id(sql, "y")
    # stands for history: as many subscriptions as it takes to be 2^20 (or near 2^31) further
    target = y_sub + 2**20 if sub_jump == 2**20 else sub_jump
    sql.execute(f"ALTER SEQUENCE pglogq.subscription_sub_id_seq RESTART WITH {target}".encode())
    client.subscribe("q", "x")
    assert sub_id(sql, "x") == target
    ids = client.send_batch("q", [{"n": i} for i in range(4)])
    client.tick("q", force=True)
    bx = client.receive("q", "x", max_messages=100)
    by = client.receive("q", "y", max_messages=2)
    assert [m.msg_id for m in bx] == ids and [m.msg_id for m in by] == ids[:2]
    assert bx.id != by.id
    assert bx.ack() is True
    # y's page is untouched by x's ack: it is returned again, then the rest of the batch
    again = client.receive("q", "y", max_messages=2)
    assert (again.id, [m.msg_id for m in again]) == (by.id, ids[:2])
    assert again.ack() is True
    rest = client.receive("q", "y", max_messages=100)
    assert [m.msg_id for m in rest] == ids[2:]
    assert rest.ack() is True
    assert client.heartbeat(rest.id) is False  # acknowledged: nobody's batch any more


@pytest.mark.parametrize("start", [2**31 + 5, 2**43 + 1, MAX_BIGINT - 3],
                         ids=["batch-past-2^31", "batch-past-2^43", "batch-near-2^63"])
def test_a_consumer_alone_acks_and_heartbeats_batches_with_large_ids(
    client: pglogq.Client, sql: psycopg.Connection[Any], start: int
) -> None:
    """Regression: a consumer alone past the old ceiling got UnknownBatch on every ack and the
    same page forever; the old encoding overflowed bigint once the sequence passed 2^43."""
    client.create_queue("q")
    client.subscribe("q", "c")
    sql.execute(f"ALTER SEQUENCE pglogq.batch_seq RESTART WITH {start}".encode())
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    got: list[int] = []
    seen_ids: set[int] = set()
    for _ in range(3):
        page = client.receive("q", "c", max_messages=1)
        assert page.id is not None and page.id >= start
        seen_ids.add(page.id)
        assert client.heartbeat(page.id) is True
        assert client.report_progress(page.id, page.messages[0].msg_id, percent=50) is True
        got += [m.msg_id for m in page]
        assert page.ack() is True
    assert got == ids and len(seen_ids) == 1
    assert len(client.receive("q", "c")) == 0
    assert open_batches(sql, "c") == 0


def test_batch_ids_are_unique_in_the_table(sql: psycopg.Connection[Any]) -> None:
    """Regression: one id, one holder (a unique index finds the holder of a batch; the holder
    state lives in the two partitions of pglogq.sub_state, each row in one of them)."""
    for part in (0, 1):
        idx = one(sql, "SELECT indexdef FROM pg_indexes WHERE schemaname = 'pglogq'"
                       f" AND indexname = 'sub_state_{part}_batch_uq'")
        assert "UNIQUE" in idx and "(batch_id)" in idx


def test_no_batch_id_decoding_is_left() -> None:
    """Regression: nothing takes a batch id apart any more."""

    root = REPO
    for folder in ("sql/functions", "pglogq"):
        for f in (root / folder).rglob("*.*"):
            if f.suffix in (".sql", ".py"):
                text = f.read_text(encoding="utf-8")
                assert "1048576" not in text and "2**20" not in text, f


# -- one owner closes a batch; a cancelled tail closes it ----------------------------


def test_a_cancelled_tail_closes_the_batch_and_seek_latest_works(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """Regression: batch of 2, receive 1, ack, cancel the second (true): the next receive found
    nothing but left the batch open (open_batches = 1) and seek to 'latest' was refused."""
    client.create_queue("q")
    client.subscribe("q", "c")
    first, second = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=1)
    assert [m.msg_id for m in page] == [first]
    assert page.ack() is True
    assert client.cancel("q", second) is True
    assert len(client.receive("q", "c")) == 0
    assert open_batches(sql, "c") == 0
    plan = client.seek("q", "c", to="latest")
    assert plan.open_batches == 0
    assert len(client.receive("q", "c")) == 0


def test_a_cancelled_tail_of_a_worker_closes_its_batch_and_its_progress(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """Regression: the same for a cooperating worker, whose progress rows go with the batch."""
    client.create_queue("q")
    client.subscribe("q", "c")
    first, second = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=1, worker="w1")
    assert client.report_progress(page.id, first, percent=10) is True  # type: ignore[arg-type]
    assert page.ack() is True
    assert client.cancel("q", second) is True
    assert len(client.receive("q", "c", worker="w1")) == 0
    assert open_batches(sql, "c") == 0
    assert one(sql, "SELECT count(*) FROM pglogq.progress") == 0
    client.seek("q", "c", to="latest")


def test_close_batch_is_the_one_owner(sql: psycopg.Connection[Any]) -> None:
    """Regression: the UPDATE that clears a batch is written once, in _close_batch."""

    root = REPO / "sql" / "functions"
    mine = ("ack.sql", "receive.sql", "_take_batch.sql", "_holder.sql", "heartbeat.sql", "report_progress.sql",
            "nack.sql")
    for name in mine:
        text = (root / name).read_text(encoding="utf-8")
        assert "batch_id = NULL" not in text, name
    assert "batch_id = NULL" in (root / "_close_batch.sql").read_text(encoding="utf-8")


# -- receive returns the next event or truly nothing ------------------------------


def test_receive_passes_any_number_of_empty_batches_to_the_waiting_event(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """Regression: batch_max_events = 1, 120 x (send, cancel, tick), then a real event and a
    tick: the first receive returned 0 rows and left a batch open (it gave up after 100)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", 1)
    for i in range(120):
        msg = client.send("q", {"cancelled": i})
        assert client.cancel("q", msg) is True
        client.tick("q", force=True)
    real = client.send("q", {"real": 1})
    client.tick("q", force=True)
    page = client.receive("q", "c")
    assert [m.msg_id for m in page] == [real]
    assert page.ack() is True
    assert open_batches(sql, "c") == 0
    assert len(client.receive("q", "c")) == 0


def test_receive_over_only_empty_batches_returns_nothing_and_leaves_no_batch_open(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """Regression: when nothing waits, receive is empty, holds no batch and the cursor is at
    the last tick (the empty batches are passed once, not again on every call)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", 1)
    for i in range(110):
        assert client.cancel("q", client.send("q", {"cancelled": i})) is True
        client.tick("q", force=True)
    assert len(client.receive("q", "c", worker="w")) == 0
    assert open_batches(sql, "c") == 0
    last = one(sql, "SELECT max(tick_id) FROM pglogq.tick")
    assert one(sql, "SELECT last_tick FROM pglogq.subscription WHERE consumer_name = 'c' AND parent_id IS NULL") == last


def test_consumer_run_until_idle_handles_the_event_behind_empty_batches(dsn: str, client: pglogq.Client) -> None:
    """Regression: Consumer.run(stop_when_idle=True) exited with handled = 0."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "batch_max_events", 1)
    for i in range(105):
        assert client.cancel("q", client.send("q", {"cancelled": i})) is True
        client.tick("q", force=True)
    client.send("q", {"real": 1})
    client.tick("q", force=True)
    handled: list[Any] = []
    consumer = pglogq.Consumer(dsn, "q", "c")
    consumer.handler()(lambda msg: handled.append(msg.payload))
    stats = consumer.run(stop_when_idle=True)
    assert handled == [{"real": 1}] and stats.handled == 1


# -- an ack names the page it acknowledges; a twin's stale ack is refused ----------


def twin_pages(api: Any, sizes: tuple[int, int], total: int = 7) -> tuple[Any, Any, list[int]]:
    api.create_queue("q")
    api.subscribe("q", "c")
    ids = api.send_batch("q", [{"n": i} for i in range(total)])
    api.tick("q", force=True)
    a = api.receive("q", "c", max_messages=sizes[0])
    b = api.receive("q", "c", max_messages=sizes[1])
    # the same page again keeps its id; one that ends elsewhere gets a new one
    assert (a.id == b.id) is (sizes[0] == sizes[1])
    return a, b, ids


def test_stale_ack_of_a_twin_with_a_longer_page_is_refused(api: Any) -> None:
    """Regression: pages of 5 and 2 of one batch; the 2-page is acked, then the stale 5-page
    ack was accepted silently (and events 2, 3, 4 came again)."""
    a, b, ids = twin_pages(api, (5, 2))
    assert b.ack() is True
    with pytest.raises(pglogq.StaleBatch):
        a.ack()
    # the refused ack changed nothing: the rest of the batch follows b's page
    rest = api.receive("q", "c", max_messages=100)
    assert [m.msg_id for m in rest] == ids[2:]
    assert rest.ack() is True


def test_ack_of_a_page_no_longer_current_is_refused_first_or_second(api: Any) -> None:
    """Regression: the 5-page acked after the 2-page was received (it is no longer the page
    receive returned last) is refused, and the 2-page's ack then goes through."""
    a, b, ids = twin_pages(api, (5, 2))
    with pytest.raises(pglogq.StaleBatch):
        a.ack()
    assert b.ack() is True
    rest = api.receive("q", "c", max_messages=100)
    assert [m.msg_id for m in rest] == ids[2:]


@pytest.mark.parametrize("total", [7, 5], ids=["batch-goes-on", "last-page"])
def test_second_ack_of_equal_pages_is_refused(api: Any, total: int) -> None:
    """Regression: two processes got the same page; the first ack wins, the second is
    refused (StaleBatch) instead of being accepted."""
    a, b, ids = twin_pages(api, (5, 5), total)
    assert [m.msg_id for m in a] == [m.msg_id for m in b] == ids[:5]
    assert a.ack() is True
    with pytest.raises(pglogq.StaleBatch):
        b.ack()
    rest = api.receive("q", "c", max_messages=100)
    assert [m.msg_id for m in rest] == ids[5:]


@pytest.mark.parametrize("share", [False, True], ids=["worker", "share-worker"])
def test_an_earlier_hand_out_ending_where_a_later_page_ends_cannot_ack_it(
    client: pglogq.Client, share: bool
) -> None:
    """Regression (effects applied twice, the share chaos run): three processes under one
    worker name.  A got page [1], B the same page again as [1..3], C as [1]; C acked [1] and
    A then got the next page, [2..3].  B's ack named batch and last event of the page out,
    and was accepted: B's handler had done event 1 too, so its effects were committed twice.
    B's hand-out ended elsewhere than the page it replaced: it has its own batch id now,
    refused once the page changed."""
    client.create_queue("q")
    client.subscribe("q", "c", share=share)
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    if share:
        # the worker's lease holds the three events: every page below is cut from it
        lease = client.receive("q", "c", max_messages=3, worker="w")
        assert [m.msg_id for m in lease] == ids
    a = client.receive("q", "c", max_messages=1, worker="w")
    b = client.receive("q", "c", max_messages=3, worker="w")
    c = client.receive("q", "c", max_messages=1, worker="w")
    assert [m.msg_id for m in b] == ids and [m.msg_id for m in a] == [m.msg_id for m in c] == ids[:1]
    assert len({a.id, b.id, c.id}) == 3  # each hand-out that ends elsewhere than the last
    with pytest.raises(pglogq.StaleBatch):
        a.ack()  # [1] again, but replaced twice since: not the page out
    assert c.ack() is True
    rest = client.receive("q", "c", max_messages=3, worker="w")
    assert [m.msg_id for m in rest] == ids[1:]
    assert rest.messages[-1].msg_id == b.messages[-1].msg_id  # the same last event as B's page
    with pytest.raises(pglogq.StaleBatch):
        b.ack()
    assert rest.ack() is True
    assert not client.receive("q", "c", max_messages=3, worker="w")


def test_ack_without_the_page_keeps_its_old_meaning(sql: psycopg.Connection[Any], client: pglogq.Client) -> None:
    """ack(batch_id) alone (psql): true for the current page, false when nothing is to ack."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=2)
    assert one(sql, "SELECT pglogq.ack(%s)", (page.id,)) is True
    assert one(sql, "SELECT pglogq.ack(%s)", (page.id,)) is False


# -- attacks (docs/reliability/attacks-batch.md) -------------------------------------------------


@pytest.mark.parametrize("bad", [None, 0, -1, 2**31, MAX_BIGINT], ids=["null", "0", "-1", "2^31", "2^63-1"])
@pytest.mark.parametrize("call", [
    "SELECT pglogq.ack(%s)",
    "SELECT pglogq.heartbeat(%s)",
    "SELECT pglogq.nack(%s, 1)",
    "SELECT pglogq.report_progress(%s, 1, 5)",
], ids=["ack", "heartbeat", "nack", "report_progress"])
def test_never_issued_batch_ids_are_unknown(
    client: pglogq.Client, sql: psycopg.Connection[Any], call: str, bad: int | None
) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    page = client.receive("q", "c")
    before = sql.execute("SELECT * FROM pglogq.subscription ORDER BY sub_id").fetchall()
    with pytest.raises(psycopg.Error) as err:
        sql.execute(call.encode(), (bad,))
    assert err.value.sqlstate == "PQ008"
    assert sql.execute("SELECT * FROM pglogq.subscription ORDER BY sub_id").fetchall() == before
    assert page.ack() is True


def test_ack_of_an_old_batch_after_takeover_is_stale(client: pglogq.Client, sql: psycopg.Connection[Any]) -> None:
    """A silent worker's batch taken over by another: the old id is refused everywhere, the
    new holder's id works, and the takeover drops the silent worker's progress rows."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "dead_interval", "1 millisecond")
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    old = client.receive("q", "c", worker="a")
    assert client.report_progress(old.id, ids[0], percent=1) is True  # type: ignore[arg-type]
    sql.execute("SELECT pg_sleep(0.01)")
    new = client.receive("q", "c", worker="b")
    assert new.id != old.id and [m.msg_id for m in new] == ids
    assert one(sql, "SELECT count(*) FROM pglogq.progress") == 0
    with pytest.raises(pglogq.StaleBatch):
        old.ack()
    with pytest.raises(pglogq.StaleBatch):
        old.nack(old.messages[0])
    assert client.heartbeat(old.id) is False  # type: ignore[arg-type]
    assert client.report_progress(old.id, ids[0], percent=2) is False  # type: ignore[arg-type]
    assert new.ack() is True
    assert open_batches(sql, "c") == 0


def test_a_batch_id_of_another_queue_acks_only_its_own_holder(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """A batch id is a capability of its holder: acking q2's batch leaves q's page alone."""
    for qn in ("q", "q2"):
        client.create_queue(qn)
        client.subscribe(qn, "c")
        client.send(qn, {"q": qn})
        client.tick(qn, force=True)
    p1 = client.receive("q", "c")
    p2 = client.receive("q2", "c")
    assert p1.id != p2.id
    assert client.ack(p2.id) is True  # type: ignore[arg-type]
    again = client.receive("q", "c")
    assert (again.id, [m.msg_id for m in again]) == (p1.id, [m.msg_id for m in p1])
    with pytest.raises(pglogq.MessageNotInBatch):
        client.nack(pglogq.Message(p1.id, p2.messages[0].msg_id, None, {}, None, 0,  # type: ignore[arg-type]
                                   p2.messages[0].created_at, 100, p2.messages[0].txid))


def test_reinstall_between_receive_and_ack_keeps_the_page(client: pglogq.Client) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=2)
    assert client.install_schema() == []
    assert client.heartbeat(page.id) is True  # type: ignore[arg-type]
    assert page.ack() is True
    rest = client.receive("q", "c")
    assert rest.id == page.id and [m.msg_id for m in rest] == ids[2:]
    assert rest.ack() is True


def test_twins_racing_receive_and_ack_lose_nothing_and_never_deadlock(
    client: pglogq.Client, dsn: str
) -> None:
    """Two processes under one consumer name receive (different page sizes) and ack as fast as
    they can: acks interleave with receives in every order.  Only StaleBatch is ever refused,
    and every event is inside some page whose ack was accepted (nothing skipped)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids: list[int] = []
    for _ in range(6):
        ids += client.send_batch("q", [{"n": i} for i in range(25)])
        client.tick("q", force=True)
    accepted: list[int] = []
    errors: list[BaseException] = []
    stale = [0]
    lock = threading.Lock()

    def twin(size: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                empty = 0
                while empty < 3:
                    rows = conn.execute("SELECT batch_id, msg_id, txid FROM pglogq.receive('q', 'c', %s)",
                                        (size,)).fetchall()
                    if not rows:
                        empty += 1
                        continue
                    try:
                        conn.execute("SELECT pglogq.ack(%s, %s, %s)", (rows[0][0], rows[-1][1], rows[-1][2]))
                    except psycopg.Error as exc:
                        if exc.sqlstate != "PQ009":
                            raise
                        with lock:
                            stale[0] += 1
                        continue
                    with lock:
                        accepted.extend(r[1] for r in rows)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=twin, args=(n,)) for n in (7, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert set(accepted) == set(ids)
    assert len(client.receive("q", "c")) == 0


def test_upgrade_keeps_open_batches_and_renumbers_collided_ones(server_dsn: str) -> None:
    """Batch ids collided past 2^20 subscriptions, across the upgrade (migration 0010): an open
    batch of the first schema keeps its id and is acked as before; two open batches that shared an
    id (sub ids 2^20 apart) get new ids, so an ack naming the ambiguous id is refused and never acks
    the other's page."""
    from psycopg.conninfo import make_conninfo

    release = sorted(UPGRADE_DATA.glob("v1-*.sql"))[0]
    name = f"pglogq_batch_up_{threading.get_ident() % 100000}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        admin.execute(f'CREATE DATABASE "{name}"'.encode())
    dsn = make_conninfo(server_dsn, dbname=name)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(release.read_text().encode())
            conn.execute("SELECT pglogq.create_queue('q')")
            for c in ("y", "z"):
                conn.execute("SELECT pglogq.subscribe('q', %s)", (c,))
            y_sub = sub_id(conn, "y")
            conn.execute(f"ALTER SEQUENCE pglogq.subscription_sub_id_seq RESTART WITH {y_sub + 2**20}".encode())
            conn.execute("SELECT pglogq.subscribe('q', 'x')")
            conn.execute("SELECT pglogq.send_batch('q', ARRAY['{}','{}','{}','{}']::jsonb[])")
            conn.execute("SELECT pglogq.force_tick('q')")
            x_old = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'x', 100)").fetchall()
            y_old = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'y', 2)").fetchall()
            z_old = conn.execute("SELECT batch_id, msg_id FROM pglogq.receive('q', 'z', 3)").fetchall()
            assert x_old[0][0] == y_old[0][0]  # the first schema's collision
            collided, z_id = x_old[0][0], z_old[0][0]
        with pglogq.Client(dsn) as client:
            assert any("0010" in a for a in client.install_schema())
            with psycopg.connect(dsn, autocommit=True) as conn:
                with pytest.raises(psycopg.Error) as err:
                    conn.execute("SELECT pglogq.ack(%s)", (collided,))
                assert err.value.sqlstate == "PQ009"
                # z's open batch kept its id: acked as before
                assert one(conn, "SELECT pglogq.ack(%s, %s)", (z_id, z_old[-1][1])) is True
            x = client.receive("q", "x", max_messages=100)
            y = client.receive("q", "y", max_messages=2)
            assert [m.msg_id for m in x] == [r[1] for r in x_old]
            assert [m.msg_id for m in y] == [r[1] for r in y_old]
            assert len({x.id, y.id, collided, z_id}) == 4
            assert min(x.id, y.id) > max(collided, z_id)  # type: ignore[type-var]
            assert x.ack() is True and y.ack() is True
            rest = client.receive("q", "y", max_messages=100)
            assert [m.msg_id for m in rest] == [r[1] for r in x_old][2:]
            z = client.receive("q", "z", max_messages=100)
            assert [m.msg_id for m in z] == [r[1] for r in x_old][3:]
            assert z.id == z_id
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.mark.parametrize("worker", [None, "w1", "new-worker"])
@pytest.mark.parametrize("remove", ["SELECT pglogq.unsubscribe('q', 'c')", "SELECT pglogq.drop_queue('q', true)"],
                         ids=["unsubscribe", "drop_queue"])
def test_receive_racing_a_removal_says_the_consumer_is_gone(
    client: pglogq.Client, dsn: str, worker: str | None, remove: str
) -> None:
    """Regression (receive's part of calls racing a removal): receive waiting behind an uncommitted unsubscribe (or
    drop_queue force) failed with PQ017 "tick <NULL> of consumer <NULL>" (or 23503 as a new
    worker) once it committed; it is PQ002, the consumer is gone."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    if worker == "w1":
        assert len(client.receive("q", "c", worker="w1")) == 1
    with psycopg.connect(dsn) as first:
        first.execute(remove.encode())
        second = Call(dsn, lambda c: c.execute("SELECT * FROM pglogq.receive('q', 'c', 10, %s)", (worker,)).fetchall())
        second.start()
        wait_blocked(dsn, second.pid)
        first.commit()
    with pytest.raises(psycopg.Error) as err:
        second.outcome()
    assert err.value.sqlstate in ("PQ002", "PQ001"), err.value


@pytest.mark.parametrize("call", ["ack", "heartbeat", "report_progress", "nack"])
def test_batch_calls_racing_unsubscribe_are_refused_cleanly(client: pglogq.Client, dsn: str, call: str) -> None:
    """ack / heartbeat / report_progress / nack waiting behind an uncommitted unsubscribe: the
    batch is nobody's after the commit (PQ009 for ack and nack, false for heartbeat and
    report_progress), never an internal error."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"n": 1})
    client.tick("q", force=True)
    page = client.receive("q", "c")
    m = page.messages[0]
    stmt = {
        "ack": ("SELECT pglogq.ack(%s, %s, %s)", (page.id, m.msg_id, m.txid)),
        "heartbeat": ("SELECT pglogq.heartbeat(%s)", (page.id,)),
        "report_progress": ("SELECT pglogq.report_progress(%s, %s, 5)", (page.id, m.msg_id)),
        "nack": ("SELECT pglogq.nack(%s, %s)", (page.id, m.msg_id)),
    }[call]
    with psycopg.connect(dsn) as first:
        first.execute("SELECT pglogq.unsubscribe('q', 'c')")
        second = Call(dsn, lambda c: c.execute(stmt[0].encode(), stmt[1]).fetchone())
        second.start()
        wait_blocked(dsn, second.pid)
        first.commit()
    if call in ("ack", "nack"):
        with pytest.raises(psycopg.Error) as err:
            second.outcome()
        assert err.value.sqlstate == "PQ009"
    else:
        assert second.outcome() == (False,)


def test_ack_naming_the_wrong_message_or_txid_changes_nothing(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """The page is named by its last message: a wrong msg_id, a wrong txid (right msg_id) or
    the first message instead of the last is refused with PQ009 and the page stays current."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=2)
    first, last = page.messages[0], page.messages[-1]
    before = sql.execute("SELECT * FROM pglogq.subscription").fetchall()
    for args in ((page.id, first.msg_id, first.txid), (page.id, last.msg_id, "1"), (page.id, ids[2], None),
                 (page.id, None, "1")):
        with pytest.raises(psycopg.Error) as err:
            sql.execute("SELECT pglogq.ack(%s, %s, %s::xid8)", args)
        assert err.value.sqlstate == "PQ009"
    assert sql.execute("SELECT * FROM pglogq.subscription").fetchall() == before
    assert one(sql, "SELECT pglogq.ack(%s, %s)", (page.id, last.msg_id)) is True
    assert [m.msg_id for m in client.receive("q", "c")] == ids[2:]


def test_ack_rolled_back_leaves_the_page_current(client: pglogq.Client, dsn: str) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=3)
    with psycopg.connect(dsn) as conn:
        assert page.ack(conn=conn) is True
        conn.rollback()
    again = client.receive("q", "c", max_messages=3)
    assert (again.id, [m.msg_id for m in again]) == (page.id, ids)
    assert again.ack() is True


def test_receive_never_takes_a_batch_whose_ticks_are_gone_for_empty(
    client: pglogq.Client, sql: psycopg.Connection[Any]
) -> None:
    """An open batch whose tick row vanished (what a prune racing a seek could do):
    receive found "no events" in it and closed it, skipping them; now it refuses (PQ017) and
    keeps the batch, so a forced seek back can recover the events."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(3)])
    client.tick("q", force=True)
    page = client.receive("q", "c", max_messages=1)
    assert page.ack() is True
    prev = one(sql, "SELECT batch_prev_tick FROM pglogq.subscription WHERE consumer_name = 'c'")
    saved = sql.execute("DELETE FROM pglogq.tick WHERE tick_id = %s RETURNING *", (prev,)).fetchone()
    before = sql.execute("SELECT * FROM pglogq.subscription ORDER BY sub_id").fetchall()
    with pytest.raises(pglogq.SeekOutOfRange):
        client.receive("q", "c")
    assert sql.execute("SELECT * FROM pglogq.subscription ORDER BY sub_id").fetchall() == before
    assert open_batches(sql, "c") == 1
    # the tick back (as a seek to a kept tick would do): nothing was skipped
    sql.execute("INSERT INTO pglogq.tick VALUES (" + ", ".join(["%s"] * len(saved)) + ")", saved)
    assert [m.msg_id for m in client.receive("q", "c", max_messages=10)] == ids[1:]


def _receive_buffers(dsn: str, queue: str, consumer: str, generic: bool = False) -> int:
    """Shared buffers one receive touches (its whole work, from EXPLAIN ANALYZE BUFFERS), on a
    connection that ran the same receive once before (rolled back): what is counted is the work
    of the call, not the planning and catalog caching of a new connection, which grows with
    every function and index the schema has.  ``generic``: with the generic plans that a
    long-lived session ends up with (plan_cache_mode = force_generic_plan), not the custom plans of
    a fresh one, which see the parameters' values and may hide a bound no generic plan can use."""
    explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM pglogq.receive(%s, %s, 10)"
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        if generic:
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        with conn.transaction(force_rollback=True):
            conn.execute(explain, (queue, consumer))  # the warm-up: plans and caches
        row = conn.execute(explain, (queue, consumer)).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_taking_a_merged_batch_does_not_rescan_the_backlog(client: Any, dsn: str) -> None:
    """Found by the long chaos run: taking a batch that merges many ticks scanned every stored
    event once per tick (a sequential scan per tick), so with a large backlog each receive ran
    into the statement timeout and the consumers stopped moving.  The work of one receive must
    not grow with (ticks merged) x (events stored)."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.tick("q", force=True)
    client.receive("q", "c")  # the cursor is at the latest tick
    for _ in range(80):
        client.send_batch("q", [{"pad": "x" * 200} for _ in range(100)])
        client.tick("q", force=True)
    small = _receive_buffers(dsn, "q", "c")
    for _ in range(80):
        client.send_batch("q", [{"pad": "x" * 200} for _ in range(100)])
        client.tick("q", force=True)
    # twice the backlog: the first batch (same ~100 ticks merged) must cost about the same
    large = _receive_buffers(dsn, "q", "c")
    assert large < small * 1.5 + 200, (small, large)
    assert small < 3000, small  # one batch of ~10000 events: a page, not the whole log per tick


def test_twin_consumers_cannot_ack_a_page_they_never_saw(client: Any, dsn: str) -> None:
    """Found by the long chaos run (two worker processes had the same name): process A acks
    page 1 and receives page 2; its twin B, still on page 1, then acked "the current page" —
    page 2, which B never saw; when A died before recording page 2, it was lost (44 events for
    one subscriber).  With the page's last message, B's ack is refused and page 2 comes again."""
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = client.send_batch("q", [{"n": i} for i in range(6)])
    client.tick("q", force=True)
    a1 = client.receive("q", "c", max_messages=2)
    b1 = client.receive("q", "c", max_messages=2)  # the twin gets the same page
    assert [m.msg_id for m in a1] == [m.msg_id for m in b1] == ids[:2]
    assert a1.ack() is True
    a2 = client.receive("q", "c", max_messages=2)  # A now holds page 2 ... and dies
    assert [m.msg_id for m in a2] == ids[2:4]
    with pytest.raises(pglogq.StaleBatch, match="acknowledged already"):
        b1.ack()
    with psycopg.connect(dsn, autocommit=True) as conn:  # the same through SQL
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pglogq.ack(%s, %s, %s::xid8)", (b1.id, ids[1], b1.messages[-1].txid))
        assert info.value.sqlstate == "PQ009"
    again = client.receive("q", "c", max_messages=2)
    assert [m.msg_id for m in again] == ids[2:4]  # page 2 was not acknowledged by the twin
    assert client.ack(again.id or 0, last=again.messages[-1]) is True
    rest = client.receive("q", "c", max_messages=10)
    assert [m.msg_id for m in rest] == ids[4:]
    assert rest.ack() is True
    with pytest.raises(pglogq.StaleBatch):  # the batch is finished: a late ack is refused too
        b1.ack()


def test_a_page_deep_in_a_streamed_batch_costs_what_the_first_one_does(client: Any, dsn: str) -> None:
    """Found by the 1,000,000-event drain (at 14,000 events/s): the page query of a
    streamed (big) batch had "after IS NULL OR (txid, id) > after", which cannot bound an index
    scan, so every page read the batch from its start and a drain was quadratic.  A page far into
    the batch must touch about as many buffers as the first one."""
    client.create_queue("q")
    client.subscribe("q", "c")
    client.set_queue_config("q", "big_batch_events", 100)  # 6,000 events: one streamed batch
    for _ in range(6):
        client.send_batch("q", [{"pad": "x" * 200} for _ in range(1000)])
    client.tick("q", force=True)
    first = _receive_buffers(dsn, "q", "c", generic=True)
    for _ in range(50):
        client.receive("q", "c", max_messages=100).ack()
    deep = _receive_buffers(dsn, "q", "c", generic=True)
    assert deep < first * 2 + 100, (first, deep)
