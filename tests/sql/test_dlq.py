"""The dead-letter queue: inspect, replay (to the consumer that dead-lettered only), purge."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.concurrent import Call, wait_blocked
from tests.support.db import state
from tests.support.draining import drain
from tests.support.maintenance import pump_and_tick, rotate_all

NOW = timedelta(0)


def kill(api: Any, consumer: str, msg_ids: list[int], reason: str = "bad") -> None:
    """Make ``consumer`` dead-letter ``msg_ids`` (max_retries is 1 in these tests)."""
    left = set(msg_ids)
    for _ in range(2):
        pump_and_tick(api, "q")
        batch = api.receive("q", consumer, max_messages=1000)
        for m in batch:
            if m.msg_id in left:
                result = batch.nack(m, retry_after=NOW, reason=f"{reason} {m.retry_count}")
                if result == "dead":
                    left.discard(m.msg_id)
        batch.ack()
    assert not left


@pytest.fixture
def dead(api: Any) -> tuple[Any, list[int]]:
    """Queue q, consumers a and b; a dead-lettered e1, e2 (type x) and e3 (type y); b none."""
    api.create_queue("q")
    api.subscribe("q", "a")
    api.subscribe("q", "b")
    api.set_queue_config("q", "max_retries", 1)
    ids = [api.send("q", {"n": 1}, type="x"), api.send("q", {"n": 2}, type="x"), api.send("q", {"n": 3}, type="y")]
    ok = api.send("q", {"n": 4}, type="x")
    kill(api, "a", ids)
    assert sorted(m.msg_id for m in drain(api, "q", "b")) == [*ids, ok]
    return api, ids


def test_inspect_lists_dead_letters_with_filters(dead: Any) -> None:
    api, ids = dead
    rows = api.dlq_inspect("q")
    assert [r.msg_id for r in rows] == ids  # oldest first
    r = rows[0]
    assert isinstance(r, pglogq.DeadLetter)
    assert (r.queue_name, r.consumer_name, r.type, r.payload, r.headers) == ("q", "a", "x", {"n": 1}, None)
    assert (r.retry_count, r.reason) == (1, "bad 1")
    assert r.created_at <= r.first_failed_at <= r.failed_at
    assert [x.msg_id for x in api.dlq_inspect("q", "a", limit=2)] == ids[:2]
    assert api.dlq_inspect("q", "b") == []
    assert [x.msg_id for x in api.dlq_inspect("q", type="y")] == [ids[2]]
    assert api.dlq_inspect("q", older_than=timedelta(hours=1)) == []
    assert len(api.dlq_inspect("q", older_than=NOW)) == 3


def test_inspect_from_sql_has_named_columns(dead: Any, dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute("SELECT * FROM pglogq.dlq_inspect('q', consumer_name => 'a', max_rows => 1)")
        assert [d.name for d in cur.description or []] == [
            "dead_id", "queue", "consumer", "msg_id", "type", "payload", "headers", "retry_count",
            "reason", "created_at", "first_failed_at", "failed_at",
        ]  # fmt: skip
        assert len(cur.fetchall()) == 1


def test_replay_goes_back_to_that_consumer_only_once(dead: Any, dsn: str) -> None:
    api, ids = dead
    row = api.dlq_inspect("q")[1]
    assert api.dlq_replay(row.dead_id) == ids[1]
    api.tick("q", force=True)
    got = drain(api, "q", "a")
    assert [(m.msg_id, m.payload, m.type, m.retry_count) for m in got] == [(ids[1], {"n": 2}, "x", 0)]
    assert drain(api, "q", "b") == []
    assert [x.msg_id for x in api.dlq_inspect("q")] == [ids[0], ids[2]]
    before = state(dsn)
    with pytest.raises(pglogq.UnknownDeadLetter) as e:
        api.dlq_replay(row.dead_id)
    assert e.value.sqlstate == "PQ012"
    assert state(dsn) == before
    pump_and_tick(api, "q")
    assert drain(api, "q", "a") == []


def test_replayed_event_gets_max_retries_again_then_dies_again(dead: Any) -> None:
    api, ids = dead
    api.dlq_replay(api.dlq_inspect("q")[0].dead_id)
    kill(api, "a", [ids[0]], reason="still bad")
    rows = [r for r in api.dlq_inspect("q") if r.msg_id == ids[0]]
    assert len(rows) == 1 and rows[0].reason == "still bad 1"


def test_concurrent_replays_replay_once(dead: Any, dsn: str) -> None:
    api, ids = dead
    dead_id = api.dlq_inspect("q")[0].dead_id
    with psycopg.connect(dsn) as first:
        assert first.execute("SELECT pglogq.dlq_replay(%s)", (dead_id,)).fetchone() == (ids[0],)
        second = Call(dsn, lambda c: c.execute("SELECT pglogq.dlq_replay(%s)", (dead_id,)).fetchone())
        second.start()
        wait_blocked(dsn, second.pid)  # both are in dlq_replay at once
        first.commit()
    with pytest.raises(psycopg.Error) as e:
        second.outcome()
    assert e.value.sqlstate == "PQ012"
    api.tick("q", force=True)
    assert [m.msg_id for m in drain(api, "q", "a")] == [ids[0]]


def test_concurrent_replay_all_replays_each_once(dead: Any, dsn: str) -> None:
    api, ids = dead
    one = api.dlq_inspect("q")[2].dead_id
    with psycopg.connect(dsn) as first:
        assert first.execute("SELECT pglogq.dlq_replay_all('q')").fetchone() == (3,)
        second = Call(dsn, lambda c: c.execute("SELECT pglogq.dlq_replay_all('q', 'a')").fetchone())
        third = Call(dsn, lambda c: c.execute("SELECT pglogq.dlq_replay(%s)", (one,)).fetchone())
        second.start()
        third.start()
        wait_blocked(dsn, second.pid)
        wait_blocked(dsn, third.pid)
        first.commit()
    assert second.outcome() == (0,)
    with pytest.raises(psycopg.Error) as e:
        third.outcome()
    assert e.value.sqlstate == "PQ012"
    api.tick("q", force=True)
    assert sorted(m.msg_id for m in drain(api, "q", "a")) == ids
    assert drain(api, "q", "b") == []


def test_replay_all_by_consumer_and_type(api: Any) -> None:
    api.create_queue("q")
    for c in ("a", "b", "c"):
        api.subscribe("q", c)
    api.set_queue_config("q", "max_retries", 1)
    e1 = api.send("q", {"n": 1}, type="x")
    e2 = api.send("q", {"n": 2}, type="y")
    kill(api, "a", [e1, e2])
    kill(api, "b", [e1])
    drain(api, "q", "c")
    assert api.dlq_replay_all("q", "a", type="y") == 1
    assert api.dlq_replay_all("q", "a", older_than=timedelta(hours=1)) == 0
    api.tick("q", force=True)
    assert [m.msg_id for m in drain(api, "q", "a")] == [e2]
    assert drain(api, "q", "b") == [] and drain(api, "q", "c") == []
    assert api.dlq_replay_all("q") == 2  # a's e1 and b's e1, each to its own consumer
    api.tick("q", force=True)
    assert [m.msg_id for m in drain(api, "q", "a")] == [e1]
    assert [m.msg_id for m in drain(api, "q", "b")] == [e1]
    assert drain(api, "q", "c") == []
    assert api.dlq_replay_all("q") == 0


def test_replay_all_max_rows_replays_the_oldest_first(dead: Any) -> None:
    """max_rows: at most that many, oldest first; None (the default) replays all that remain."""
    api, ids = dead
    assert api.dlq_replay_all("q", "a", max_rows=1) == 1
    assert [r.msg_id for r in api.dlq_inspect("q")] == ids[1:]
    assert api.dlq_replay_all("q", type="x", max_rows=2**31 - 1) == 1  # the int4 maximum: e2 only
    assert [r.msg_id for r in api.dlq_inspect("q")] == ids[2:]
    assert api.dlq_replay_all("q", max_rows=None) == 1
    assert api.dlq_replay_all("q", max_rows=1) == 0
    api.tick("q", force=True)
    assert [m.msg_id for m in drain(api, "q", "a")] == ids
    assert drain(api, "q", "b") == []


def test_purge_by_age_consumer_and_type(dead: Any, dsn: str) -> None:
    api, ids = dead
    with psycopg.connect(dsn) as conn:  # e1 died two days ago, e2 an hour ago
        conn.execute("UPDATE pglogq.dead_letter SET failed_at = now() - interval '2 days' WHERE msg_id = %s", (ids[0],))
        conn.execute("UPDATE pglogq.dead_letter SET failed_at = now() - interval '1 hour' WHERE msg_id = %s", (ids[1],))
        conn.commit()
    assert api.dlq_purge("q", older_than=timedelta(days=1)) == 1
    assert [r.msg_id for r in api.dlq_inspect("q")] == ids[1:]
    assert api.dlq_purge("q", older_than=timedelta(days=1)) == 0
    assert api.dlq_purge("q", type="y", consumer="b") == 0
    assert api.dlq_purge("q", type="y", consumer="a") == 1
    assert api.dlq_purge("q") == 1
    assert api.dlq_inspect("q") == []
    pump_and_tick(api, "q")
    assert drain(api, "q", "a") == []  # purged means gone, not replayed


def test_dead_letters_survive_rotation_and_replay_after_it(dead: Any, dsn: str) -> None:
    api, ids = dead
    assert rotate_all(api, dsn, "q", ["a", "b"]) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pglogq.event").fetchone() == (0,)
    assert api.dlq_replay_all("q", "a") == 3
    api.tick("q", force=True)
    assert [(m.msg_id, m.payload["n"]) for m in drain(api, "q", "a")] == [(ids[0], 1), (ids[1], 2), (ids[2], 3)]
    assert drain(api, "q", "b") == []


@pytest.mark.parametrize(
    ("call", "error", "code"),
    [
        (lambda api: api.dlq_inspect("nope"), pglogq.UnknownQueue, "PQ001"),
        (lambda api: api.dlq_inspect("q", "nobody"), pglogq.UnknownConsumer, "PQ002"),
        (lambda api: api.dlq_inspect("q", limit=0), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_inspect("q", limit=100001), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_inspect("q", older_than=timedelta(seconds=-1)), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay(10**12), pglogq.UnknownDeadLetter, "PQ012"),
        (lambda api: api.dlq_replay(-1), pglogq.UnknownDeadLetter, "PQ012"),
        (lambda api: api.dlq_replay_all("nope"), pglogq.UnknownQueue, "PQ001"),
        (lambda api: api.dlq_replay_all("q", "nobody"), pglogq.UnknownConsumer, "PQ002"),
        (lambda api: api.dlq_replay_all("q", older_than=timedelta(days=-1)), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows=0), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows=-1), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows=-(2**63)), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows=2**31), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows=True), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_replay_all("q", max_rows="1"), pglogq.InvalidArgument, "PQ019"),
        (lambda api: api.dlq_purge("nope"), pglogq.UnknownQueue, "PQ001"),
        (lambda api: api.dlq_purge("q", consumer="nobody"), pglogq.UnknownConsumer, "PQ002"),
        (lambda api: api.dlq_purge("q", older_than=timedelta(minutes=-5)), pglogq.InvalidArgument, "PQ019"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(dead: Any, dsn: str, call: Any, error: type, code: str) -> None:
    api, _ = dead
    before = state(dsn)
    with pytest.raises(error) as e:
        call(api)
    assert e.value.sqlstate == code
    assert state(dsn) == before


def test_dlq_functions_are_admin_only(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT p.proname, r.rolname, has_function_privilege(r.rolname, p.oid, 'EXECUTE')"
            "  FROM pg_proc p CROSS JOIN (VALUES ('pglogq_writer'), ('pglogq_reader'), ('pglogq_admin'), ('public'))"
            "       AS r(rolname)"
            " WHERE p.pronamespace = 'pglogq'::regnamespace AND (p.proname LIKE 'dlq%%' OR p.proname = 'cancel')"
            "   AND r.rolname <> 'public'"
        ).fetchall()
        public = conn.execute(
            "SELECT count(*) FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
            " WHERE p.pronamespace = 'pglogq'::regnamespace AND (p.proname LIKE 'dlq%%' OR p.proname = 'cancel')"
            "   AND a.grantee = 0"
        ).fetchone()
    allowed = {(name, role) for name, role, ok in rows if ok}
    for name in ("dlq_inspect", "dlq_replay", "dlq_replay_all", "dlq_purge"):
        assert {r for n, r in allowed if n == name} == {"pglogq_admin"}, name
    assert {r for n, r in allowed if n == "cancel"} == {"pglogq_writer", "pglogq_admin"}
    assert public == (0,)


# Each bad filter with what it must raise: (queue, consumer, type, older_than) in the order every
# dlq_ function takes them.
TYPOS = [
    (("nosuchq", None, None, None), "PQ001"),
    (("q", "ghost", None, None), "PQ002"),
    (("q", None, None, "-1 day"), "PQ019"),
]


@pytest.mark.parametrize("function", ["dlq_purge", "dlq_count", "dlq_inspect", "dlq_replay_all", "dlq_search"])
def test_filters_are_checked_with_no_dead_letter_stored(dsn: str, function: str) -> None:
    """A typo is an error whatever the dead_letter table holds: dlq_purge answered 0 to an
    unknown queue, an unknown consumer and a negative older_than while no dead letter was
    stored anywhere (its checks sat in the set-returning selection, which the executor never
    called for a DELETE over an empty table)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pglogq.create_queue('q')")
        conn.execute("SELECT pglogq.subscribe('q', 'c')")
        assert conn.execute("SELECT count(*) FROM pglogq.dead_letter").fetchone() == (0,)
        before = state(dsn)
        for args, code in TYPOS:
            with pytest.raises(psycopg.Error) as e:
                conn.execute(f"SELECT * FROM pglogq.{function}(%s, %s, %s, %s::interval)", args)
            assert e.value.sqlstate == code, (function, args)
        assert state(dsn) == before
        # and the good filters still answer: nothing stored, nothing matched
        for args in (("q", None, None, None), ("q", "c", "t", "1 day")):
            conn.execute(f"SELECT * FROM pglogq.{function}(%s, %s, %s, %s::interval)", args).fetchall()


def test_client_dlq_purge_checks_with_no_dead_letter_stored(api: Any, dsn: str) -> None:
    """The Python client's dlq_purge (blocking and asyncio) raises what dlq_count raises with the
    same filters on a database with no dead letter at all, and deletes nothing."""
    api.create_queue("q")
    api.subscribe("q", "c")
    before = state(dsn)
    for kwargs, error in (
        ({"queue": "nosuchq"}, pglogq.UnknownQueue),
        ({"queue": "q", "consumer": "ghost"}, pglogq.UnknownConsumer),
        ({"queue": "q", "older_than": timedelta(days=-1)}, pglogq.InvalidArgument),
    ):
        for call in (api.dlq_count, api.dlq_purge):
            with pytest.raises(error):
                call(**kwargs)
    assert state(dsn) == before
    assert api.dlq_purge("q", "c", type="t", older_than=timedelta(days=1)) == 0
