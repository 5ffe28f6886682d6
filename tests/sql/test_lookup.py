"""Job lookup (client.lookup / pglogq.lookup) and the paged list (client.jobs).

Every state is produced for real on a real server and looked up; the answer must never be wrong."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

import pglogq
from tests.support.db import TableReads
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick, rotate_all
from tests.support.waiting import wait_for


def states(client: pglogq.Client, msg_id: int, queue: str = "q") -> dict[str, str]:
    return {j.consumer: j.state for j in client.lookup(queue, msg_id)}


def rotate_once(client: pglogq.Client, dsn: str) -> bool | None:
    try:
        rotate_all(client, dsn, "q", ["a"], times=1)
    except AssertionError:  # other sessions' transactions hold the snapshots back: try again
        return None
    return True


def setup(client: pglogq.Client, *consumers: str) -> None:
    client.create_queue("q")
    for c in consumers or ("a",):
        client.subscribe("q", c)


def test_lookup_follows_an_event_through_its_life(api: pglogq.Client) -> None:
    client = api
    setup(client, "a", "b")
    m = client.send("q", {"report": 1}, type="report")
    assert states(client, m) == {"a": "waiting", "b": "waiting"}          # not ticked yet
    client.tick("q", force=True)
    assert states(client, m) == {"a": "waiting", "b": "waiting"}          # ticked, not received
    batch = client.receive("q", "a")
    [ja, jb] = client.lookup("q", m)
    assert (ja.state, ja.worker, ja.type) == ("in-flight", "a", "report") and jb.state == "waiting"
    assert client.report_progress(batch.id, m, percent=40, stage="rendering", worker="host:1:w1")
    ja = client.lookup("q", m)[0]
    assert (ja.state, ja.worker, ja.percent, ja.stage) == ("in-flight", "host:1:w1", 40.0, "rendering")
    assert ja.since is not None and ja.last_heartbeat is not None
    assert client.nack(batch.messages[0], reason="no data", retry_after=timedelta(hours=1)) == "retry"
    ja = client.lookup("q", m)[0]
    assert (ja.state, ja.attempts, ja.reason) == ("retry", 1, "no data") and ja.due_at is not None
    batch.ack()
    assert states(client, m) == {"a": "retry", "b": "waiting"}
    drain(client, "q", "b")
    assert states(client, m) == {"a": "retry", "b": "done"}


def test_lookup_retry_then_done_then_dead(client: pglogq.Client, dsn: str) -> None:
    setup(client)
    client.set_queue_config("q", "retry_delay", "0")
    client.set_queue_config("q", "max_retries", 1)
    m = client.send("q", {})
    for want in ("retry", "dead"):
        client.tick("q", force=True)
        batch = client.receive("q", "a")
        assert [x.msg_id for x in batch] == [m]
        assert client.nack(batch.messages[0], reason=f"try {want}") == want
        batch.ack()
        pump_and_tick(client, "q")
        if want == "retry":  # the redelivery is in the log again, for this consumer only
            assert states(client, m) == {"a": "waiting"}
    [j] = client.lookup("q", m)
    [d] = client.dlq_inspect("q")
    assert (j.state, j.dead_id, j.attempts, j.reason) == ("dead", d.dead_id, 2, "try dead")
    client.dlq_replay(d.dead_id)
    assert states(client, m) == {"a": "waiting"}
    drain(client, "q", "a")
    assert states(client, m) == {"a": "waiting"}  # not ticked yet: nothing to drain
    client.tick("q", force=True)
    drain(client, "q", "a")
    assert states(client, m) == {"a": "done"}


def test_lookup_waiting_in_an_open_batch_after_the_page(client: pglogq.Client) -> None:
    setup(client)
    first, second = client.send_batch("q", [{"n": 1}, {"n": 2}])
    client.tick("q", force=True)
    batch = client.receive("q", "a", max_messages=1)
    assert states(client, first) == {"a": "in-flight"}
    [j] = client.lookup("q", second)
    assert j.state == "waiting" and "open batch" in (j.detail or "")
    batch.ack()
    assert states(client, first) == {"a": "done"}
    assert states(client, second) == {"a": "waiting"}


def test_lookup_delayed_cancelled_skipped(client: pglogq.Client) -> None:
    setup(client)
    later = client.send("q", {}, delay=timedelta(hours=1))
    [j] = client.lookup("q", later)
    assert j.state == "waiting" and j.due_at is not None
    gone = client.send("q", {})
    assert client.cancel("q", gone)
    client.tick("q", force=True)
    assert states(client, gone) == {"a": "cancelled"}
    drain(client, "q", "a")
    assert states(client, gone) == {"a": "cancelled"}
    client.subscribe("q", "late")  # subscribed after the event was ticked: never handed it
    old = client.send("q", {})
    client.tick("q", force=True)
    client.subscribe("q", "later")
    drain(client, "q", "a")
    assert states(client, old) == {"a": "done", "late": "waiting", "later": "skipped"}
    client.seek("q", "late", to="latest")
    assert states(client, old)["late"] == "skipped"


def test_lookup_gone_rotated_rolled_back_uncommitted_cancelled_delayed(client: pglogq.Client, dsn: str) -> None:
    setup(client)
    m = client.send("q", {})
    for _ in range(3):  # every table emptied once (a busy shared server may delay each rotation)
        wait_for(lambda: rotate_once(client, dsn), timeout=120)
    [j] = client.lookup("q", m)
    assert j.state == "gone" and "rotated away, or" in (j.detail or "")
    later = client.send("q", {}, delay=timedelta(hours=1))
    assert client.cancel("q", later)
    assert states(client, later) == {"a": "gone"}  # a cancelled delayed send leaves no trace
    with psycopg.connect(dsn) as conn:
        rolled = conn.execute("SELECT pglogq.send('q', '{}')").fetchone()
        conn.rollback()
    assert rolled is not None
    client.tick("q", force=True)
    [j] = client.lookup("q", rolled[0])
    assert j.state == "gone" and "not rotated away" in (j.detail or "")
    # an open transaction's send is not committed yet either; after COMMIT it waits
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pglogq.send('q', '{}')").fetchone()
        assert row is not None
        client.tick("q", force=True)
        assert states(client, row[0]) == {"a": "gone"}
        conn.commit()
    assert states(client, row[0]) == {"a": "waiting"}


@pytest.mark.parametrize("bad", [0, -1, 2**63 - 1, 10**6])
def test_lookup_of_an_id_never_issued(client: pglogq.Client, bad: int) -> None:
    setup(client)
    client.send("q", {})
    with pytest.raises(pglogq.UnknownMessage) as exc:
        client.lookup("q", bad)
    assert exc.value.sqlstate == "PQ021"


def test_lookup_bad_arguments(client: pglogq.Client, dsn: str) -> None:
    setup(client)
    with pytest.raises(pglogq.UnknownMessage):
        client.lookup("q", 2**63)  # beyond bigint
    with pytest.raises(pglogq.InvalidArgument):
        client.lookup("q", "1")  # type: ignore[arg-type]
    with pytest.raises(pglogq.UnknownQueue):
        client.lookup("nope", 1)
    client.create_queue("other")
    o = client.send("other", {})
    with pytest.raises(pglogq.UnknownMessage):  # another queue's id: "q" never issued it
        client.lookup("q", o)
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as exc:
        conn.execute("SELECT * FROM pglogq.lookup('q', NULL)")
    assert exc.value.sqlstate == "PQ021"


def test_lookup_of_a_queue_without_consumers(client: pglogq.Client) -> None:
    client.create_queue("q")
    m = client.send("q", {})
    assert client.lookup("q", m) == []


def test_lookup_sees_cooperating_workers(client: pglogq.Client) -> None:
    setup(client)
    m1 = client.send("q", {})
    client.tick("q", force=True)
    m2 = client.send("q", {})
    client.tick("q", force=True)
    client.set_queue_config("q", "batch_max_events", 1)
    b1 = client.receive("q", "a", worker="w1")
    b2 = client.receive("q", "a", worker="w2")
    got = {b1.messages[0].msg_id: "w1", b2.messages[0].msg_id: "w2"}
    assert set(got) == {m1, m2}
    for mid, w in got.items():
        [j] = client.lookup("q", mid)
        assert (j.state, j.worker) == ("in-flight", w)
    b1.ack()
    b2.ack()
    assert states(client, m1) == states(client, m2) == {"a": "done"}


# -- jobs: the paged list ---------------------------------------------------------------------


def test_jobs_pages_through_everything_once_in_order(api: pglogq.Client) -> None:
    client = api
    setup(client, "a", "b")
    ids = client.send_batch("q", [{"n": i} for i in range(120)], type="mail")
    ids += client.send_batch("q", [{"n": i} for i in range(130)], type="report")
    client.tick("q", force=True)
    seen: list[tuple[str, int]] = []
    after = None
    pages = 0
    while True:
        page = client.jobs("q", limit=100, after=after)
        pages += 1
        seen += [(j.consumer, j.msg_id) for j in page]
        assert all(j.state == "waiting" for j in page)
        if len(page) < 100:
            break
        after = page[-1].cursor
    assert pages == 6 and seen == [("a", i) for i in ids] + [("b", i) for i in ids]
    assert [j.msg_id for j in client.jobs("q", "b", type="report", limit=1000)] == ids[120:]
    assert client.jobs("q", state="dead") == []


def test_jobs_lists_each_state(client: pglogq.Client) -> None:
    setup(client)
    client.set_type_config("q", "pay", "max_retries", 0)
    client.send("q", {}, delay=timedelta(hours=1))
    pay = client.send("q", {}, type="pay")
    mail = client.send("q", {}, type="mail")
    rep = client.send("q", {}, type="report")
    client.tick("q", force=True)
    batch = client.receive("q", "a")
    assert [m.msg_id for m in batch] == [pay, mail, rep]
    by_id = {m.msg_id: m for m in batch}
    client.nack(by_id[pay], reason="declined")
    client.nack(by_id[mail], reason="smtp down")
    by_state = {(j.state, j.msg_id) for j in client.jobs("q")}
    assert ("dead", pay) in by_state and ("retry", mail) in by_state and ("in-flight", rep) in by_state
    assert ("in-flight", pay) not in by_state and ("in-flight", mail) not in by_state
    assert [j.msg_id for j in client.jobs("q", state="in-flight")] == [rep]
    assert [j.reason for j in client.jobs("q", state="retry")] == ["smtp down"]
    [dead] = client.jobs("q", state="dead")
    assert dead.dead_id is not None and dead.reason == "declined"
    [waiting] = client.jobs("q", state="waiting")
    assert waiting.due_at is not None  # the delayed send
    batch.ack()
    assert [j.state for j in client.jobs("q")] == ["retry", "dead", "waiting"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"state": "running"}, pglogq.InvalidJobsQuery),
        ({"limit": 0}, pglogq.InvalidJobsQuery),
        ({"limit": -1}, pglogq.InvalidJobsQuery),
        ({"limit": 100001}, pglogq.InvalidJobsQuery),
        ({"limit": 2**31}, pglogq.InvalidJobsQuery),
        ({"after": "a/9/0/1"}, pglogq.InvalidJobsQuery),
        ({"after": "a/4/x/1"}, pglogq.InvalidJobsQuery),
        ({"after": ""}, pglogq.InvalidJobsQuery),
        ({"after": "a/4/99999999999999999999999/1"}, pglogq.InvalidJobsQuery),
        ({"after": "a/4/99999999999999999999/1"}, pglogq.InvalidJobsQuery),    # 20 digits, above 2^64
        ({"after": "a/4/1/9999999999999999999"}, pglogq.InvalidJobsQuery),     # above 2^63
        ({"consumer": "nobody"}, pglogq.UnknownConsumer),
    ],
)
def test_jobs_bad_arguments(client: pglogq.Client, kwargs: dict[str, object], error: type[Exception]) -> None:
    setup(client)
    client.send("q", {})
    with pytest.raises(error):
        client.jobs("q", **kwargs)  # type: ignore[arg-type]


def test_jobs_reads_an_open_batch_only_up_to_its_page(client: pglogq.Client, dsn: str) -> None:
    """A consumer holding a page of a batch of 20,000 events: every page of jobs read the whole
    batch (25 ms a page at 10,000 events, whatever max_rows).  It now reads from the cursor and
    stops at the page (in flight: at the end of the handed page), in index order; the pages
    still list every event once, in order; and jobs runs without JIT, whose compilation was
    most of a first page on a queue of millions of events."""
    setup(client, "c")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pglogq.send_batch('q', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 20000) g))"
        )
        conn.execute("SELECT pglogq.force_tick('q')")
        conn.execute("ANALYZE pglogq.event")
    handed = [m.msg_id for m in client.receive("q", "c", max_messages=100)]
    with psycopg.connect(dsn) as conn:
        for state, rows in (("in-flight", 100), ("waiting", 10)):
            before = TableReads(conn, r"event\_%")
            got = conn.execute(
                "SELECT msg_id, cursor FROM pglogq.jobs('q', 'c', in_state => %s, max_rows => 10)", (state,)
            ).fetchall()
            spent = TableReads(conn, r"event\_%") - before
            assert len(got) == 10
            assert spent.rows_read() <= rows + 20, (state, spent)  # (the empty children may be seq-scanned)
        # the next page from the last one's cursor, still bounded
        before = TableReads(conn, r"event\_%")
        nxt = conn.execute(
            "SELECT msg_id FROM pglogq.jobs('q', 'c', in_state => 'waiting', max_rows => 10, after => %s)",
            (got[-1][1],),
        ).fetchall()
        spent = TableReads(conn, r"event\_%") - before
        assert [r[0] for r in nxt] == [got[-1][0] + i for i in range(1, 11)]
        assert spent.rows_read() <= 30, spent
        flight = conn.execute("SELECT msg_id FROM pglogq.jobs('q', 'c', in_state => 'in-flight', max_rows => 1000)")
        assert [r[0] for r in flight] == handed
        for fn in ("jobs", "_open_batch_events"):
            config = conn.execute(
                "SELECT p.proconfig FROM pg_proc p WHERE p.pronamespace = 'pglogq'::regnamespace AND p.proname = %s",
                (fn,),
            ).fetchone()
            assert config is not None and "jit=off" in config[0], (fn, config)
